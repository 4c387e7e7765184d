#include "storage/iobench.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "base/json_fields.h"
#include "base/log.h"
#include "rpc/call_batch.h"
#include "rpc/msg_types.h"
#include "storage/block_store.h"
#include "wire/byte_codec.h"

namespace pfsnet {

using nlohmann::json;
using Steady = std::chrono::steady_clock;

namespace {

constexpr uint32_t kMaxRequestSize = 64u << 20;

}  // namespace

// ------------------------------------------------------------------ messages

// On the wire (wire/byte_codec.h): phase (u8: 1 prepare, 2 go, 3 cpu), job (u64); a
// prepare then: file, servers (u32 count, packed NIDs), op (u8: 1 write, 2 read), threads
// (u32), requests (u64), size (u32), first_segment (u64), verify and direct (u8: 0 or 1).
namespace {
constexpr const char* kPhases[] = {"prepare", "go", "cpu"};
constexpr const char* kOps[] = {"write", "read"};
template <size_t N>
uint8_t code_of(const char* const (&names)[N], const std::string& s) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return static_cast<uint8_t>(i + 1);
  return 0;
}
}  // namespace

Buffer IobenchRequest::encode() const {
  ByteWriter w;
  w.u8(code_of(kPhases, phase));
  w.u64(job);
  if (phase != "prepare") return w.take();
  w.str(file);
  w.u32(static_cast<uint32_t>(servers.size()));
  for (const Nid& n : servers) w.nid(n);
  w.u8(code_of(kOps, op));
  w.u32(static_cast<uint32_t>(threads));
  w.u64(requests);
  w.u32(size);
  w.u64(first_segment);
  w.u8(verify ? 1 : 0);
  w.u8(direct ? 1 : 0);
  return w.take();
}

Result<IobenchRequest> decode_iobench_request(std::span<const uint8_t> payload) {
  auto bad = [](const std::string& why) { return Status(Code::kProtocol, "IOBENCH: " + why); };
  ByteReader r(payload);
  IobenchRequest q;
  uint8_t phase = r.u8();
  q.job = r.u64();
  if (!r.ok()) return bad("malformed request");
  if (phase < 1 || phase > 3) return bad("phase must be prepare, go or cpu");
  q.phase = kPhases[phase - 1];
  if (q.phase != "prepare") return finish_decode(r, std::move(q), "IOBENCH request");
  q.file = r.str();
  size_t n = r.count(8);
  for (size_t i = 0; i < n && r.ok(); ++i) {
    auto nid = r.try_nid();
    if (!nid.ok()) return bad("servers: " + nid.status().message());
    q.servers.push_back(*nid);
  }
  uint8_t op = r.u8();
  uint32_t threads = r.u32();
  q.requests = r.u64();
  q.size = r.u32();
  q.first_segment = r.u64();
  uint8_t verify = r.u8(), direct = r.u8();
  if (!r.done()) return bad("malformed request");
  if (Status s = check_file_name(q.file); !s.ok()) return bad(s.message());
  if (q.servers.empty()) return bad("servers: none");
  if (q.servers.size() > IobenchRequest::kMaxServers) return bad("too many servers");
  if (op < 1 || op > 2) return bad("op must be write or read");
  q.op = kOps[op - 1];
  if (threads < 1 || threads > IobenchRequest::kMaxThreads)
    return bad("threads must be 1.." + std::to_string(IobenchRequest::kMaxThreads));
  q.threads = static_cast<int>(threads);
  if (q.requests < 1 || q.requests > (uint64_t(1) << 40)) return bad("requests must be 1..2^40");
  if (q.size < 1 || q.size > kMaxRequestSize)
    return bad("size must be 1.." + std::to_string(kMaxRequestSize));
  if (q.first_segment > (uint64_t(1) << 40)) return bad("first_segment must be 0..2^40");
  // The whole job's bytes must stay far below 2^64.
  if (q.first_segment + uint64_t(q.threads) > (uint64_t(1) << 50) / q.size / q.requests)
    return bad("the job's segments pass 1 PiB");
  if (verify > 1 || direct > 1) return bad("verify and direct: 0 or 1");
  q.verify = verify == 1;
  q.direct = direct == 1;
  return q;
}

const RpcMethod<IobenchRequest, IobenchNodeResult> kIobenchRpc{
    .type = kMsgIobench,
    .name = "IOBENCH",
    .exec = Execution::kOnce,
    .encode_request = [](const IobenchRequest& q) { return q.encode(); },
    .decode_request = decode_iobench_request,
    .encode_reply = encode_iobench_result,
    .decode_reply = decode_iobench_result};

// bytes, errors (u64), first_error (a string, at most 255 bytes), start and end (i64, ns
// since the epoch), cpu_s (f64).
Buffer encode_iobench_result(const IobenchNodeResult& r) {
  ByteWriter w;
  w.u64(r.bytes);
  w.u64(r.errors);
  w.str(r.first_error);
  w.i64(r.start_unix_ns);
  w.i64(r.end_unix_ns);
  w.f64(r.cpu_s);
  return w.take();
}

