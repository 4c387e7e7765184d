// parse_config: a TOML config file read key by key, each checked against its range, with
// errors that name the file, line and key; load_config and the secret files.
#include <fmt/format.h>
#include <pfsnet/config.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "base/job_id.h"

namespace pfsnet {
namespace {

struct Ctx {
  std::string origin;
};

Status err(const Ctx& c, const toml::source_region& src, std::string_view key,
           std::string_view why) {
  std::string where = c.origin;
  if (src.begin.line > 0) where += ":" + std::to_string(src.begin.line);
  return Status(Code::kInvalidArgument,
                where + ": key '" + std::string(key) + "': " + std::string(why));
}

// One key of a table: how to read it into the Config.
using Reader = std::function<Status(const Ctx&, const toml::node&, std::string_view key)>;

Reader int_key(int64_t* out, int64_t lo, int64_t hi) {
  return [=](const Ctx& c, const toml::node& n, std::string_view key) -> Status {
    auto v = n.value_exact<int64_t>();
    if (!v) return err(c, n.source(), key, "must be an integer");
    if (*v < lo || *v > hi)
      return err(c, n.source(), key,
                 "value " + std::to_string(*v) + " is out of range " + std::to_string(lo) + ".." +
                     std::to_string(hi));
    *out = *v;
    return Status::Ok();
  };
}

Reader bool_key(bool* out) {
  return [=](const Ctx& c, const toml::node& n, std::string_view key) -> Status {
    auto v = n.value_exact<bool>();
    if (!v) return err(c, n.source(), key, "must be true or false");
    *out = *v;
    return Status::Ok();
  };
}

Reader number_key(double* out, double lo, double hi) {
  return [=](const Ctx& c, const toml::node& n, std::string_view key) -> Status {
    if (!n.is_number()) return err(c, n.source(), key, "must be a number");
    double v = *n.value<double>();
    if (!(v >= lo && v <= hi))
      return err(c, n.source(), key,
                 fmt::format("value {:g} is out of range {:g}..{:g}", v, lo, hi));
    *out = v;
    return Status::Ok();
  };
}

Reader string_key(std::string* out, bool allow_empty) {
  return [=](const Ctx& c, const toml::node& n, std::string_view key) -> Status {
    auto v = n.value_exact<std::string>();
    if (!v) return err(c, n.source(), key, "must be a string");
    if (!allow_empty && v->empty()) return err(c, n.source(), key, "must not be empty");
    *out = *v;
    return Status::Ok();
  };
}

Status string_array(const Ctx& c, const toml::node& n, std::string_view key,
                    const std::function<Status(const std::string&, const toml::node&)>& each) {
  const toml::array* arr = n.as_array();
  if (!arr) return err(c, n.source(), key, "must be an array of strings");
  for (const toml::node& e : *arr) {
    auto v = e.value_exact<std::string>();
    if (!v) return err(c, e.source(), key, "must be an array of strings");
    Status s = each(*v, e);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status read_table(const Ctx& c, const toml::table& t, std::string_view section,
                  const std::map<std::string, Reader, std::less<>>& keys) {
  for (const auto& [k, v] : t) {
    std::string full = std::string(section) + "." + std::string(k.str());
    auto it = keys.find(k.str());
    if (it == keys.end()) return err(c, k.source(), full, "unknown key");
    Status s = it->second(c, v, full);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Checks node.http and gives it its host: "PORT" and ":PORT" bind 127.0.0.1.
Status validate_http(std::string* http_in) {
  std::string& http = *http_in;
  if (http.empty()) return Status::Ok();
  auto colon = http.rfind(':');
  if (colon == std::string::npos) {
    http = ":" + http;
    colon = 0;
  }
  if (colon == 0) http = "127.0.0.1" + http;
  colon = http.rfind(':');
  try {
    size_t used = 0;
    int port = std::stoi(http.substr(colon + 1), &used);
    if (used != http.size() - colon - 1 || port < 1 || port > 65535)
      return Status(Code::kInvalidArgument, "must be HOST:PORT, :PORT or PORT (port 1..65535)");
  } catch (...) {
    return Status(Code::kInvalidArgument, "must be HOST:PORT, :PORT or PORT (port 1..65535)");
  }
  return Status::Ok();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

Status check_route(const RouteConfig& r, const std::vector<NetConfig>& nets) {
  const std::string what = "route to " + lnet_net_name(r.net) + " via " + r.gateway.to_string();
  bool gateway_local = false;
  for (const NetConfig& n : nets) {
    if (n.nid.net() == r.net)
      return Status(Code::kInvalidArgument, what + ": " + lnet_net_name(r.net) +
                                                " is a network of this node (" + n.nid.to_string() +
                                                "): its NIDs are reached directly");
    gateway_local |= n.nid.net() == r.gateway.net() && n.nid.addr_len == r.gateway.addr_len;
    if (n.nid == r.gateway)
      return Status(Code::kInvalidArgument, what + ": the gateway is this node's own NI");
  }
  if (!gateway_local)
    return Status(Code::kInvalidArgument,
                  what + ": the gateway must be on a network this node has an NI on");
  if (r.hops < 1 || r.hops > kMaxRouteHops)
    return Status(Code::kInvalidArgument,
                  what + ": hops must be 1.." + std::to_string(kMaxRouteHops));
  if (r.priority < 0 || r.priority > kMaxRoutePriority)
    return Status(Code::kInvalidArgument,
                  what + ": priority must be 0.." + std::to_string(kMaxRoutePriority));
  return Status::Ok();
}

Status check_routes(const std::vector<RouteConfig>& routes, const std::vector<NetConfig>& nets) {
  for (size_t i = 0; i < routes.size(); ++i) {
    if (Status s = check_route(routes[i], nets); !s.ok()) return s;
    for (size_t j = 0; j < i; ++j)
      if (routes[j].net == routes[i].net && routes[j].gateway == routes[i].gateway)
        return Status(Code::kInvalidArgument, "route to " + lnet_net_name(routes[i].net) + " via " +
                                                  routes[i].gateway.to_string() + " given twice");
  }
  return Status::Ok();
}

Result<Config> parse_config(std::string_view text, std::string_view origin) {
  Ctx c{std::string(origin)};
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    return Status(Code::kInvalidArgument, std::string(origin) + ":" +
                                              std::to_string(e.source().begin.line) +
                                              ": syntax error: " + std::string(e.description()));
  }

  Config cfg;
  cfg.node.name = host_name();

  const std::map<std::string, Reader, std::less<>> node_keys = {
      {"name", string_key(&cfg.node.name, false)},
      {"roles",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         cfg.node.roles.clear();
         return string_array(c, n, key, [&](const std::string& r, const toml::node& e) {
           if (r != "client" && r != "server" && r != "mgs")
             return err(c, e.source(), key,
                        "unknown role '" + r + "' (expected client, server or mgs)");
           cfg.node.roles.push_back(r);
           return Status::Ok();
         });
       }},
      {"mgs",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         cfg.node.mgs.clear();
         return string_array(c, n, key, [&](const std::string& s, const toml::node& e) {
           auto nid = Nid::parse(s);
           if (!nid.ok()) return err(c, e.source(), key, nid.status().message());
           cfg.node.mgs.push_back(*nid);
           return Status::Ok();
         });
       }},
      {"cluster_key_file", string_key(&cfg.node.cluster_key_file, false)},
      {"log_level",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         Status s = string_key(&cfg.node.log_level, false)(c, n, key);
         if (!s.ok()) return s;
         for (const char* l : {"trace", "debug", "info", "warn", "error", "off"})
           if (cfg.node.log_level == l) return Status::Ok();
         return err(c, n.source(), key, "must be one of trace, debug, info, warn, error, off");
       }},
      {"log_format",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         Status s = string_key(&cfg.node.log_format, false)(c, n, key);
         if (!s.ok()) return s;
         if (cfg.node.log_format == "text" || cfg.node.log_format == "json") return Status::Ok();
         return err(c, n.source(), key, "must be text or json");
       }},
      {"admin_socket", string_key(&cfg.node.admin_socket, false)},
      {"http",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         Status s = string_key(&cfg.node.http, true)(c, n, key);
         if (!s.ok()) return s;
         Status h = validate_http(&cfg.node.http);
         return h.ok() ? h : err(c, n.source(), key, h.message());
       }},
      {"http_token_file", string_key(&cfg.node.http_token_file, true)},
  };
  const std::map<std::string, Reader, std::less<>> tls_keys = {
      {"enabled", bool_key(&cfg.tls.enabled)},
      {"cert_file", string_key(&cfg.tls.cert_file, true)},
      {"key_file", string_key(&cfg.tls.key_file, true)},
      {"ca_file", string_key(&cfg.tls.ca_file, true)},
      {"records",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         Status s = string_key(&cfg.tls.records, false)(c, n, key);
         if (!s.ok()) return s;
         if (cfg.tls.records == "ipsec-mb" || cfg.tls.records == "openssl") return Status::Ok();
         return err(c, n.source(), key, "must be one of ipsec-mb, openssl");
       }},
  };
  const std::map<std::string, Reader, std::less<>> lnet_keys = {
      {"credits", int_key(&cfg.lnet.credits, 1, 1 << 20)},
      {"peer_credits", int_key(&cfg.lnet.peer_credits, 1, 1 << 16)},
      {"transaction_timeout", int_key(&cfg.lnet.transaction_timeout, 1, 3600)},
      {"retry_count", int_key(&cfg.lnet.retry_count, 0, 100)},
      {"health_sensitivity", int_key(&cfg.lnet.health_sensitivity, 0, 1000)},
      {"recovery_interval", int_key(&cfg.lnet.recovery_interval, 1, 3600)},
      {"min_reconnect_ms", int_key(&cfg.lnet.min_reconnect_ms, 1, 600000)},
      {"max_reconnect_ms", int_key(&cfg.lnet.max_reconnect_ms, 1, 3600000)},
      {"busy_poll_us", int_key(&cfg.lnet.busy_poll_us, 0, 10000)},
      {"checksum", bool_key(&cfg.lnet.checksum)},
      {"tx_buffer_size", int_key(&cfg.lnet.tx_buffer_size, 0, int64_t(1) << 30)},
      {"rx_buffer_size", int_key(&cfg.lnet.rx_buffer_size, 0, int64_t(1) << 30)},
      {"conns_per_peer", int_key(&cfg.lnet.conns_per_peer, 1, 16)},
      {"io_threads", int_key(&cfg.lnet.io_threads, 0, 256)},
      {"zc_min_payload", int_key(&cfg.lnet.zc_min_payload, 0, int64_t(1) << 30)},
      {"routing", bool_key(&cfg.lnet.routing)},
      {"tiny_router_buffers", int_key(&cfg.lnet.tiny_router_buffers, 1, 1 << 20)},
      {"small_router_buffers", int_key(&cfg.lnet.small_router_buffers, 1, 1 << 20)},
      {"large_router_buffers", int_key(&cfg.lnet.large_router_buffers, 1, 1 << 16)},
      {"peer_buffer_credits", int_key(&cfg.lnet.peer_buffer_credits, 0, 1 << 16)},
      {"router_ping_interval", int_key(&cfg.lnet.router_ping_interval, 1, 3600)},
      {"router_ping_timeout", int_key(&cfg.lnet.router_ping_timeout, 1, 3600)},
      {"avoid_asym_router_failure", bool_key(&cfg.lnet.avoid_asym_router_failure)},
  };
  // A table of NAME = integer lo..hi, NAME a NID (`nids`: kept as Nid::to_string writes
  // it) or any non-empty string; `what` names the value ("RPCs", "weight") and `example`
  // shows a table.
  auto int_table = [](std::map<std::string, int64_t>* out, bool nids, int64_t lo, int64_t hi,
                      std::string what, std::string example) -> Reader {
    return [=](const Ctx& c, const toml::node& n, std::string_view key) -> Status {
      const toml::table* t = n.as_table();
      if (!t)
        return err(c, n.source(), key,
                   "must be a table of " + std::string(nids ? "NID" : "job id") + " = " + what +
                       ", e.g. " + example);
      out->clear();
      for (const auto& [k, v] : *t) {
        std::string name(k.str());
        if (nids) {
          auto nid = Nid::parse(name);
          if (!nid.ok()) return err(c, v.source(), key, nid.status().message());
          name = nid->to_string();
        } else if (name.empty()) {
          return err(c, v.source(), key, "a job id must not be empty");
        }
        std::optional<int64_t> w = v.value_exact<int64_t>();
        if (!w || *w < lo || *w > hi)
          return err(c, v.source(), key,
                     "the value of " + std::string(k.str()) + " must be an integer " +
                         std::to_string(lo) + ".." + std::to_string(hi));
        (*out)[name] = *w;
      }
      return Status::Ok();
    };
  };
  const std::map<std::string, Reader, std::less<>> rpc_keys = {
      {"max_rpcs_in_flight", int_key(&cfg.rpc.max_rpcs_in_flight, 1, 1 << 16)},
      {"peer_rpcs_in_flight", int_table(&cfg.rpc.peer_rpcs_in_flight, true, 1, 1 << 16, "RPCs",
                                        "{ \"198.18.0.2@tcp\" = 64 }")},
      {"workers", int_key(&cfg.rpc.workers, 1, 256)},
      {"reply_cache_entries", int_key(&cfg.rpc.reply_cache_entries, 16, 1 << 20)},
      {"reply_cache_bytes",
       [](const Ctx& c, const toml::node& n, std::string_view key) {
         return err(c, n.source(), key,
                    "is no longer a key: a server keeps each reply until its client is "
                    "finished with it, bounded by rpc.reply_cache_entries per client");
       }},
      {"reply_cache_idle", int_key(&cfg.rpc.reply_cache_idle, 60, 7 * 86400)},
      {"ops_history", int_key(&cfg.rpc.ops_history, 0, 1000)},
      {"ops_history_window", int_key(&cfg.rpc.ops_history_window, 1, 86400)},
      {"ops_history_min_ms", int_key(&cfg.rpc.ops_history_min_ms, 0, 3600000)},
      {"jobid_var",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         Status s = string_key(&cfg.rpc.jobid_var, false)(c, n, key);
         if (!s.ok()) return s;
         const std::string& v = cfg.rpc.jobid_var;
         bool name = !v.empty() && !std::isdigit(static_cast<unsigned char>(v[0]));
         for (char ch : v)
           name = name && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
         if (name) return Status::Ok();
         return err(c, n.source(), key,
                    "must be disable, procname_uid, nodelocal or an environment variable's "
                    "name (letters, digits, '_')");
       }},
      {"jobid_name",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         Status s = string_key(&cfg.rpc.jobid_name, false)(c, n, key);
         if (!s.ok()) return s;
         Status t = check_job_name(cfg.rpc.jobid_name);
         return t.ok() ? t : err(c, n.source(), key, t.message());
       }},
      {"nrs_policy",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         Status s = string_key(&cfg.rpc.nrs_policy, false)(c, n, key);
         if (!s.ok()) return s;
         if (cfg.rpc.nrs_policy != "fifo" && cfg.rpc.nrs_policy != "fair")
           return err(c, n.source(), key,
                      "must be fifo (first come, first served) or fair (round-robin across "
                      "clients and jobs)");
         return Status::Ok();
       }},
      {"nrs_slots", int_key(&cfg.rpc.nrs_slots, 1, 65536)},
      {"nrs_idle_ms", int_key(&cfg.rpc.nrs_idle_ms, 1, 600000)},
      {"nrs_reserve", int_key(&cfg.rpc.nrs_reserve, 0, 65536)},
      {"nrs_client_weights", int_table(&cfg.rpc.nrs_client_weights, true, 1, 1000, "weight",
                                       "{ \"198.18.0.2@tcp\" = 4 }")},
      {"nrs_job_weights",
       int_table(&cfg.rpc.nrs_job_weights, false, 1, 1000, "weight", "{ \"alpha.1001\" = 4 }")},
  };
  const std::map<std::string, Reader, std::less<>> stats_keys = {
      {"rpcPerfRawStatBufferSize", int_key(&cfg.stats.rpcPerfRawStatBufferSize, 1, 1 << 24)},
      {"rpcPerfRawExecBufferSize", int_key(&cfg.stats.rpcPerfRawExecBufferSize, 1, 1 << 24)},
      {"rpcPerfNumberSecondIntervals", int_key(&cfg.stats.rpcPerfNumberSecondIntervals, 1, 86400)},
      {"rpcPerfNumberMinuteIntervals", int_key(&cfg.stats.rpcPerfNumberMinuteIntervals, 1, 10080)},
      {"rpcPerfNumberHourIntervals", int_key(&cfg.stats.rpcPerfNumberHourIntervals, 1, 8784)},
      {"rpcPerfNumberDayIntervals", int_key(&cfg.stats.rpcPerfNumberDayIntervals, 1, 3660)},
      {"job_stats", bool_key(&cfg.stats.job_stats)},
      {"job_stats_max", int_key(&cfg.stats.job_stats_max, 1, 1'000'000)},
      {"job_cleanup_interval", int_key(&cfg.stats.job_cleanup_interval, 1, 30 * 86400)},
      {"metrics_top_jobs", int_key(&cfg.stats.metrics_top_jobs, 0, 1000)},
      {"maxBlockSize",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         Status s = int_key(&cfg.stats.maxBlockSize, 16384, 16 << 20)(c, n, key);
         if (s.ok() && !is_pow2(cfg.stats.maxBlockSize))
           return err(c, n.source(), key, "must be a power of two");
         return s;
       }},
  };
  const std::map<std::string, Reader, std::less<>> membership_keys = {
      {"client_ping_interval", int_key(&cfg.membership.client_ping_interval, 1, 3600)},
      {"server_ping_interval", int_key(&cfg.membership.server_ping_interval, 1, 3600)},
      {"ping_miss_limit", int_key(&cfg.membership.ping_miss_limit, 1, 100)},
      {"heard_from_reports", bool_key(&cfg.membership.heard_from_reports)},
      {"notify_rate", int_key(&cfg.membership.notify_rate, 1, 10'000'000)},
      {"notify_relay_fanout", int_key(&cfg.membership.notify_relay_fanout, 0, 4096)},
      {"notify_relay_above", int_key(&cfg.membership.notify_relay_above, 0, 100'000'000)},
      {"unreachable_reports", bool_key(&cfg.membership.unreachable_reports)},
      {"verify_timeout", int_key(&cfg.membership.verify_timeout, 1, 600)},
      {"etcd",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         cfg.membership.etcd.clear();
         return string_array(c, n, key, [&](const std::string& s, const toml::node& e) {
           std::string hp = s.rfind("http://", 0) == 0 ? s.substr(7) : "";
           while (!hp.empty() && hp.back() == '/') hp.pop_back();
           auto colon = hp.rfind(':');
           if (hp.empty() || colon == std::string::npos || colon == 0 || !validate_http(&hp).ok())
             return err(c, e.source(), key, "'" + s + "' is not http://HOST:PORT");
           cfg.membership.etcd.push_back(s);
           return Status::Ok();
         });
       }},
      {"etcd_lease", int_key(&cfg.membership.etcd_lease, 2, 60)},
      {"etcd_key", string_key(&cfg.membership.etcd_key, false)},
      {"state_dir", string_key(&cfg.membership.state_dir, false)},
  };
  const std::map<std::string, Reader, std::less<>> health_keys = {
      {"slowness", bool_key(&cfg.health.slowness)},
      {"slow_factor", number_key(&cfg.health.slow_factor, 1.1, 1000)},
      {"slow_min_excess_ms", number_key(&cfg.health.slow_min_excess_ms, 0, 60000)},
      {"loss_ratio", number_key(&cfg.health.loss_ratio, 0.0001, 1)},
      {"degraded_penalty", int_key(&cfg.health.degraded_penalty, 0, 1000)},
      {"quiet_bytes", int_key(&cfg.health.quiet_bytes, 1, int64_t{1} << 40)},
      {"report_interval", number_key(&cfg.health.report_interval, 0.1, 3600)},
      {"cpu_starved_ms", number_key(&cfg.health.cpu_starved_ms, 0, 60000)},
      {"slow_ops_s", number_key(&cfg.health.slow_ops_s, 0, 86400)},
      {"slow_ops_p99_factor", number_key(&cfg.health.slow_ops_p99_factor, 0, 1000)},
      {"slow_ops_p99_min_s", number_key(&cfg.health.slow_ops_p99_min_s, 0, 86400)},
  };
  const std::map<std::string, Reader, std::less<>> mesh_keys = {
      {"enabled", bool_key(&cfg.mesh.enabled)},
      {"peers", int_key(&cfg.mesh.peers, 0, 1024)},
      {"interval", number_key(&cfg.mesh.interval, 0.1, 3600)},
      {"bulk_interval", number_key(&cfg.mesh.bulk_interval, 0, 86400)},
      {"bulk_bytes", int_key(&cfg.mesh.bulk_bytes, 0, 16 << 20)},
      {"rotate_interval", int_key(&cfg.mesh.rotate_interval, 1, 86400 * 30)},
      {"report_interval", number_key(&cfg.mesh.report_interval, 0.1, 3600)},
      {"mgs_sync_rate", int_key(&cfg.mesh.mgs_sync_rate, 1, 1'000'000)},
      {"outlier_factor", number_key(&cfg.mesh.outlier_factor, 1.1, 1000)},
      {"outlier_min_excess_ms", number_key(&cfg.mesh.outlier_min_excess_ms, 0, 60000)},
      {"throttled_min_excess_ms", number_key(&cfg.mesh.throttled_min_excess_ms, 0, 60000)},
      {"loss_ratio", number_key(&cfg.mesh.loss_ratio, 0, 1)},
      {"window", int_key(&cfg.mesh.window, 1, 86400)},
  };
  const std::map<std::string, Reader, std::less<>> tune_keys = {
      {"auto", bool_key(&cfg.tune.auto_tune)},
      {"interval", number_key(&cfg.tune.interval, 0.1, 3600)},
      {"check_interval", int_key(&cfg.tune.check_interval, 1, 86400)},
      {"min_rpcs_in_flight", int_key(&cfg.tune.min_rpcs_in_flight, 1, 1 << 16)},
      {"max_rpcs_in_flight", int_key(&cfg.tune.max_rpcs_in_flight, 1, 1 << 16)},
      {"min_peer_credits", int_key(&cfg.tune.min_peer_credits, 1, 1 << 16)},
      {"max_peer_credits", int_key(&cfg.tune.max_peer_credits, 1, 1 << 16)},
      {"max_credits", int_key(&cfg.tune.max_credits, 1, 1 << 20)},
      {"link_mbit", number_key(&cfg.tune.link_mbit, 0, 1e7)},
  };
  const std::map<std::string, Reader, std::less<>> storage_keys = {
      {"targets",
       [&](const Ctx& c, const toml::node& n, std::string_view key) {
         cfg.storage.targets.clear();
         return string_array(c, n, key, [&](const std::string& t, const toml::node& e) {
           if (t != "mem" && (t.empty() || t[0] != '/'))
             return err(c, e.source(), key,
                        "'" + t + "': \"mem\", an absolute directory or a block device");
           for (const std::string& o : cfg.storage.targets)
             if (o == t && t != "mem") return err(c, e.source(), key, "duplicate target " + t);
           cfg.storage.targets.push_back(t);
           return Status::Ok();
         });
       }},
      {"block_size", int_key(&cfg.storage.block_size, 4096, 16 << 20)},
      {"buffers", int_key(&cfg.storage.buffers, 1, 65536)},
      {"threads", int_key(&cfg.storage.threads, 1, 256)},
      {"disk_mbyte", number_key(&cfg.storage.disk_mbyte, 0, 1e6)},
      {"capacity", int_key(&cfg.storage.capacity, 4096, int64_t{1} << 50)},
      {"pagepool", int_key(&cfg.storage.pagepool, 1 << 20, int64_t{1} << 40)},
      {"prefetch_depth", int_key(&cfg.storage.prefetch_depth, 0, 1024)},
      {"tokens", bool_key(&cfg.storage.tokens)},
  };
  const std::map<std::string, const std::map<std::string, Reader, std::less<>>*, std::less<>>
      sections = {{"tune", &tune_keys},     {"node", &node_keys},
                  {"lnet", &lnet_keys},     {"rpc", &rpc_keys},
                  {"stats", &stats_keys},   {"membership", &membership_keys},
                  {"health", &health_keys}, {"mesh", &mesh_keys},
                  {"tls", &tls_keys},       {"storage", &storage_keys}};

  for (const auto& [k, v] : root) {
    std::string name(k.str());
    if (name == "net") {
      const toml::array* arr = v.as_array();
      if (!arr || !arr->is_array_of_tables())
        return err(c, k.source(), "net", "must be an array of tables ([[net]])");
      for (const toml::node& e : *arr) {
        const toml::table& t = *e.as_table();
        NetConfig net;
        int64_t port = net.port;
        std::string nid_text;
        const std::map<std::string, Reader, std::less<>> net_keys = {
            {"nid", string_key(&nid_text, false)},
            {"port", int_key(&port, 1, 65535)},
            {"provider", string_key(&net.provider, false)},
            {"domain", string_key(&net.domain, true)},
            {"rx_depth", int_key(&net.rx_depth, kMinRxDepth, kMaxRxDepth)},
            {"msg_size", int_key(&net.msg_size, kMinMsgSize, kMaxMsgSize)},
            {"speed_mbit", int_key(&net.speed_mbit, 0, 10'000'000)},
        };
        Status s = read_table(c, t, "net", net_keys);
        if (!s.ok()) return s;
        if (nid_text.empty()) return err(c, t.source(), "net.nid", "is required in every [[net]]");
        auto nid = Nid::parse(nid_text);
        if (!nid.ok()) return err(c, t["nid"].node()->source(), "net.nid", nid.status().message());
        if (!nid->is_verbs())
          for (const char* key : {"provider", "domain", "rx_depth", "msg_size"})
            if (const toml::node* n = t.get(key))
              return err(c, n->source(), std::string("net.") + key,
                         "applies to @o2ib nets only (" + nid_text + " is carried by sockets)");
        for (const NetConfig& other : cfg.nets)
          if (other.nid == *nid) return err(c, t.source(), "net.nid", "duplicate NID " + nid_text);
        net.nid = *nid;
        net.port = static_cast<uint16_t>(port);
        cfg.nets.push_back(net);
      }
      continue;
    }
    if (name == "emulation") {
      const toml::array* arr = v.as_array();
      if (!arr || !arr->is_array_of_tables())
        return err(c, k.source(), "emulation", "must be an array of tables ([[emulation]])");
      for (const toml::node& e : *arr) {
        const toml::table& t = *e.as_table();
        EmulationConfig em;
        const std::map<std::string, Reader, std::less<>> keys = {
            {"ni", string_key(&em.ni, true)},
            {"peer", string_key(&em.peer, true)},
            {"delay_ms", number_key(&em.delay_ms, 0, 10000)},
            {"rate_mbit", number_key(&em.rate_mbit, 0, 1e6)},
            {"shared", bool_key(&em.shared)},
        };
        Status s = read_table(c, t, "emulation", keys);
        if (!s.ok()) return s;
        for (const char* which : {"ni", "peer"}) {
          const std::string& text = std::string(which) == "ni" ? em.ni : em.peer;
          if (text.empty()) continue;
          auto nid = Nid::parse(text);
          if (!nid.ok())
            return err(c, t[which].node()->source(), std::string("emulation.") + which,
                       nid.status().message());
        }
        if (em.delay_ms == 0 && em.rate_mbit == 0)
          return err(c, t.source(), "emulation", "needs delay_ms or rate_mbit");
        if (em.shared && (em.ni.empty() || !em.peer.empty()))
          return err(c, t.source(), "emulation.shared",
                     "a shared link is one NI's: set ni, and no peer");
        cfg.emulation.push_back(em);
      }
      continue;
    }
    if (name == "route") {
      const toml::array* arr = v.as_array();
      if (!arr || !arr->is_array_of_tables())
        return err(c, k.source(), "route", "must be an array of tables ([[route]])");
      for (const toml::node& e : *arr) {
        const toml::table& t = *e.as_table();
        RouteConfig r;
        std::string net_text, gw_text;
        const std::map<std::string, Reader, std::less<>> keys = {
            {"net", string_key(&net_text, false)},
            {"gateway", string_key(&gw_text, false)},
            {"hops", int_key(&r.hops, 1, kMaxRouteHops)},
            {"priority", int_key(&r.priority, 0, kMaxRoutePriority)},
        };
        Status s = read_table(c, t, "route", keys);
        if (!s.ok()) return s;
        if (net_text.empty())
          return err(c, t.source(), "route.net", "is required in every [[route]]");
        if (gw_text.empty())
          return err(c, t.source(), "route.gateway", "is required in every [[route]]");
        auto net = parse_lnet_net(net_text);
        if (!net.ok())
          return err(c, t["net"].node()->source(), "route.net", net.status().message());
        auto gw = Nid::parse(gw_text);
        if (!gw.ok())
          return err(c, t["gateway"].node()->source(), "route.gateway", gw.status().message());
        r.net = *net;
        r.gateway = *gw;
        cfg.routes.push_back(r);
      }
      continue;
    }
    auto it = sections.find(name);
    if (it == sections.end()) return err(c, k.source(), name, "unknown section");
    const toml::table* t = v.as_table();
    if (!t) return err(c, k.source(), name, "must be a table");
    Status s = read_table(c, *t, name, *it->second);
    if (!s.ok()) return s;
    if (name == "tls") {
      const TlsConfig& tc = cfg.tls;
      int set = !tc.cert_file.empty() + !tc.key_file.empty() + !tc.ca_file.empty();
      if (set != 0 && set != 3)
        return err(c, t->source(), "tls.cert_file",
                   "cert_file, key_file and ca_file go together (none: keyed from the cluster "
                   "key)");
    }
    if (name == "lnet" && cfg.lnet.min_reconnect_ms > cfg.lnet.max_reconnect_ms)
      return err(c, t->source(), "lnet.min_reconnect_ms",
                 "must not be above lnet.max_reconnect_ms");
    if (name == "tune") {
      const TuneConfig& tc = cfg.tune;
      if (tc.min_rpcs_in_flight > tc.max_rpcs_in_flight)
        return err(c, t->source(), "tune.min_rpcs_in_flight",
                   "must not be above tune.max_rpcs_in_flight");
      if (tc.min_peer_credits > tc.max_peer_credits)
        return err(c, t->source(), "tune.min_peer_credits",
                   "must not be above tune.max_peer_credits");
      if (tc.max_credits < tc.max_peer_credits)
        return err(c, t->source(), "tune.max_credits", "must not be below tune.max_peer_credits");
    }
  }
  // Routes are checked against the NIs once every table is read ([[route]] may come first).
  if (Status s = check_routes(cfg.routes, cfg.nets); !s.ok())
    return err(c, root.source(), "route", s.message());
  if (!is_pow2(cfg.storage.block_size) || cfg.storage.block_size > cfg.stats.maxBlockSize)
    return err(c, root.source(), "storage.block_size",
               "must be a power of two not above stats.maxBlockSize (" +
                   std::to_string(cfg.stats.maxBlockSize) + ")");
  if (cfg.mesh.bulk_bytes > cfg.max_bulk())
    return err(c, root.source(), "mesh.bulk_bytes",
               "must not be above 2 x stats.maxBlockSize (" + std::to_string(cfg.max_bulk()) + ")");
  return cfg;
}

