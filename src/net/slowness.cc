#include "net/slowness.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace pfsnet {

const char* slow_cause_name(SlowCause c) {
  switch (c) {
    case SlowCause::kNone:
      return "NONE";
    case SlowCause::kSlow:
      return "SLOW";
    case SlowCause::kLossy:
      return "LOSSY";
    case SlowCause::kServer:
      return "SERVER";
  }
  return "?";
}

std::string SlownessEvidence::text() const {
  std::string s;
  auto sep = [&s] { return s.empty() ? "" : ", "; };
  if (latency_judged) s = fmt::format("latency {:.3f} ms", latency_ms);
  if (baseline_ms > 0)
    s += fmt::format(" (baseline {:.3f} ms, x{:.1f}", baseline_ms, latency_ms / baseline_ms);
  if (peers_ms > 0) s += fmt::format("{}peers {:.3f} ms", baseline_ms > 0 ? "; " : " (", peers_ms);
  if (baseline_ms > 0 || peers_ms > 0) s += ")";
  if (exec_baseline_ms > 0)
    s += fmt::format("{}server execution {:.3f} ms (baseline {:.3f} ms)", sep(), exec_ms,
                     exec_baseline_ms);
  if (wire_judged) s += fmt::format("{}TCP's RTT +{:.3f} ms over its lowest", sep(), wire_ms);
  if (segs > 0)
    s += fmt::format("{}TCP retransmitted {} of {} segments ({:.2f}%)", sep(), retrans, segs,
                     loss * 100);
  if (congestion_retrans > 0)
    s += fmt::format(" and {} more while a queue stood (congestion, not loss)", congestion_retrans);
  s += fmt::format("{}over {} s", sep(), std::max(samples, tcp_seconds));
  return s;
}

bool queue_on_path(const TcpKernelInfo& k) {
  return k.unacked > 0 && k.min_rtt_us > 0 && k.rtt_us > 1.1 * k.min_rtt_us + 1000;
}

bool queue_stands(double srtt_ms, double min_rtt_ms, double host_excess_ms) {
  double excess = srtt_ms - min_rtt_ms;
  return min_rtt_ms > 0 && excess >= std::max(2.0, 0.25 * min_rtt_ms) &&
         (host_excess_ms < 0 || excess >= 3 * host_excess_ms);
}