Result<IobenchNodeResult> decode_iobench_result(std::span<const uint8_t> payload) {
  ByteReader rd(payload);
  IobenchNodeResult r;
  r.bytes = rd.u64();
  r.errors = rd.u64();
  r.first_error = rd.str();
  r.start_unix_ns = rd.i64();
  r.end_unix_ns = rd.i64();
  r.cpu_s = rd.f64();
  if (!rd.done()) return Status(Code::kProtocol, "malformed IOBENCH reply");
  auto bad = [](const char* why) {
    return Status(Code::kProtocol, std::string("IOBENCH reply: ") + why);
  };
  if (r.bytes > (uint64_t(1) << 62) || r.errors > (uint64_t(1) << 62))
    return bad("counts out of range");
  if (r.start_unix_ns < 0 || r.end_unix_ns < 0) return bad("times before 1970");
  if (r.end_unix_ns < r.start_unix_ns) return bad("ends before it starts");
  if (r.cpu_s > 1e9) return bad("cpu_s out of range");
  return r;
}

// ------------------------------------------------------------------ the coordinator

Result<IobenchSpec> IobenchSpec::from_json(const json& j) {
  IobenchSpec s;
  auto clients = json_nids(j.value("clients", json()), "clients");
  if (!clients.ok()) return clients.status();
  auto servers = json_nids(j.value("servers", json()), "servers");
  if (!servers.ok()) return servers.status();
  s.clients = std::move(*clients);
  s.servers = std::move(*servers);
  if (s.servers.size() > IobenchRequest::kMaxServers)
    return Status(Code::kInvalidArgument, "servers: at most 1024");
  auto counts = [&](const char* key, int hi, std::vector<int>* out) -> Status {
    if (!j.contains(key)) return Status::Ok();
    const json& a = j[key];
    if (!a.is_array() || a.empty() || a.size() > 64)
      return Status(Code::kInvalidArgument, std::string(key) + ": a list of 1..64 counts");
    out->clear();
    for (const json& x : a) {
      auto v = json_int_value(x, key, 1, hi);
      if (!v.ok()) return v.status();
      out->push_back(static_cast<int>(*v));
    }
    return Status::Ok();
  };
  if (Status st = counts("nodes", static_cast<int>(s.clients.size()), &s.nodes); !st.ok())
    return Status(st.code(), st.message() + " (the clients given)");
  if (Status st = counts("threads", IobenchRequest::kMaxThreads, &s.threads); !st.ok()) return st;
  auto requests = json_int(j, "requests", int64_t(s.requests), 1, int64_t(1) << 30);
  if (!requests.ok()) return requests.status();
  s.requests = static_cast<uint64_t>(*requests);
  auto cell = json_int(j, "cell_bytes", 0, 0, int64_t(1) << 40);
  if (!cell.ok()) return cell.status();
  s.cell_bytes = static_cast<uint64_t>(*cell);
  auto size = json_int(j, "size", s.size, 4096, kMaxRequestSize);
  if (!size.ok()) return size.status();
  s.size = static_cast<uint32_t>(*size);
  if (j.contains("ops")) {
    const json& o = j["ops"];
    if (!o.is_array() || o.empty() || o.size() > 2)
      return Status(Code::kInvalidArgument, "ops: write, read or both");
    s.ops.clear();
    for (const json& x : o) {
      std::string op = x.is_string() ? x.get<std::string>() : "";
      if ((op != "write" && op != "read") || std::count(s.ops.begin(), s.ops.end(), op))
        return Status(Code::kInvalidArgument, "ops: write, read or both, each once");
      s.ops.push_back(op);
    }
  }
  if (j.contains("file")) {
    if (!j["file"].is_string()) return Status(Code::kInvalidArgument, "file: a name");
    s.file = j["file"].get<std::string>();
  }
  if (Status st = check_file_name(s.file); !st.ok()) return st;
  auto timeout = json_number(j, "timeout_s", s.timeout_s, 1, 86400);
  if (!timeout.ok()) return timeout.status();
  s.timeout_s = *timeout;
  if (j.contains("direct")) {
    if (!j["direct"].is_boolean()) return Status(Code::kInvalidArgument, "direct: true or false");
    s.direct = j["direct"].get<bool>();
  }
  return s;
}

uint64_t IobenchSpec::requests_for(int n, int t) const {
  if (cell_bytes == 0) return requests;
  uint64_t per_thread = uint64_t(n) * uint64_t(t) * size;
  return std::max<uint64_t>(1, (cell_bytes + per_thread - 1) / per_thread);
}

