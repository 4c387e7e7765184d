// The handlers that act on the network: ping and fault injection.
#include <algorithm>
#include <thread>

#include "admin/node_commands.h"
#include "base/json_fields.h"
#include "rpc/ping.h"
#include "wire/frame.h"

namespace pfsnet {

using nlohmann::json;

namespace {

Result<std::optional<Nid>> nid_or_any(const json& req, const char* key) {
  std::string v = req.value(key, std::string("*"));
  if (v == "*" || v.empty()) return std::optional<Nid>();
  auto n = Nid::parse(v);
  if (!n.ok())
    return Status(Code::kInvalidArgument,
                  std::string("bad --") + key + " '" + v + "': " + n.status().message());
  return std::optional<Nid>(*n);
}

}  // namespace

Result<FaultRule> parse_fault_rule(const json& req, const RpcEngine& rpc) {
  FaultRule r;
  std::string action = req.value("action", std::string());
  if (action == "drop")
    r.action = FaultRule::Action::kDrop;
  else if (action == "delay")
    r.action = FaultRule::Action::kDelay;
  else if (action == "corrupt")
    r.action = FaultRule::Action::kCorrupt;
  else
    return Status(Code::kInvalidArgument,
                  "action must be drop, delay or corrupt, not '" + action + "'");
  auto src = nid_or_any(req, "src");
  if (!src.ok()) return src.status();
  auto dst = nid_or_any(req, "dst");
  if (!dst.ok()) return dst.status();
  r.src = *src;
  r.dst = *dst;
  if (req.contains("type") && req["type"].is_string()) {
    std::string name = req["type"].get<std::string>();
    r.msg_type = rpc.type_by_name(name);
    if (!r.msg_type && name != "any")
      return Status(Code::kInvalidArgument, "unknown message type '" + name + "'");
  } else {
    auto type = json_int(req, "type", 0, 0, UINT32_MAX);
    if (!type.ok()) return type.status();
    r.msg_type = static_cast<uint32_t>(*type);
  }
  auto rate = json_int(req, "rate", 0, 0, int64_t(1) << 40);
  if (!rate.ok()) return rate.status();
  r.rate = static_cast<uint64_t>(*rate);
  auto interval_s = json_number(req, "interval", 0, 0, 86400);
  if (!interval_s.ok()) return interval_s.status();
  auto latency_s = json_number(req, "latency", 0, 0, 3600);
  if (!latency_s.ok()) return latency_s.status();
  double interval = *interval_s, latency = *latency_s;
  r.interval = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(interval));
  r.latency = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(latency));
  if ((r.rate > 0) == (r.interval.count() > 0))
    return Status(Code::kInvalidArgument, "give exactly one of --rate N or --interval SECONDS");
  if (r.action == FaultRule::Action::kDelay && r.latency.count() <= 0)
    return Status(Code::kInvalidArgument, "a delay rule needs --latency SECONDS > 0");
  std::string health = req.value("health", std::string("NONE"));
  bool found = false;
  for (int k = 0; k < kNumHealthKinds; ++k)
    if (health_kind_name(static_cast<HealthKind>(k)) == health) {
      r.health = static_cast<HealthKind>(k);
      found = true;
    }
  if (!found) return Status(Code::kInvalidArgument, "unknown health error kind '" + health + "'");
  if (r.action != FaultRule::Action::kDrop && r.health != HealthKind::kNone)
    return Status(Code::kInvalidArgument, "--health applies to drop rules only");
  return r;
}

Result<PingArgs> parse_ping_args(const json& req, int64_t max_bulk, int64_t transaction_timeout) {
  PingArgs a;
  auto nid = Nid::parse(req.value("nid", std::string()));
  if (!nid.ok()) return nid.status();
  a.nid = *nid;
  auto count = json_int(req, "count", 1, 1, 1'000'000);
  if (!count.ok()) return count.status();
  a.count = *count;
  auto size = json_int(req, "size", 0, 0, max_bulk);
  if (!size.ok())
    return Status(Code::kInvalidArgument,
                  "size must be 0.." + std::to_string(max_bulk) + " (2 x maxBlockSize)");
  a.size = *size;
  auto timeout = json_number(req, "timeout", double(transaction_timeout), 0, 1e9);
  if (!timeout.ok() || !(*timeout > 0))
    return Status(Code::kInvalidArgument, "timeout must be positive");
  a.timeout_s = *timeout;
  auto interval = json_number(req, "interval", 0, 0, 60);
  if (!interval.ok()) return Status(Code::kInvalidArgument, "interval must be 0..60 seconds");
  a.interval_s = *interval;
  a.timeout_s = std::min<double>(a.timeout_s, double(transaction_timeout));
  a.mode = req.value("mode", std::string("echo"));
  if (a.mode != "echo" && a.mode != "write" && a.mode != "read")
    return Status(Code::kInvalidArgument, "mode must be echo, write or read");
  // The job id and trace context each RPC carries (wire version 2: the server sees them).
  a.job_id = req.value("job_id", std::string());
  if (!a.job_id.empty() && !valid_job_id(a.job_id))
    return Status(Code::kInvalidArgument, "job id '" + a.job_id.substr(0, 80) +
                                              "': 1 to 64 printable ASCII bytes, no space");
  if (std::string tp = req.value("trace", std::string()); !tp.empty()) {
    auto t = TraceContext::parse(tp);
    if (!t.ok()) return t.status();
    a.trace = *t;
  }
  if (req.contains("wait") && !req["wait"].is_boolean())
    return Status(Code::kInvalidArgument, "wait must be true or false");
  a.wait = req.value("wait", false);
  return a;
}