Result<Config> load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status(Code::kNotFound, path + ": cannot read config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path);
}

namespace {

// A secret file's bytes: it must exist and be readable by its owner only.
Result<std::string> read_secret_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return Status(Code::kNotFound, path + ": " + what + " not found");
  if ((st.st_mode & 077) != 0)
    return Status(Code::kInvalidArgument,
                  path + ": " + what + " must not be readable by group or others (chmod 600)");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(Code::kNotFound, path + ": cannot read " + what);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<std::string> load_cluster_key(const std::string& path) {
  auto key = read_secret_file(path, "cluster key file");
  if (!key.ok()) return key;
  if (key->size() < 16)
    return Status(Code::kInvalidArgument,
                  path + ": cluster key must be at least 16 bytes (use 'pfsnet keygen')");
  return key;
}

Result<std::string> load_http_token(const std::string& path) {
  auto token = read_secret_file(path, "HTTP token file");
  if (!token.ok()) return token;
  while (!token->empty() && std::isspace(static_cast<unsigned char>(token->back())))
    token->pop_back();
  if (token->size() < 16)
    return Status(Code::kInvalidArgument, path + ": HTTP token must be at least 16 bytes");
  for (unsigned char ch : *token)
    if (ch < 0x21 || ch > 0x7e)
      return Status(Code::kInvalidArgument,
                    path + ": HTTP token must be printable ASCII without spaces");
  return token;
}

}  // namespace pfsnet