namespace {

// One IOBENCH to each of `to` at once; every reply, in order.
std::vector<Result<IobenchNodeResult>> call_all(
    RpcEngine& rpc, const std::vector<Nid>& to,
    const std::function<IobenchRequest(size_t)>& request, Duration timeout) {
  CallBatch batch(rpc);
  CallOptions co;
  co.timeout = timeout;
  for (size_t i = 0; i < to.size(); ++i)
    batch.add(to[i], kIobenchRpc.type, kIobenchRpc.encode_request(request(i)), nullptr, co);
  // Every call ends by its own deadline; the margin covers the callbacks.
  batch.wait(timeout + std::chrono::seconds(30));
  std::vector<Result<IobenchNodeResult>> out;
  for (const RpcReply& r : batch.take()) out.push_back(decode_method_reply(kIobenchRpc, r));
  return out;
}

Status first_error(const std::vector<Result<IobenchNodeResult>>& rs, const std::vector<Nid>& to,
                   const char* what) {
  for (size_t i = 0; i < rs.size(); ++i)
    if (!rs[i].ok())
      return Status(rs[i].status().code(), std::string(what) + " on " + to[i].to_string() + ": " +
                                               rs[i].status().message());
  return Status::Ok();
}

Result<double> servers_cpu(RpcEngine& rpc, const std::vector<Nid>& servers) {
  IobenchRequest q;
  q.phase = "cpu";
  auto rs = call_all(
      rpc, servers, [&](size_t) { return q; }, std::chrono::seconds(10));
  if (Status s = first_error(rs, servers, "cpu reading"); !s.ok()) return s;
  double cpu = 0;
  for (const Result<IobenchNodeResult>& r : rs) cpu += r->cpu_s;
  return cpu;
}

}  // namespace

Result<json> run_iobench(RpcEngine& rpc, const IobenchSpec& spec,
                         const std::function<void(const json&)>& progress) {
  // Job ids unique across coordinators and runs.
  uint64_t job = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  job &= (uint64_t(1) << 62) - 1;
  const Duration timeout =
      std::chrono::duration_cast<Duration>(std::chrono::duration<double>(spec.timeout_s));
  json cells = json::array(), peak = json::object();
  for (int n : spec.nodes)
    for (int t : spec.threads)
      for (const std::string& op : spec.ops) {
        std::vector<Nid> clients(spec.clients.begin(), spec.clients.begin() + n);
        IobenchRequest q;
        q.job = ++job;
        q.file = spec.file;
        q.servers = spec.servers;
        q.op = op;
        q.threads = t;
        q.requests = spec.requests_for(n, t);
        q.size = spec.size;
        q.verify = op == "read" && spec.ops.front() == "write";
        q.direct = spec.direct;
        auto ready = call_all(
            rpc, clients,
            [&](size_t i) {
              q.first_segment = uint64_t(i) * uint64_t(t);
              return q;
            },
            std::chrono::seconds(30));
        if (Status s = first_error(ready, clients, "prepare"); !s.ok()) return s;
        auto cpu0 = servers_cpu(rpc, spec.servers);
        if (!cpu0.ok()) return cpu0.status();
        IobenchRequest g;
        g.phase = "go";
        g.job = q.job;
        auto t0 = Steady::now();
        auto done = call_all(
            rpc, clients, [&](size_t) { return g; }, timeout);
        double span_s = std::chrono::duration<double>(Steady::now() - t0).count();
        if (Status s = first_error(done, clients, "run"); !s.ok()) return s;
        auto cpu1 = servers_cpu(rpc, spec.servers);
        if (!cpu1.ok()) return cpu1.status();
        uint64_t bytes = 0, errors = 0;
        int64_t start = INT64_MAX, end = 0;
        double client_cpu = 0;
        std::string first;
        for (size_t i = 0; i < done.size(); ++i) {
          const Result<IobenchNodeResult>& r = done[i];
          bytes += r->bytes;
          errors += r->errors;
          if (first.empty() && !r->first_error.empty())
            first = clients[i].to_string() + ": " + r->first_error;
          if (r->start_unix_ns > 0) start = std::min(start, r->start_unix_ns);
          end = std::max(end, r->end_unix_ns);
          client_cpu += r->cpu_s;
        }
        // The paper's job time: first start to last end, by the clients' wall clocks.
        double job_s = end > start ? double(end - start) / 1e9 : 0;
        double mib_s = job_s > 0 ? double(bytes) / (1 << 20) / job_s : 0;
        json cell = {{"nodes", n},
                     {"threads", t},
                     {"op", op},
                     {"requests", q.requests},
                     {"size", spec.size},
                     {"bytes", bytes},
                     {"job_s", job_s},
                     {"coordinator_s", span_s},
                     {"mib_s", mib_s},
                     {"client_cpu", job_s > 0 ? client_cpu / job_s : 0.0},
                     {"server_cpu", job_s > 0 ? (*cpu1 - *cpu0) / job_s : 0.0},
                     {"errors", errors},
                     {"first_error", first}};
        peak[op] = std::max(peak.value(op, 0.0), mib_s);
        if (progress) progress(cell);
        cells.push_back(std::move(cell));
      }
  json servers = json::array(), clients = json::array();
  for (const Nid& n : spec.servers) servers.push_back(n.to_string());
  for (const Nid& n : spec.clients) clients.push_back(n.to_string());
  return json{
      {"cells", cells},       {"peak", peak},      {"servers", servers},  {"clients", clients},
      {"size", spec.size},    {"file", spec.file}, {"nodes", spec.nodes}, {"threads", spec.threads},
      {"direct", spec.direct}};
}

}  // namespace pfsnet
