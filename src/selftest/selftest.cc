#include "selftest/selftest.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "base/json_fields.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/thread_name.h"
#include "rpc/ping.h"
#include "rpc/rpc_method.h"
#include "wire/byte_codec.h"

namespace pfsnet {

using nlohmann::json;

namespace {

constexpr size_t kMaxSamples = 2000;
constexpr size_t kMaxTimeline = 3700;  // seconds (the longest duration, and the drain)

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::lround(q * double(v.size() - 1)));
  return v[std::min(i, v.size() - 1)];
}

double round3(double v) { return std::round(v * 1000) / 1000; }

// One client's load, on the worker that serves SELFTEST_RUN.
Result<ClientResult> run_load(RpcEngine& rpc, Clock& clock, const LoadRequest& req) {
  const std::vector<Nid>* targets = &req.targets;
  const std::string &test = req.test, &mode = req.mode;
  uint32_t size = req.size;
  int conc = req.concurrency;
  double duration = req.duration_s;
  // RTT: the fastest of three empty PINGs to each target.
  CallOptions quick;
  quick.timeout = std::chrono::seconds(5);
  double rtt = 0;
  for (const Nid& t : *targets)
    for (int i = 0; i < 3; ++i) {
      RpcReply r = rpc.call(t, kMsgPing, Buffer(), nullptr, quick);
      if (!r.status.ok())
        return Status(Code::kRemoteError, "PING " + t.to_string() + ": " + r.status.to_string());
      double ms = to_ms(r.round_trip());
      rtt = rtt == 0 ? ms : std::min(rtt, ms);
    }
  uint32_t type = test == "ping" ? kMsgPing : mode == "read" ? kMsgBrwRead : kMsgBrwWrite;
  BulkData data = size && type != kMsgBrwRead ? make_bulk(make_ping_pattern(size)) : nullptr;
  uint64_t bytes_per_rpc = size;
  // Every byte is checked: the server checks a write's (BRW_WRITE fails when it is not the
  // pattern), this client a read's or a ping's echo.
  bool check_reply = type != kMsgBrwWrite && size > 0;

  // Shared with the callbacks, which may outlive this frame if a wait gives up.
  struct State {
    Mutex mu;
    CondVar cv;
    int inflight GUARDED_BY(mu) = 0;
    std::mt19937_64 rng GUARDED_BY(mu){42};
    TimePoint last_done GUARDED_BY(mu);
    ClientResult res GUARDED_BY(mu);
  };
  auto st = std::make_shared<State>();
  TimePoint start = clock.now();
  TimePoint deadline =
      start + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(duration));
  size_t next_target = 0;
  CallOptions co;
  co.timeout = std::chrono::seconds(30);
  // Reads and pings get their data back: over RDMA, written into a sink offered here.
  co.reply_bulk = type == kMsgBrwWrite ? 0 : size;
  MutexLock lk(st->mu);
  st->last_done = start;
  st->res.rtt_ms = rtt;
  // Bounded: new RPCs stop at the deadline and each ends within its 30 s timeout.
  TimePoint give_up = deadline + std::chrono::seconds(45);
  for (int guard = 0; guard < 100'000'000; ++guard) {
    while (st->inflight < conc && clock.now() < deadline) {
      ++st->inflight;
      const Nid& t = (*targets)[next_target++ % targets->size()];
      lk.unlock();
      Buffer payload = type == kMsgBrwRead ? ping_payload(size) : Buffer();
      rpc.call_async(
          t, type, std::move(payload), data,
          [st, &clock, bytes_per_rpc, start, check_reply](RpcReply&& r) {
            if (r.status.ok() && check_reply &&
                (r.bulk.size() != bytes_per_rpc || !check_ping_pattern(r.bulk.span())))
              r.status = Status(Code::kProtocol,
                                "data mismatch: the reply's " + std::to_string(r.bulk.size()) +
                                    " bytes are not the " + std::to_string(bytes_per_rpc) +
                                    " bytes of the pattern");
            MutexLock g(st->mu);
            ClientResult& res = st->res;
            --st->inflight;
            st->last_done = clock.now();
            if (r.status.ok()) {
              ++res.rpcs;
              res.bytes += bytes_per_rpc;
              // Bytes completed in each second of the run (bounded by the duration).
              auto sec =
                  static_cast<size_t>(std::chrono::duration<double>(st->last_done - start).count());
              if (sec < kMaxTimeline) {
                if (res.timeline.size() <= sec) res.timeline.resize(sec + 1, 0);
                res.timeline[sec] += bytes_per_rpc;
              }
              double ms = to_ms(r.round_trip());
              if (res.latencies_ms.size() < kMaxSamples) {
                res.latencies_ms.push_back(ms);
              } else {  // reservoir sampling keeps the sample uniform
                uint64_t k = st->rng() % res.rpcs;
                if (k < kMaxSamples) res.latencies_ms[k] = ms;
              }
            } else {
              ++res.errors;
              if (res.first_error.empty()) res.first_error = r.status.to_string();
            }
            st->cv.notify_all();
          },
          co);
      lk.lock();
    }
    if (st->inflight == 0 && clock.now() >= deadline) break;
    if (clock.now() > give_up) break;
    st->cv.wait_for(lk, std::chrono::milliseconds(50));
  }
  ClientResult res = st->res;
  res.seconds = std::chrono::duration<double>(std::max(st->last_done, deadline) - start).count();
  int left = st->inflight;
  lk.unlock();
  if (left > 0) return Status(Code::kRemoteError, std::to_string(left) + " RPCs did not finish");
  return res;
}

}  // namespace