Result<json> run_ping(const NodeParts& node, const json& req, const AdminEmit& emit) {
  auto [max_bulk, transaction_timeout] = node.cfg.read(
      [](const Config& c) { return std::make_pair(c.max_bulk(), c.lnet.transaction_timeout); });
  auto args = parse_ping_args(req, max_bulk, transaction_timeout);
  if (!args.ok()) return args.status();
  const Nid* nid = &args->nid;
  const int64_t count = args->count, size = args->size;
  const double timeout_s = args->timeout_s, interval_s = args->interval_s;
  const std::string& mode = args->mode;
  // echo: PING with the data both ways; write: BRW_WRITE (data to the peer, checked
  // there); read: BRW_READ (data from the peer).
  uint32_t type = mode == "echo" ? kMsgPing : mode == "write" ? kMsgBrwWrite : kMsgBrwRead;
  BulkData data =
      size && mode != "read" ? make_bulk(make_ping_pattern(static_cast<size_t>(size))) : nullptr;
  size_t expect = mode == "write" ? 0 : static_cast<size_t>(size);
  CallOptions co{std::chrono::duration_cast<Duration>(std::chrono::duration<double>(timeout_s))};
  co.reply_bulk = expect;
  co.job_id = args->job_id;
  co.trace = args->trace;
  co.recover = args->wait;

  int64_t ok = 0, failed = 0;
  double mn = 0, mx = 0, sum = 0, total_max = 0;
  json errors = json::object();
  for (int64_t seq = 1; seq <= count; ++seq) {
    if (seq > 1 && interval_s > 0)  // pacing, as ping -i: not a synchronization
      std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    Buffer payload = mode == "read" ? ping_payload(static_cast<uint32_t>(size)) : Buffer();
    RpcReply r = node.rpc.call(*nid, type, std::move(payload), data, co);
    Status st = r.status;
    // From submission to the end: includes waiting and resends, which rtt does not.
    double total_ms = to_ms(node.clock.now() - r.times.submit);
    total_max = std::max(total_max, total_ms);
    if (st.ok() && (r.bulk.size() != expect || !check_ping_pattern(r.bulk.span())))
      st = Status(Code::kProtocol, "the data that came back is not what was sent");
    if (st.ok()) {
      double ms = to_ms(r.round_trip());
      mn = ok == 0 ? ms : std::min(mn, ms);
      mx = std::max(mx, ms);
      sum += ms;
      ++ok;
      json ev = {{"event", "reply"}, {"seq", seq},   {"nid", nid->to_string()},
                 {"bytes", size},    {"rtt_ms", ms}, {"total_ms", total_ms}};
      // The server's wait for a worker, where it says (wire version 2).
      if (r.queue_time) ev["queue_ms"] = to_ms(*r.queue_time);
      if (!emit(ev)) break;  // the client went away
    } else {
      ++failed;
      std::string kind(st.health_kind() != HealthKind::kNone ? health_kind_name(st.health_kind())
                                                             : code_name(st.code()));
      errors[kind] = errors.value(kind, 0) + 1;
      if (!emit({{"event", "error"},
                 {"seq", seq},
                 {"nid", nid->to_string()},
                 {"kind", kind},
                 {"error", st.message()},
                 {"total_ms", total_ms}}))
        break;
      if (st.code() == Code::kCancelled) break;  // shutting down
    }
  }
  return json{{"target", nid->to_string()},
              {"count", count},
              {"ok", ok},
              {"failed", failed},
              {"rtt_ms", {{"min", mn}, {"avg", ok ? sum / double(ok) : 0.0}, {"max", mx}}},
              {"total_max_ms", total_max},
              {"errors", errors}};
}

}  // namespace pfsnet
