#include "membership/etcd_client.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <nlohmann/json.hpp>

namespace pfsnet {

using nlohmann::json;

std::string base64_encode(const std::string& s) {
  std::string out(4 * ((s.size() + 2) / 3), '\0');
  int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<std::string> base64_decode(const std::string& s) {
  if (s.size() % 4 != 0) return std::nullopt;
  std::string out(3 * (s.size() / 4), '\0');
  int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding's zero bytes.
  size_t pad = 0;
  for (size_t i = s.size(); i > 0 && s[i - 1] == '=' && pad < 2; --i) ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

namespace {

// etcd's gateway writes int64s as strings ("5"), and leaves out fields at their zero.
int64_t etcd_int(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

Result<json> etcd_json(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Status(Code::kProtocol, "etcd: not a JSON object: " + body.substr(0, 200));
  if (j.contains("error") || (j.contains("code") && j.contains("message")))
    return Status(Code::kRemoteError, "etcd: " + j.value("message", j.dump().substr(0, 200)));
  return j;
}

}  // namespace

struct EtcdClient::Endpoint {
  std::string name;  // host:port
  httplib::Client http;
  Endpoint(const std::string& host, int port)
      : name(host + ":" + std::to_string(port)), http(host, port) {}
};

Result<std::unique_ptr<EtcdClient>> EtcdClient::create(const std::vector<std::string>& endpoints,
                                                       Duration timeout) {
  if (endpoints.empty()) return Status(Code::kInvalidArgument, "etcd: no endpoints");
  std::vector<std::unique_ptr<Endpoint>> eps;
  for (std::string e : endpoints) {
    if (e.rfind("https://", 0) == 0)
      return Status(Code::kInvalidArgument, "etcd endpoint " + e + ": https is not supported");
    if (e.rfind("http://", 0) == 0) e = e.substr(7);
    while (!e.empty() && e.back() == '/') e.pop_back();
    auto colon = e.rfind(':');
    int port = 0;
    if (colon != std::string::npos && colon + 1 < e.size()) {
      try {
        size_t used = 0;
        port = std::stoi(e.substr(colon + 1), &used);
        if (used != e.size() - colon - 1) port = 0;
      } catch (...) {
        port = 0;
      }
    }
    if (colon == std::string::npos || colon == 0 || port <= 0 || port > 65535)
      return Status(Code::kInvalidArgument, "etcd endpoint '" + e + "': want http://HOST:PORT");
    auto ep = std::make_unique<Endpoint>(e.substr(0, colon), port);
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(timeout).count();
    ep->http.set_connection_timeout(us / 1000000, us % 1000000);
    ep->http.set_read_timeout(us / 1000000, us % 1000000);
    ep->http.set_write_timeout(us / 1000000, us % 1000000);
    ep->http.set_keep_alive(true);
    eps.push_back(std::move(ep));
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(eps)));
}

EtcdClient::EtcdClient(std::vector<std::unique_ptr<Endpoint>> eps) : eps_(std::move(eps)) {}
EtcdClient::~EtcdClient() = default;

std::string EtcdClient::endpoint() const { return eps_[cur_]->name; }

Result<std::string> EtcdClient::post(const std::string& path, const std::string& body) {
  std::string errors;
  for (size_t i = 0; i < eps_.size(); ++i) {
    size_t k = (cur_ + i) % eps_.size();
    Endpoint& ep = *eps_[k];
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body;
    req.set_header("Content-Type", "application/json");
    int status = 0;
    std::string answer;
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      answer.append(d, n);
      return answer.size() <= (4u << 20);
    };
    auto r = ep.http.send(req);
    // The gateway ends an error answer's chunked body with a gRPC trailer, which this
    // cpp-httplib (0.11) cannot read: the call "fails" after the whole answer came. The
    // answer is what counts.
    if (!r && (status == 0 || answer.empty())) {
      errors += (errors.empty() ? "" : "; ") + ep.name + ": " + httplib::to_string(r.error());
      continue;
    }
    cur_ = k;
    if (status != 200 && answer.empty())
      return Status(Code::kRemoteError,
                    "etcd " + ep.name + path + ": HTTP " + std::to_string(status));
    return answer;
  }
  return Status(Code::kUnreachable, "etcd: " + errors);
}

Result<EtcdClient::Grant> EtcdClient::grant(Duration ttl) {
  auto s = std::chrono::ceil<std::chrono::seconds>(ttl).count();
  auto r = post("/v3/lease/grant", json{{"TTL", std::max<int64_t>(1, s)}}.dump());
  if (!r.ok()) return r.status();
  auto j = etcd_json(*r);
  if (!j.ok()) return j.status();
  Grant g;
  g.lease = etcd_int(*j, "ID");
  g.ttl = std::chrono::seconds(etcd_int(*j, "TTL"));
  if (g.lease == 0 || g.ttl <= Duration::zero())
    return Status(Code::kProtocol, "etcd: lease grant without an ID or TTL: " + *r);
  return g;
}

Result<Duration> EtcdClient::keepalive(int64_t lease) {
  auto r = post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump());
  if (!r.ok()) return r.status();
  // A stream of one answer: {"result": {...}}.
  auto j = etcd_json(*r);
  if (!j.ok()) return j.status();
  auto it = j->find("result");
  if (it == j->end() || !it->is_object())
    return Status(Code::kProtocol, "etcd: keepalive without a result: " + *r);
  return Duration(std::chrono::seconds(etcd_int(*it, "TTL")));  // absent: the lease is gone
}

Status EtcdClient::revoke(int64_t lease) {
  auto r = post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  if (!r.ok()) return r.status();
  auto j = etcd_json(*r);
  return j.ok() ? Status::Ok() : j.status();
}

Result<LeaderLease::Campaign> EtcdClient::campaign(const std::string& key, const std::string& value,
                                                   int64_t lease) {
  const std::string k = base64_encode(key);
  json txn = {
      {"compare", json::array({{{"key", k}, {"target", "CREATE"}, {"create_revision", "0"}}})},
      {"success",
       json::array(
           {{{"requestPut",
              {{"key", k}, {"value", base64_encode(value)}, {"lease", std::to_string(lease)}}}}})},
      {"failure", json::array({{{"requestRange", {{"key", k}}}}})}};
  auto r = post("/v3/kv/txn", txn.dump());
  if (!r.ok()) return r.status();
  auto j = etcd_json(*r);
  if (!j.ok()) return j.status();
  LeaderLease::Campaign c;
  c.won = j->value("succeeded", false);
  if (c.won) {
    // The put's revision is the key's create revision.
    c.epoch = static_cast<uint64_t>(etcd_int(j->value("header", json::object()), "revision"));
    c.leader = value;
    c.leader_lease = lease;
    if (c.epoch == 0) return Status(Code::kProtocol, "etcd: a won campaign without a revision");
    return c;
  }
  const json resp = j->value("responses", json::array());
  if (!resp.is_array() || resp.empty()) return c;  // (cannot happen: the key exists)
  const json range = resp[0].value("response_range", json::object());
  const json kvs = range.value("kvs", json::array());
  if (!kvs.is_array() || kvs.empty()) return c;
  const json& kv = kvs[0];
  auto v = base64_decode(kv.value("value", ""));
  if (!v) return Status(Code::kProtocol, "etcd: the leader key's value is not base64");
  c.leader = *v;
  c.epoch = static_cast<uint64_t>(etcd_int(kv, "create_revision"));
  c.leader_lease = etcd_int(kv, "lease");
  return c;
}

Status EtcdClient::put_if_leader(const std::string& leader_key, uint64_t epoch,
                                 const std::vector<std::pair<std::string, std::string>>& kvs) {
  if (kvs.size() > 64) return Status(Code::kInvalidArgument, "etcd: more than 64 puts in one");
  json puts = json::array();
  for (const auto& [k, v] : kvs)
    puts.push_back({{"requestPut", {{"key", base64_encode(k)}, {"value", base64_encode(v)}}}});
  json txn = {{"compare", json::array({{{"key", base64_encode(leader_key)},
                                        {"target", "CREATE"},
                                        {"create_revision", std::to_string(epoch)}}})},
              {"success", puts}};
  auto r = post("/v3/kv/txn", txn.dump());
  if (!r.ok()) return r.status();
  auto j = etcd_json(*r);
  if (!j.ok()) return j.status();
  if (!j->value("succeeded", false))
    return Status(Code::kRejected,
                  "etcd: the leader key is not of epoch " + std::to_string(epoch) + " any more");
  return Status::Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> EtcdClient::range_prefix(
    const std::string& prefix) {
  if (prefix.empty() || static_cast<unsigned char>(prefix.back()) == 0xff)
    return Status(Code::kInvalidArgument, "etcd: a prefix must not be empty or end in 0xff");
  std::string end = prefix;
  end.back() = static_cast<char>(end.back() + 1);
  std::vector<std::pair<std::string, std::string>> out;
  std::string from = prefix;
  for (int page = 0; page < 100000; ++page) {
    json q = {{"key", base64_encode(from)}, {"range_end", base64_encode(end)}, {"limit", "16"}};
    auto r = post("/v3/kv/range", q.dump());
    if (!r.ok()) return r.status();
    auto j = etcd_json(*r);
    if (!j.ok()) return j.status();
    const json kvs = j->value("kvs", json::array());
    if (!kvs.is_array()) return Status(Code::kProtocol, "etcd: a range without kvs");
    for (const json& kv : kvs) {
      auto k = base64_decode(kv.value("key", ""));
      auto v = base64_decode(kv.value("value", ""));
      if (!k || !v) return Status(Code::kProtocol, "etcd: a key or value that is not base64");
      out.emplace_back(std::move(*k), std::move(*v));
    }
    if (!j->value("more", false) || kvs.empty()) return out;
    from = out.back().first + std::string(1, '\0');  // the next key after the last
  }
  return Status(Code::kProtocol, "etcd: a range without end");
}

}  // namespace pfsnet