// SELFTEST_RUN's request: u32 count and the NIDs (wire/nid_form.h) of the targets, test and mode
// (strings), u32 size, u32 concurrency, f64 duration (wire/byte_codec.h).
Buffer LoadRequest::encode() const {
  ByteWriter w;
  w.u32(static_cast<uint32_t>(targets.size()));
  for (const Nid& n : targets) w.nid(n);
  w.str(test);
  w.str(mode);
  w.u32(size);
  w.u32(static_cast<uint32_t>(concurrency));
  w.f64(duration_s);
  return w.take();
}

namespace {
// A load's size against the node's max_bulk (known to the node, not to the codec).
Status check_load_size(uint32_t size, uint32_t max_bulk) {
  if (size > max_bulk)
    return Status(Code::kProtocol,
                  "SELFTEST_RUN: size must be 0.." + std::to_string(max_bulk) + " bytes");
  return Status::Ok();
}
}  // namespace

Result<LoadRequest> decode_load_request(std::span<const uint8_t> payload, uint32_t max_bulk) {
  auto bad = [](const std::string& why) { return Status(Code::kProtocol, "SELFTEST_RUN: " + why); };
  ByteReader r(payload);
  LoadRequest q;
  size_t n = r.u32();
  if (!r.ok() || n == 0 || n > LoadRequest::kMaxTargets)
    return bad("targets: 1 to " + std::to_string(LoadRequest::kMaxTargets) + " NIDs");
  for (size_t i = 0; i < n; ++i) {
    auto nid = r.try_nid();
    if (!nid.ok()) return bad("targets: " + nid.status().message());
    q.targets.push_back(*nid);
  }
  q.test = r.str();
  q.mode = r.str();
  uint32_t size = r.u32(), conc = r.u32();
  double dur = r.f64();
  if (!r.done()) return bad("malformed (targets, test, mode, size, concurrency, duration_s)");
  if (q.test != "ping" && q.test != "brw") return bad("test must be ping or brw");
  if (q.mode != "write" && q.mode != "read") return bad("mode must be write or read");
  if (Status st = check_load_size(size, max_bulk); !st.ok()) return st;
  if (conc < 1 || conc > 4096) return bad("concurrency must be 1..4096");
  if (!(dur > 0 && dur <= 3600)) return bad("duration_s must be more than 0, at most 3600");
  q.size = size;
  q.concurrency = static_cast<int>(conc);
  q.duration_s = dur;
  return q;
}