namespace {

// The upper median: a queue is judged present when half the seconds show one.
double upper_median(std::vector<double>& v) {
  auto mid = v.begin() + static_cast<long>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace

double lower_median(std::vector<double>& v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + static_cast<long>((v.size() - 1) / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

double SlownessTracker::baseline(double Minute::*field) const {
  double b = 0;
  for (const Minute& m : minutes_)
    if (m.*field > 0 && (b == 0 || m.*field < b)) b = m.*field;
  return b;
}

double SlownessTracker::limit(double ref, double scale) const {
  double excess = std::chrono::duration<double, std::milli>(opts_.min_excess).count() * scale;
  return std::max(ref * opts_.factor * scale, ref + excess);
}

SlowCause SlownessTracker::judge(double scale) const {
  const SlownessEvidence& e = evidence_;
  auto above = [&](double v, double ref) { return ref > 0 && v > limit(ref, scale); };
  if (e.segs >= opts_.min_segments && e.loss > opts_.loss_ratio * scale) return SlowCause::kLossy;
  if (e.samples >= opts_.min_samples) {
    if (above(e.latency_ms, e.baseline_ms) || above(e.latency_ms, e.peers_ms)) {
      // What the latency stands above the lower of its references: if the wire's queue
      // (TCP's RTT) holds under a tenth of it, the time is spent at the server.
      double ref = e.baseline_ms > 0 && (e.peers_ms <= 0 || e.baseline_ms < e.peers_ms)
                       ? e.baseline_ms
                       : e.peers_ms;
      if (e.wire_judged && 10 * e.wire_ms < e.latency_ms - ref) return SlowCause::kServer;
      return SlowCause::kSlow;
    }
    if (above(e.exec_ms, e.exec_baseline_ms)) return SlowCause::kServer;
  }
  return SlowCause::kNone;
}

std::optional<SlownessTracker::Change> SlownessTracker::add(const SlownessSample& s, TimePoint now,
                                                            double peers_ms) {
  if (!started_) {
    started_ = true;
    start_ = now;
    since_ = now;
  }
  // The kernel's counters: deltas per sample; a counter that went down is a new connection.
  std::pair<uint64_t, uint64_t> d{0, 0};
  uint64_t congestion = 0;
  if (have_tcp_) {
    if (s.segs_out >= last_segs_ && s.retrans >= last_retrans_)
      d = {s.segs_out - last_segs_, s.retrans - last_retrans_};
    else
      d = {s.segs_out, s.retrans};
    congestion = s.congestion_retrans >= last_congestion_ ? s.congestion_retrans - last_congestion_
                                                          : s.congestion_retrans;
  }
  have_tcp_ = true;
  last_segs_ = s.segs_out;
  last_retrans_ = s.retrans;
  last_congestion_ = s.congestion_retrans;
  // A drop's retransmit comes a round trip or more after it, when the queue that dropped
  // it may have drained: a second right after one that saw a queue still carries its drops
  // (auto-tune overfilling a clean 50 ms path: the queue showed in one second's RTT, and
  // the next second's retransmits were named random loss).
  bool queued = s.queueing || queued_last_;
  queued_last_ = s.queueing;
  tcp_.push_back({d.first, d.second, congestion, queued});
  while (tcp_.size() > static_cast<size_t>(opts_.window)) tcp_.pop_front();
  clean_segs_ += d.first;
  if (!queued) clean_retrans_ += d.second;
  // A busy second's latency counts only for health, while degraded for a latency cause,
  // when it is already below the clearing threshold against the (frozen) baseline.
  bool counts = s.count > 0;
  if (counts && s.busy) {
    double base = baseline(&Minute::latency_ms);
    counts = degraded_ && cause_ == SlowCause::kSlow && base > 0 &&
             s.latency_ms <= limit(base, 2.0 / 3.0);
  }
  if (counts) {
    window_.push_back({s.latency_ms, s.exec_ms, s.rtt_excess_ms});
    while (window_.size() > static_cast<size_t>(opts_.window)) window_.pop_front();
  }

  SlownessEvidence& e = evidence_;
  e = SlownessEvidence{};
  for (const TcpDelta& t : tcp_) {
    e.segs += t.segs;
    (t.queueing ? e.congestion_retrans : e.retrans) += t.retrans;
    e.congestion_retrans += t.congestion;
  }
  e.loss = e.segs ? double(e.retrans) / double(e.segs) : 0;
  e.tcp_seconds = static_cast<int>(tcp_.size());
  e.samples = static_cast<int>(window_.size());
  bool judged_latency = e.samples >= opts_.min_samples;
  e.latency_judged = judged_latency;
  if (judged_latency) {
    // Scratch for the medians: no allocation once grown to the window.
    thread_local std::vector<double> lat, exec, wire;
    lat.clear();
    exec.clear();
    wire.clear();
    for (const Second& w : window_) {
      lat.push_back(w.latency_ms);
      exec.push_back(w.exec_ms);
      if (w.rtt_excess_ms >= 0) wire.push_back(w.rtt_excess_ms);
    }
    e.latency_ms = lower_median(lat);
    e.exec_ms = lower_median(exec);
    e.wire_judged = wire.size() >= static_cast<size_t>(opts_.min_samples);
    if (e.wire_judged) e.wire_ms = upper_median(wire);
    // The baselines learn only while healthy: slowness never becomes the norm while it
    // lasts.
    if (!degraded_) {
      int64_t idx = std::chrono::duration_cast<std::chrono::minutes>(now - start_).count();
      if (minutes_.empty() || minutes_.back().index != idx) {
        minutes_.push_back({idx, e.latency_ms, e.exec_ms});
      } else {
        Minute& m = minutes_.back();
        m.latency_ms = std::min(m.latency_ms, e.latency_ms);
        m.exec_ms = std::min(m.exec_ms, e.exec_ms);
      }
      while (idx - minutes_.front().index >= opts_.baseline_minutes) minutes_.pop_front();
    }
    e.baseline_ms = baseline(&Minute::latency_ms);
    e.exec_baseline_ms = baseline(&Minute::exec_ms);
    e.peers_ms = peers_ms;
  } else {
    e.samples = static_cast<int>(window_.size());
  }
  // Nothing to judge -- unless a LOSSY state has gathered its clearing evidence across
  // seconds (a path that carries a few segments a second and no small RPC still ends).
  bool lossy_evidence =
      degraded_ && cause_ == SlowCause::kLossy && clean_segs_ >= opts_.min_segments;
  if (!judged_latency && e.segs < opts_.min_segments && !lossy_evidence) return std::nullopt;

  if (!degraded_) {
    SlowCause c = judge(1.0);
    if (c == SlowCause::kNone) {
      streak_ = 0;
      return std::nullopt;
    }
    if (++streak_ < opts_.trip) return std::nullopt;
    degraded_ = true;
    cause_ = c;
    Duration lasted = now - since_;
    since_ = now;
    streak_ = 0;
    clean_segs_ = clean_retrans_ = 0;
    return Change{true, c, e, lasted};
  }
  // Degraded: good only well below the threshold (2/3 of it).
  SlowCause c = judge(2.0 / 3.0);
  // LOSSY's evidence gathered since the last bad judgement: enough segments, and too many
  // of them retransmitted is a bad judgement too.
  bool clean_enough = clean_segs_ >= opts_.min_segments;
  if (cause_ == SlowCause::kLossy && c == SlowCause::kNone && clean_enough &&
      double(clean_retrans_) > double(clean_segs_) * opts_.loss_ratio * 2.0 / 3.0)
    c = SlowCause::kLossy;
  if (c != SlowCause::kNone) {
    streak_ = 0;
    clean_segs_ = clean_retrans_ = 0;
    if (c == cause_) return std::nullopt;
    cause_ = c;  // still degraded, for another reason now
    return Change{true, c, e, now - since_};
  }
  // A judgement counts as good only on the evidence that made the call: enough segments
  // for LOSSY, enough latency samples for SLOW and SERVER (an idle subject stays as it is).
  if (cause_ == SlowCause::kLossy ? !clean_enough : !judged_latency) return std::nullopt;
  if (++streak_ < opts_.clear) return std::nullopt;
  degraded_ = false;
  SlowCause was = cause_;
  cause_ = SlowCause::kNone;
  Duration lasted = now - since_;
  since_ = now;
  streak_ = 0;
  return Change{false, was, e, lasted};
}

}  // namespace pfsnet
