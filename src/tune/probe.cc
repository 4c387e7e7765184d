// The tune probe: its handler, the trains' rates, the estimate of a path's bandwidth and
// the loss check (declared in tune.h, beside the advice they feed).
#include <algorithm>
#include <cmath>

#include "base/log.h"
#include "rpc/call_batch.h"
#include "rpc/ping.h"
#include "tune/text.h"
#include "tune/tune.h"

namespace pfsnet {

using namespace tune_text;

void serve_tune_probe(RpcEngine& engine, Clock& clock) {
  engine.handle(
      kMsgTuneProbe,
      [&clock](RpcRequest&) {
        RpcResponse r;
        uint64_t ns = static_cast<uint64_t>(clock.now().time_since_epoch().count());
        r.payload = Buffer(8);
        for (int i = 0; i < 8; ++i) r.payload.data()[i] = static_cast<uint8_t>(ns >> (8 * i));
        return r;
      },
      HandlerMode::kInline, Execution::kRepeatable);
}

TrainRate train_rate(std::vector<uint64_t> stamps, uint32_t size, double rtt_ms) {
  TrainRate tr;
  if (stamps.size() < 2) return tr;
  std::sort(stamps.begin(), stamps.end());
  double span_s = double(stamps.back() - stamps.front()) / 1e9;
  if (span_s <= 0) return tr;
  tr.rate = double(stamps.size() - 1) * double(size) / span_s;
  std::vector<uint64_t> gaps;
  for (size_t i = 1; i < stamps.size(); ++i) gaps.push_back(stamps[i] - stamps[i - 1]);
  uint64_t widest = *std::max_element(gaps.begin(), gaps.end());
  std::nth_element(gaps.begin(), gaps.begin() + long(gaps.size() / 2), gaps.end());
  double median = double(gaps[gaps.size() / 2]);
  double widest_ms = double(widest) / 1e6;
  tr.window_limited = rtt_ms > 0 && widest_ms > rtt_ms / 2 && double(widest) > 3 * median;
  return tr;
}

bool paced(const TrainRate& t) {
  return t.pacing > 0 && !t.window_limited && t.rate >= 0.9 * t.pacing && t.rate <= 1.1 * t.pacing;
}

bool trains_settled(const std::vector<TrainRate>& trains) {
  double lo = 0, hi = 0;
  int n = 0;
  for (auto it = trains.rbegin(); it != trains.rend() && n < 3; ++it) {
    if (it->lost) continue;
    if (it->rate <= 0 || it->window_limited || paced(*it)) return false;
    lo = lo == 0 ? it->rate : std::min(lo, it->rate);
    hi = std::max(hi, it->rate);
    ++n;
  }
  return n == 3 && hi <= 1.1 * lo;
}

ProbeEstimate estimate_bandwidth(const std::vector<TrainRate>& trains) {
  ProbeEstimate e;
  std::vector<double> late, all, held, lost;
  double bound = 0;  // the best lower bound of the link
  for (size_t i = 0; i < trains.size(); ++i) {
    const TrainRate& t = trains[i];
    if (t.lost) ++e.lost;
    if (t.rate <= 0) continue;
    if (t.lost) {
      lost.push_back(t.rate);
      if (t.pacing > 0 && t.rate <= 1.1 * t.pacing) {
        ++e.bounds;
        bound = std::max(bound, t.rate);
      }
    } else if (t.window_limited) {
      held.push_back(t.rate);
    } else if (paced(t)) {
      ++e.paced;
      ++e.bounds;
      bound = std::max(bound, t.rate);
    } else {
      all.push_back(t.rate);
      if (2 * i >= trains.size()) late.push_back(t.rate);
    }
  }
  e.clean = static_cast<int>(all.size());
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (!late.empty())
    e.bandwidth = median(late);
  else if (!all.empty())
    e.bandwidth = median(all);
  e.bandwidth = std::max(e.bandwidth, bound);
  if (e.bandwidth > 0) return e;
  if (!held.empty()) {
    e.window_limited = true;
    e.bandwidth = *std::max_element(held.begin(), held.end());
  } else if (!lost.empty()) {
    e.every_train_lost = true;
    e.bandwidth = median(lost);
  }
  return e;
}

namespace {
// The segments and retransmits of `now` since `start`.
void count_since(const ProbeTcp& start, const ProbeTcp& now, LossCheck* lc) {
  lc->segments = now.segments - std::min(now.segments, start.segments);
  lc->retransmits = now.retransmits - std::min(now.retransmits, start.retransmits);
}

// A train: `n` TUNE_PROBE RPCs carrying `data` to `peer`, back to back, each within
// co.timeout. Their replies in order, or the first failure as "<what>: ...".
Result<std::vector<RpcReply>> send_train(RpcEngine& rpc, const Nid& peer, int n,
                                         const BulkData& data, const CallOptions& co,
                                         const std::string& what) {
  CallBatch batch(rpc);
  for (int i = 0; i < n; ++i) batch.add(peer, kMsgTuneProbe, Buffer(), data, co);
  // Every RPC ends within its timeout; the margin covers the callbacks.
  if (!batch.wait(co.timeout + std::chrono::seconds(5)))
    return Status(Code::kTimeout, what + ": the train did not finish");
  std::vector<RpcReply> replies = batch.take();
  for (const RpcReply& r : replies)
    if (!r.status.ok()) return Status(r.status.code(), what + ": " + r.status.message());
  return replies;
}
}  // namespace

Result<LossCheck> check_loss(const std::function<Status()>& run_train,
                             const std::function<ProbeTcp()>& tcp, Clock& clock, ProbeTcp start) {
  LossCheck lc;
  TimePoint t0 = clock.now();
  auto read = [&] { count_since(start, tcp(), &lc); };
  read();
  while (lc.retransmits == 0 && lc.segments < kLossCheckSegments) {
    if (lc.trains >= kLossCheckTrains || clock.now() - t0 >= kLossCheckTime) {
      lc.cut_short = true;
      break;
    }
    if (Status s = run_train(); !s.ok()) return s;
    ++lc.trains;
    read();
  }
  return lc;
}

Result<ProbeResult> probe_peer(RpcEngine& rpc, Clock& clock, const Nid& peer, uint32_t size,
                               int train, int max_trains, Duration timeout,
                               const std::function<ProbeTcp()>& tcp) {
  if (train < 2 || max_trains < 1 || size == 0)
    return Status(Code::kInvalidArgument, "a probe needs a train of 2 or more RPCs of data");
  ProbeResult pr;
  pr.train = train;
  pr.size = size;
  CallOptions co;
  co.timeout = timeout;
  // One TCP stream: over lnet.conns_per_peer connections the train's RPCs cross the link
  // side by side and arrive a stream's share of it apart -- at 1 Gbit/s and 50 ms over
  // four, trains read 204 MiB/s of a 119 MiB/s link, and the advice overflowed its queue.
  co.one_stream = true;
  for (int i = 0; i < 3; ++i) {
    RpcReply r = rpc.call(peer, kMsgPing, Buffer(), nullptr, co);
    if (!r.status.ok())
      return Status(r.status.code(), "probe PING " + peer.to_string() + ": " + r.status.message());
    double ms = to_ms(r.round_trip());
    pr.rtt_ms = i == 0 ? ms : std::min(pr.rtt_ms, ms);
  }
  BulkData data = make_bulk(Buffer(size));
  // One train: `train` RPCs back to back; the server's arrival stamps in `stamps`.
  std::vector<uint64_t> stamps;
  auto run_train = [&]() -> Status {
    stamps.clear();
    auto replies = send_train(rpc, peer, train, data, co, "probe of " + peer.to_string());
    if (!replies.ok()) return replies.status();
    for (const RpcReply& r : *replies) {
      if (r.payload.size() != 8)
        return Status(Code::kProtocol,
                      "probe of " + peer.to_string() + ": malformed TUNE_PROBE reply");
      uint64_t ns = 0;
      for (int k = 0; k < 8; ++k) ns |= uint64_t(r.payload.data()[k]) << (8 * k);
      stamps.push_back(ns);
    }
    return Status::Ok();
  };
  ProbeTcp start = tcp ? tcp() : ProbeTcp{};
  std::vector<TrainRate> trains;
  int unlost = 0;
  for (int t = 0; !trains_settled(trains); ++t) {
    if (t >= max_trains && (unlost >= 3 || t >= 3 * max_trains)) break;
    ProbeTcp before = tcp ? tcp() : ProbeTcp{};
    if (Status s = run_train(); !s.ok()) return s;
    TrainRate tr = train_rate(std::move(stamps), size, pr.rtt_ms);
    if (tcp) {
      ProbeTcp after = tcp();
      tr.lost = after.retransmits > before.retransmits;
      tr.pacing = std::max(before.pacing_rate, after.pacing_rate);
    }
    if (!tr.lost) ++unlost;
    PFS_LOG_DEBUG("tune: probe of {}: train {} read {:.1f} MiB/s (paced at {:.1f}){}{}{}",
                  peer.to_string(), t + 1, tr.rate / (1 << 20), tr.pacing / (1 << 20),
                  tr.window_limited ? ", held by the window" : "", tr.lost ? ", lost a packet" : "",
                  paced(tr) ? ", paced by the sender" : "");
    trains.push_back(tr);
  }
  ProbeEstimate e = estimate_bandwidth(trains);
  if (e.bandwidth <= 0)
    return Status(Code::kProtocol, "probe of " + peer.to_string() +
                                       ": every train arrived at once; no rate can be measured");
  pr.trains = static_cast<int>(trains.size());
  pr.clean = e.clean;
  pr.lost = e.lost;
  pr.paced = e.paced;
  pr.bounds = e.bounds;
  pr.bandwidth = e.bandwidth;
  pr.window_limited = e.window_limited;
  pr.every_train_lost = e.every_train_lost;
  if (tcp) {
    LossCheck lc;
    if (pr.train_short_of_bdp() && e.lost == 0) {
      auto r = check_loss(run_train, tcp, clock, start);
      if (!r.ok()) return r.status();
      lc = *r;
      PFS_LOG_INFO(
          "tune: probe of {}: loss check: {} more trains; {} of {} segments retransmitted{}",
          peer.to_string(), lc.trains, lc.retransmits, lc.segments,
          lc.cut_short ? " (cut short)" : "");
    } else {
      count_since(start, tcp(), &lc);
    }
    pr.segments = lc.segments;
    pr.retransmits = lc.retransmits;
    pr.loss_trains = lc.trains;
  }
  return pr;
}

Status warm_streams(RpcEngine& rpc, const Nid& peer, uint32_t size, int wave, int waves,
                    Duration timeout) {
  if (wave < 1 || waves < 1 || size == 0)
    return Status(Code::kInvalidArgument, "warming a path needs 1 or more RPCs of data");
  BulkData data = make_bulk(Buffer(size));
  CallOptions co;
  co.timeout = timeout;
  for (int w = 0; w < waves; ++w)
    if (auto r =
            send_train(rpc, peer, wave, data, co, "warming the connections to " + peer.to_string());
        !r.ok())
      return r.status();
  return Status::Ok();
}

}  // namespace pfsnet
