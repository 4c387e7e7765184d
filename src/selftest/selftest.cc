#include "selftest/selftest.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "base/log.h"
#include "base/mutex.h"
#include "rpc/ping.h"

namespace pfsnet {

using nlohmann::json;

namespace {

constexpr size_t kMaxSamples = 2000;
constexpr size_t kMaxTimeline = 3700;  // seconds (the longest duration, and the drain)

Result<std::vector<Nid>> nids_of(const json& j, const char* what) {
  std::vector<Nid> v;
  if (!j.is_array() || j.empty())
    return Status(Code::kInvalidArgument, std::string(what) + ": a non-empty list of NIDs");
  for (const json& x : j) {
    if (!x.is_string()) return Status(Code::kInvalidArgument, std::string(what) + ": NIDs only");
    auto n = Nid::parse(x.get<std::string>());
    if (!n.ok())
      return Status(Code::kInvalidArgument, std::string(what) + ": " + n.status().message());
    v.push_back(*n);
  }
  return v;
}

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::lround(q * double(v.size() - 1)));
  return v[std::min(i, v.size() - 1)];
}

double round3(double v) { return std::round(v * 1000) / 1000; }

// One client's load, on the worker that serves SELFTEST_RUN.
json run_load(RpcEngine& rpc, Clock& clock, const json& req) {
  auto targets = nids_of(req.value("targets", json::array()), "targets");
  if (!targets.ok()) return json{{"error", targets.status().message()}};
  std::string test = req.value("test", "brw"), mode = req.value("mode", "write");
  uint32_t size = req.value("size", 0u);
  int conc = std::max(1, req.value("concurrency", 1));
  double duration = std::max(0.01, req.value("duration_s", 1.0));
  // RTT: the fastest of three empty PINGs to each target.
  CallOptions quick;
  quick.timeout = std::chrono::seconds(5);
  double rtt = 0;
  for (const Nid& t : *targets)
    for (int i = 0; i < 3; ++i) {
      RpcReply r = rpc.call(t, kMsgPing, Buffer(), nullptr, quick);
      if (!r.status.ok())
        return json{{"error", "PING " + t.to_string() + ": " + r.status.to_string()}};
      double ms = to_ms(r.round_trip());
      rtt = rtt == 0 ? ms : std::min(rtt, ms);
    }
  uint32_t type = test == "ping" ? kMsgPing : mode == "read" ? kMsgBrwRead : kMsgBrwWrite;
  BulkData data = size && type != kMsgBrwRead ? make_bulk(make_ping_pattern(size)) : nullptr;
  uint64_t bytes_per_rpc = size;

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
          [st, &clock, bytes_per_rpc, start](RpcReply&& r) {
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
  if (left > 0) return json{{"error", std::to_string(left) + " RPCs did not finish"}};
  return json{{"rpcs", res.rpcs},         {"errors", res.errors},
              {"bytes", res.bytes},       {"seconds", res.seconds},
              {"rtt_ms", res.rtt_ms},     {"lat_ms", res.latencies_ms},
              {"timeline", res.timeline}, {"first_error", res.first_error}};
}

}  // namespace