// SELFTEST_RUN's reply: u64 rpcs, errors, bytes; f64 seconds, rtt_ms; counted f64
// latencies; counted u64 timeline; the first error (a string, cut at 255 bytes). A
// client's failure is the reply's status, not a payload.
Buffer encode_client_result(const ClientResult& c) {
  ByteWriter w;
  w.u64(c.rpcs);
  w.u64(c.errors);
  w.u64(c.bytes);
  w.f64(c.seconds);
  w.f64(c.rtt_ms);
  w.u32(static_cast<uint32_t>(std::min(c.latencies_ms.size(), kMaxSamples)));
  for (size_t i = 0; i < c.latencies_ms.size() && i < kMaxSamples; ++i) w.f64(c.latencies_ms[i]);
  w.u32(static_cast<uint32_t>(std::min(c.timeline.size(), kMaxTimeline)));
  for (size_t i = 0; i < c.timeline.size() && i < kMaxTimeline; ++i) w.u64(c.timeline[i]);
  w.str(c.first_error);
  return w.take();
}

Result<ClientResult> decode_client_result(std::span<const uint8_t> payload) {
  auto bad = [](const std::string& why) {
    return Status(Code::kProtocol, "malformed client result: " + why);
  };
  constexpr uint64_t kMaxCount = uint64_t(1) << 62;
  ByteReader r(payload);
  ClientResult c;
  c.rpcs = r.u64();
  c.errors = r.u64();
  c.bytes = r.u64();
  if (c.rpcs > kMaxCount || c.errors > kMaxCount || c.bytes > kMaxCount)
    return bad("counts must be at most 2^62");
  c.seconds = r.f64();
  c.rtt_ms = r.f64();
  // Each count is checked before its items are read (a short buffer then fails at done()).
  size_t n = r.u32();
  if (n > kMaxSamples) return bad("at most 2000 latencies");
  for (size_t i = 0; i < n && r.ok(); ++i) c.latencies_ms.push_back(r.f64());
  n = r.u32();
  if (n > kMaxTimeline) return bad("at most 3700 seconds of timeline");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    c.timeline.push_back(r.u64());
    if (c.timeline.back() > kMaxCount) return bad("timeline counts must be at most 2^62");
  }
  c.first_error = r.str();
  if (!r.done()) return bad("its fields (figures finite and >= 0) do not add up to its bytes");
  return c;
}

Result<SelftestSpec> SelftestSpec::from_json(const json& j) {
  SelftestSpec s;
  auto c = json_nids(j.value("from", json::array()), "from");
  if (!c.ok()) return c.status();
  auto sv = json_nids(j.value("to", json::array()), "to");
  if (!sv.ok()) return sv.status();
  s.clients = *c;
  s.servers = *sv;
  if (s.clients.size() > LoadRequest::kMaxTargets || s.servers.size() > LoadRequest::kMaxTargets)
    return Status(Code::kInvalidArgument,
                  "at most " + std::to_string(LoadRequest::kMaxTargets) + " clients and servers");
  s.test = j.value("test", s.test);
  s.mode = j.value("mode", s.mode);
  s.distribute = j.value("distribute", s.distribute);
  auto duration = json_number(j, "duration", s.duration_s, 0, 3600);
  if (!duration.ok() || !(*duration > 0))
    return Status(Code::kInvalidArgument, "duration must be 0..3600 seconds");
  s.duration_s = *duration;
  auto link = json_number(j, "link_mbit", s.link_mbit, 0, 1e9);
  if (!link.ok()) return Status(Code::kInvalidArgument, "link rate must be >= 0");
  s.link_mbit = *link;
  auto size_field = json_int(j, "size", s.size, 0, 64 << 20);
  if (!size_field.ok())
    return Status(Code::kInvalidArgument, "size must be 0..64 MiB (and at most the bulk limit)");
  int64_t size = *size_field;
  if (s.test != "ping" && s.test != "brw")
    return Status(Code::kInvalidArgument, "test must be ping or brw, not '" + s.test + "'");
  if (s.mode != "write" && s.mode != "read")
    return Status(Code::kInvalidArgument, "mode must be write or read, not '" + s.mode + "'");
  if (s.distribute != "1:1" && s.distribute != "1:N")
    return Status(Code::kInvalidArgument, "distribute must be 1:1 or 1:N");
  if (!(s.duration_s > 0 && s.duration_s <= 3600))
    return Status(Code::kInvalidArgument, "duration must be 0..3600 seconds");
  if (size < 0 || size > (64 << 20))
    return Status(Code::kInvalidArgument, "size must be 0..64 MiB (and at most the bulk limit)");
  if (s.link_mbit < 0) return Status(Code::kInvalidArgument, "link rate must be >= 0");
  s.size = static_cast<uint32_t>(size);
  s.concurrency.clear();
  for (const json& x : j.value("concurrency", json::array({1}))) {
    auto v = json_int_value(x, "concurrency", 1, 4096);
    if (!v.ok()) return Status(Code::kInvalidArgument, "each concurrency must be 1..4096");
    s.concurrency.push_back(static_cast<int>(*v));
  }
  if (s.concurrency.empty() || s.concurrency.size() > 64)
    return Status(Code::kInvalidArgument, "1 to 64 concurrency steps");
  return s;
}

json SelftestSpec::to_json() const {
  json c = json::array(), sv = json::array();
  for (const Nid& n : clients) c.push_back(n.to_string());
  for (const Nid& n : servers) sv.push_back(n.to_string());
  return {{"from", c},
          {"to", sv},
          {"test", test},
          {"mode", mode},
          {"size", size},
          {"concurrency", concurrency},
          {"distribute", distribute},
          {"duration", duration_s},
          {"link_mbit", link_mbit}};
}

namespace {
// One client's share of a self-test, run for its duration on a worker of the client.
const RpcMethod<LoadRequest, ClientResult> kRunRpc{
    .type = kMsgSelftestRun,
    .name = "SELFTEST_RUN",
    .exec = Execution::kOnce,
    .encode_request = [](const LoadRequest& q) { return q.encode(); },
    // The size is checked against the serving node's max_bulk by the handler.
    .decode_request = [](std::span<const uint8_t> b) { return decode_load_request(b, UINT32_MAX); },
    .encode_reply = encode_client_result,
    .decode_reply = decode_client_result,
    .mode = HandlerMode::kWorker};
}  // namespace

void serve_selftest(RpcEngine& rpc, Clock& clock) {
  serve(rpc, kRunRpc, [&rpc, &clock](LoadRequest&& q, RpcRequest& r) -> Result<ClientResult> {
    if (Status st = check_load_size(q.size, rpc.max_bulk()); !st.ok()) return st;
    PFS_LOG_INFO("selftest: {} from {}: {} in flight for {} s", q.test, r.from.to_string(),
                 q.concurrency, q.duration_s);
    return run_load(rpc, clock, q);
  });
}