Result<SelftestSpec> SelftestSpec::from_json(const json& j) {
  SelftestSpec s;
  auto c = nids_of(j.value("from", json::array()), "from");
  if (!c.ok()) return c.status();
  auto sv = nids_of(j.value("to", json::array()), "to");
  if (!sv.ok()) return sv.status();
  s.clients = *c;
  s.servers = *sv;
  s.test = j.value("test", s.test);
  s.mode = j.value("mode", s.mode);
  s.distribute = j.value("distribute", s.distribute);
  s.duration_s = j.value("duration", s.duration_s);
  s.link_mbit = j.value("link_mbit", s.link_mbit);
  int64_t size = j.value("size", int64_t(s.size));
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
    int v = x.is_number_integer() ? x.get<int>() : 0;
    if (v < 1 || v > 4096)
      return Status(Code::kInvalidArgument, "each concurrency must be 1..4096");
    s.concurrency.push_back(v);
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

void serve_selftest(RpcEngine& rpc, Clock& clock) {
  rpc.handle(
      kMsgSelftestRun,
      [&rpc, &clock](RpcRequest& r) {
        RpcResponse resp;
        json req = json::parse(std::string(r.payload.view()), nullptr, false);
        if (req.is_discarded()) {
          resp.status = Status(Code::kProtocol, "SELFTEST_RUN: malformed request");
          return resp;
        }
        PFS_LOG_INFO("selftest: {} from {}: {} in flight for {} s", req.value("test", "?"),
                     r.from.to_string(), req.value("concurrency", 0), req.value("duration_s", 0.0));
        std::string out = run_load(rpc, clock, req).dump();
        if (out.size() > kMaxPayload) {
          resp.status = Status(Code::kInternal, "SELFTEST_RUN: result too large");
          return resp;
        }
        resp.payload = Buffer::copy_of(std::string_view(out));
        return resp;
      },
      HandlerMode::kWorker);
}

Result<json> run_selftest(RpcEngine& rpc, const SelftestSpec& spec) {
  json steps = json::array();
  size_t nc = spec.clients.size(), ns = spec.servers.size();
  for (int conc : spec.concurrency) {
    struct Collect {
      explicit Collect(size_t n) : replies(n) {}
      Mutex mu;
      CondVar cv;
      std::vector<RpcReply> replies GUARDED_BY(mu);
      size_t done GUARDED_BY(mu) = 0;
    };
    auto col = std::make_shared<Collect>(nc);
    std::vector<std::thread> locals;
    CallOptions co;
    co.timeout =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(spec.duration_s + 60));
    for (size_t i = 0; i < nc; ++i) {
      json targets = json::array();
      if (spec.distribute == "1:1") {
        targets.push_back(spec.servers[i % ns].to_string());
      } else {
        for (size_t k = 0; k < ns; ++k) targets.push_back(spec.servers[(i + k) % ns].to_string());
      }
      json req = {{"targets", targets}, {"test", spec.test},   {"mode", spec.mode},
                  {"size", spec.size},  {"concurrency", conc}, {"duration_s", spec.duration_s}};
      std::string text = req.dump();
      const auto& mine = rpc.net().local_nids();
      if (std::find(mine.begin(), mine.end(), spec.clients[i]) != mine.end()) {
        // This node is one of the clients: run its share here, not through a connection
        // to itself (which link emulation would also delay).
        locals.emplace_back([col, i, req, &rpc] {
          RpcReply r;
          std::string out = run_load(rpc, rpc.net().clock(), req).dump();
          r.payload = Buffer::copy_of(std::string_view(out));
          MutexLock lk(col->mu);
          col->replies[i] = std::move(r);
          ++col->done;
          col->cv.notify_all();
        });
        continue;
      }
      rpc.call_async(
          spec.clients[i], kMsgSelftestRun, Buffer::copy_of(std::string_view(text)), nullptr,
          [col, i](RpcReply&& r) {
            MutexLock lk(col->mu);
            col->replies[i] = std::move(r);
            ++col->done;
            col->cv.notify_all();
          },
          co);
    }
    for (auto& t : locals) t.join();  // bounded: run_load ends by its own deadline
    std::vector<RpcReply> replies;
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
    for (size_t i = 0; i < nc; ++i) {
      RpcReply& r = replies[i];
      if (!r.status.ok())
        return Status(r.status.code(),
                      "selftest on " + spec.clients[i].to_string() + ": " + r.status.message());
      json c = json::parse(std::string(r.payload.view()), nullptr, false);
      if (c.is_discarded()) return Status(Code::kProtocol, "selftest: malformed client result");
      if (c.contains("error"))
        return Status(Code::kRemoteError, "selftest on " + spec.clients[i].to_string() + ": " +
                                              c["error"].get<std::string>());
      double secs = std::max(1e-9, c["seconds"].get<double>());
      rpcs += c["rpcs"].get<uint64_t>();
      errors += c["errors"].get<uint64_t>();
      bytes_per_s += double(c["bytes"].get<uint64_t>()) / secs;
      rpc_per_s += double(c["rpcs"].get<uint64_t>()) / secs;
      rtts.push_back(c["rtt_ms"].get<double>());
      for (const json& x : c["lat_ms"]) lat.push_back(x.get<double>());
      const json& tl = c.contains("timeline") ? c["timeline"] : json::array();
      if (timeline.size() < tl.size()) timeline.resize(tl.size(), 0.0);
      for (size_t k = 0; k < tl.size(); ++k)
        timeline[k] += double(tl[k].get<uint64_t>()) / (1 << 20);
      if (first_error.empty()) first_error = c.value("first_error", "");
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
                     {"first_error", first_error}});
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