Result<json> run_selftest(RpcEngine& rpc, const SelftestSpec& spec) {
  json steps = json::array();
  size_t nc = spec.clients.size(), ns = spec.servers.size();
  for (int conc : spec.concurrency) {
    struct Collect {
      explicit Collect(size_t n) : replies(n, Status(Code::kTimeout, "no reply")) {}
      Mutex mu;
      CondVar cv;
      std::vector<Result<ClientResult>> replies GUARDED_BY(mu);
      size_t done GUARDED_BY(mu) = 0;
    };
    auto col = std::make_shared<Collect>(nc);
    std::vector<std::thread> locals;
    CallOptions co;
    co.timeout =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(spec.duration_s + 60));
    for (size_t i = 0; i < nc; ++i) {
      LoadRequest req;
      if (spec.distribute == "1:1") {
        req.targets.push_back(spec.servers[i % ns]);
      } else {
        for (size_t k = 0; k < ns; ++k) req.targets.push_back(spec.servers[(i + k) % ns]);
      }
      req.test = spec.test;
      req.mode = spec.mode;
      req.size = spec.size;
      req.concurrency = conc;
      req.duration_s = spec.duration_s;
      const auto& mine = rpc.net().local_nids();
      if (std::find(mine.begin(), mine.end(), spec.clients[i]) != mine.end()) {
        // This node is one of the clients: run its share here, not through a connection
        // to itself (which link emulation would also delay).
        locals.emplace_back([col, i, req, &rpc] {
          name_this_thread("pfs-selftest");
          Result<ClientResult> res = run_load(rpc, rpc.net().clock(), req);
          MutexLock lk(col->mu);
          col->replies[i] = std::move(res);
          ++col->done;
          col->cv.notify_all();
        });
        continue;
      }
      call_async(
          rpc, kRunRpc, spec.clients[i], req,
          [col, i](Result<ClientResult> r) {
            MutexLock lk(col->mu);
            col->replies[i] = std::move(r);
            ++col->done;
            col->cv.notify_all();
          },
          co);
    }
    for (auto& t : locals) t.join();  // bounded: run_load ends by its own deadline
    std::vector<Result<ClientResult>> replies;
    {
      MutexLock lk(col->mu);
      col->cv.wait_for(lk, co.timeout + std::chrono::seconds(5),
                       [&]() REQUIRES(col->mu) { return col->done == nc; });
      if (col->done != nc)
        return Status(Code::kTimeout, "selftest: clients did not report in time");
      replies = std::move(col->replies);
    }
    uint64_t rpcs = 0, errors = 0;
    double bytes_per_s = 0, rpc_per_s = 0;
    std::vector<double> lat, rtts;
    std::string first_error;
    std::vector<double> timeline;  // MiB completed in each second, all clients
    json per_client = json::array();
    for (size_t i = 0; i < nc; ++i) {
      const Result<ClientResult>& c = replies[i];
      if (!c.ok())
        return Status(c.status().code(),
                      "selftest on " + spec.clients[i].to_string() + ": " + c.status().message());
      double secs = std::max(1e-9, c->seconds);
      rpcs += c->rpcs;
      errors += c->errors;
      bytes_per_s += double(c->bytes) / secs;
      rpc_per_s += double(c->rpcs) / secs;
      rtts.push_back(c->rtt_ms);
      lat.insert(lat.end(), c->latencies_ms.begin(), c->latencies_ms.end());
      if (timeline.size() < c->timeline.size()) timeline.resize(c->timeline.size(), 0.0);
      for (size_t k = 0; k < c->timeline.size(); ++k)
        timeline[k] += double(c->timeline[k]) / (1 << 20);
      if (first_error.empty()) first_error = c->first_error;
      per_client.push_back({{"nid", spec.clients[i].to_string()},
                            {"rpcs", c->rpcs},
                            {"errors", c->errors},
                            {"mib_s", round3(double(c->bytes) / secs / (1 << 20))},
                            {"rtt_ms", round3(c->rtt_ms)},
                            {"first_error", c->first_error}});
    }
    double rtt_ms = percentile(rtts, 0.5);
    double theory = rtt_ms > 0 ? double(conc) * double(nc) * spec.size / (rtt_ms / 1000) : 0;
    if (spec.link_mbit > 0) theory = std::min(theory, spec.link_mbit * 1e6 / 8 * double(nc));
    double mib = bytes_per_s / (1 << 20), theory_mib = theory / (1 << 20);
    steps.push_back({{"concurrency", conc},
                     {"rpcs", rpcs},
                     {"errors", errors},
                     {"mib_s", round3(mib)},
                     {"rpc_s", round3(rpc_per_s)},
                     {"p50_ms", round3(percentile(lat, 0.5))},
                     {"p99_ms", round3(percentile(lat, 0.99))},
                     {"rtt_ms", round3(rtt_ms)},
                     {"theory_mib_s", round3(theory_mib)},
                     {"efficiency", theory_mib > 0 ? round3(mib / theory_mib) : 0.0},
                     {"timeline_mib_s", timeline},
                     {"first_error", first_error},
                     {"clients", per_client}});
  }
  return json{{"spec", spec.to_json()}, {"steps", steps}};
}

std::string selftest_svg(const json& result) {
  const json& steps = result["steps"];
  const double W = 720, H = 440, L = 70, R = 20, T = 40, B = 60;
  double ymax = 1;
  for (const json& s : steps)
    ymax = std::max({ymax, s["mib_s"].get<double>(), s["theory_mib_s"].get<double>()});
  ymax *= 1.1;
  size_t n = steps.size();
  auto x = [&](size_t i) {
    return L + (n > 1 ? (W - L - R) * double(i) / double(n - 1) : (W - L - R) / 2);
  };
  auto y = [&](double v) { return T + (H - T - B) * (1 - v / ymax); };
  auto fmt = [](double v) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.1f", v);
    return std::string(b);
  };
  const json& spec = result["spec"];
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt(W) + "\" height=\"" +
                    fmt(H) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + fmt(W / 2) +
         "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">pfsnet selftest " +
         spec.value("test", std::string()) + " " + spec.value("mode", std::string()) + ", " +
         std::to_string(spec.value("size", 0)) + " B: throughput against RPCs in flight</text>\n";
  // Axes, grid and labels.
  svg += "<line x1=\"" + fmt(L) + "\" y1=\"" + fmt(H - B) + "\" x2=\"" + fmt(W - R) + "\" y2=\"" +
         fmt(H - B) + "\" stroke=\"black\"/>\n";
  svg += "<line x1=\"" + fmt(L) + "\" y1=\"" + fmt(T) + "\" x2=\"" + fmt(L) + "\" y2=\"" +
         fmt(H - B) + "\" stroke=\"black\"/>\n";
  for (int k = 0; k <= 5; ++k) {
    double v = ymax * k / 5;
    svg += "<line x1=\"" + fmt(L) + "\" y1=\"" + fmt(y(v)) + "\" x2=\"" + fmt(W - R) + "\" y2=\"" +
           fmt(y(v)) + "\" stroke=\"#ddd\"/>\n<text x=\"" + fmt(L - 6) + "\" y=\"" + fmt(y(v) + 4) +
           "\" text-anchor=\"end\">" + fmt(v) + "</text>\n";
  }
  for (size_t i = 0; i < n; ++i)
    svg += "<text x=\"" + fmt(x(i)) + "\" y=\"" + fmt(H - B + 18) + "\" text-anchor=\"middle\">" +
           std::to_string(steps[i]["concurrency"].get<int>()) + "</text>\n";
  svg += "<text x=\"" + fmt((L + W - R) / 2) + "\" y=\"" + fmt(H - 18) +
         "\" text-anchor=\"middle\">RPCs in flight per client</text>\n";
  svg += "<text x=\"16\" y=\"" + fmt((T + H - B) / 2) + "\" transform=\"rotate(-90 16 " +
         fmt((T + H - B) / 2) + ")\" text-anchor=\"middle\">MiB/s</text>\n";
  auto line = [&](const char* key, const char* colour, const char* dash) {
    std::string pts;
    for (size_t i = 0; i < n; ++i)
      pts += (i ? " " : "") + fmt(x(i)) + "," + fmt(y(steps[i][key].get<double>()));
    std::string s = "<polyline fill=\"none\" stroke=\"" + std::string(colour) +
                    "\" stroke-width=\"2\"" + dash + " points=\"" + pts + "\"/>\n";
    for (size_t i = 0; i < n; ++i)
      s += "<circle cx=\"" + fmt(x(i)) + "\" cy=\"" + fmt(y(steps[i][key].get<double>())) +
           "\" r=\"3\" fill=\"" + colour + "\"/>\n";
    return s;
  };
  svg += line("theory_mib_s", "#999", " stroke-dasharray=\"6 4\"");
  svg += line("mib_s", "#1f5fbf", "");
  svg += "<text x=\"" + fmt(W - R - 150) + "\" y=\"" + fmt(T + 14) +
         "\" fill=\"#1f5fbf\">measured</text>\n<text x=\"" + fmt(W - R - 150) + "\" y=\"" +
         fmt(T + 30) + "\" fill=\"#999\">theory min(link, RPCs x size / RTT)</text>\n";
  svg += "</svg>\n";
  return svg;
}

}  // namespace pfsnet
