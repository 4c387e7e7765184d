#include "tune/tune.h"

#include <algorithm>
#include <cmath>

#include "base/log.h"
#include "tune/text.h"

namespace pfsnet {

namespace {

using namespace tune_text;

int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return std::max(lo, std::min(v, hi)); }

std::string bound_note(int64_t wanted, int64_t got, const char* min_key, const char* max_key) {
  if (got < wanted) return std::string(" (capped by ") + max_key + ")";
  if (got > wanted) return std::string(" (raised to ") + min_key + ")";
  return "";
}

}  // namespace

int64_t rpcs_for(double bdp_bytes, double rpc_bytes) {
  if (!(rpc_bytes > 0)) return 1;
  return static_cast<int64_t>(std::ceil(bdp_bytes / rpc_bytes - 1e-9)) + 1;
}

double window_ceiling(int64_t rpcs, double rpc_bytes, double rtt_s, double bandwidth) {
  if (!(bandwidth > 0)) return 0;
  double cycle = rtt_s + rpc_bytes / bandwidth;
  if (!(cycle > 0)) return bandwidth;
  return std::min(bandwidth, double(rpcs) * rpc_bytes / cycle);
}

Advice advise(std::vector<PeerMeasure> peers, const TuneSettings& cur, const TuneConfig& b,
              size_t active_peers) {
  Advice a;
  a.current = cur;
  a.active_peers = active_peers;
  bool window_limited = false;
  auto rpcs_now = [&](const std::string& peer) {
    auto own = cur.peer_rpcs_in_flight.find(peer);
    return own != cur.peer_rpcs_in_flight.end() ? own->second : cur.max_rpcs_in_flight;
  };
  for (PeerMeasure& m : peers) {
    PeerAdvice p;
    p.m = m;
    p.rpcs_now = rpcs_now(m.peer);
    double size = m.rpc_bytes > 0 ? m.rpc_bytes : kMiB;
    bool flagged = false;
    bool rate_known = m.bandwidth > 0 && !(m.bandwidth_lower_bound && m.window_limited);
    // Loss is the path's, whatever else is known of it (its connections are spread).
    p.lossy = m.retrans_ratio >= kLossyRetransRatio;
    if (m.rtt_ms > 0 && rate_known) {
      p.bdp_bytes = m.bandwidth * m.rtt_ms / 1000.0;
      double headroom =
          std::max(p.lossy ? kLossyHeadroom : 1.0, m.probe_short ? kShortProbeHeadroom : 1.0);
      p.rpcs_needed = rpcs_for(p.bdp_bytes * headroom, size);
      p.headroom = headroom;
      p.ceiling = window_ceiling(p.rpcs_now, size, m.rtt_ms / 1000.0, m.bandwidth);
      if (p.rpcs_now < p.rpcs_needed && p.ceiling < 0.9 * m.bandwidth) {
        flagged = true;
        a.problems.push_back(
            {"rpcs_below_bdp", m.peer,
             fmt("max_rpcs_in_flight %lld lets at most %s to %s, %.0f%% of its %s: RTT %.1f ms "
                 "makes a BDP of %s, which needs %lld RPCs of %s in flight",
                 (long long)p.rpcs_now, rate_text(p.ceiling).c_str(), m.peer.c_str(),
                 100.0 * p.ceiling / m.bandwidth, rate_text(m.bandwidth).c_str(), m.rtt_ms,
                 bytes_text(p.bdp_bytes).c_str(), (long long)p.rpcs_needed,
                 bytes_text(size).c_str())});
      }
    }
    // With the link's rate known the rule above has judged the window; RPCs queueing for
    // slots while the path is full is the application asking for more than the link.
    if (!flagged && !rate_known && m.window_limited && m.rtt_ms > 0 && m.throughput > 0) {
      // The rate of the link is not known, but RPCs queued for a slot while the path
      // carried what the window allows per round trip: the window is the limit.
      double cap = double(p.rpcs_now) * size / (m.rtt_ms / 1000.0);
      if (m.throughput >= 0.8 * cap) {
        window_limited = true;
        a.problems.push_back(
            {"window_limited", m.peer,
             fmt("RPCs to %s queue for max_rpcs_in_flight %lld, which over RTT %.1f ms caps the "
                 "path at %s (carrying %s); the link's rate is not known: run pfsnet tune "
                 "--probe or set tune.link_mbit",
                 m.peer.c_str(), (long long)p.rpcs_now, m.rtt_ms, rate_text(cap).c_str(),
                 rate_text(m.throughput).c_str())});
      }
    }
    a.peers.push_back(p);
  }

  // Why peer `p` needs `rec` RPCs in flight (the study's rule on its measurements).
  auto why_peer = [&](const PeerAdvice& p, int64_t rec) {
    double size = p.m.rpc_bytes > 0 ? p.m.rpc_bytes : kMiB;
    std::string why =
        fmt("%lld: the path to %s holds a BDP of %s (%s x RTT %.1f ms); RPCs of %s need "
            "ceil(%sBDP/size)+1 = %lld in flight to fill it%s; now %lld, at most %s (%.0f%%)",
            (long long)rec, p.m.peer.c_str(), bytes_text(p.bdp_bytes).c_str(),
            rate_text(p.m.bandwidth).c_str(), p.m.rtt_ms, bytes_text(size).c_str(),
            p.headroom > 1 ? fmt("%g x ", p.headroom).c_str() : "", (long long)p.rpcs_needed,
            bound_note(p.rpcs_needed, rec, "tune.min_rpcs_in_flight", "tune.max_rpcs_in_flight")
                .c_str(),
            (long long)p.rpcs_now, rate_text(p.ceiling).c_str(), 100.0 * p.ceiling / p.m.bandwidth);
    if (p.m.probe_short && !p.lossy)
      why +=
          "; the probe's trains were smaller than that BDP and never filled the pipe (TCP's "
          "sender may have held them back), so its rate may be low: headroom over the BDP";
    if (p.lossy)
      why +=
          fmt("; the path retransmits %.4f%% of its TCP segments: a lost one holds the data behind "
              "it in the stream for a round trip, and RPCs beyond the BDP keep the pipe full "
              "meanwhile",
              100 * p.m.retrans_ratio);
    else if (p.m.probe_segments > 0 && p.m.probe_retransmits == 0)
      why += fmt("; the probe carried %llu TCP segments and TCP retransmitted none (%s)",
                 (unsigned long long)p.m.probe_segments,
                 p.m.probe_segments >= kLossCheckSegments
                     ? "a loss of 1 in 10,000 would have shown, 95 times in 100"
                     : "too few to rule out a loss of 1 in 10,000; auto-tune and pfsnet tune read "
                       "TCP's retransmits again once traffic flows");
    return why;
  };

  // max_rpcs_in_flight: the node's value is what the median measured peer needs; a peer
  // that needs more gets its own.
  TuneSettings& r = a.recommended;
  std::vector<const PeerAdvice*> measured;
  for (const PeerAdvice& p : a.peers)
    if (p.rpcs_needed > 0) measured.push_back(&p);
  std::sort(measured.begin(), measured.end(), [](const PeerAdvice* x, const PeerAdvice* y) {
    return x->rpcs_needed < y->rpcs_needed;
  });
  r.peer_rpcs_in_flight = cur.peer_rpcs_in_flight;  // those of peers not measured stay
  if (!measured.empty()) {
    const PeerAdvice& median = *measured[(measured.size() - 1) / 2];
    r.max_rpcs_in_flight = clamp64(median.rpcs_needed, b.min_rpcs_in_flight, b.max_rpcs_in_flight);
    a.why_rpcs = why_peer(median, r.max_rpcs_in_flight);
    if (measured.size() > 1)
      a.why_rpcs += fmt(" (the median of %zu measured peers; one that needs more gets its own)",
                        measured.size());
    for (const PeerAdvice* p : measured) {
      r.peer_rpcs_in_flight.erase(p->m.peer);
      int64_t own = clamp64(p->rpcs_needed, b.min_rpcs_in_flight, b.max_rpcs_in_flight);
      if (own > r.max_rpcs_in_flight) {
        r.peer_rpcs_in_flight[p->m.peer] = own;
        a.why_peer_rpcs[p->m.peer] = why_peer(*p, own);
      } else if (cur.peer_rpcs_in_flight.count(p->m.peer)) {
        a.why_peer_rpcs[p->m.peer] =
            fmt("none: needs %lld, which the node's %lld covers", (long long)p->rpcs_needed,
                (long long)r.max_rpcs_in_flight);
      }
    }
  } else if (window_limited) {
    int64_t want = 2 * cur.max_rpcs_in_flight;
    r.max_rpcs_in_flight = clamp64(want, b.min_rpcs_in_flight, b.max_rpcs_in_flight);
    a.why_rpcs = fmt(
        "%lld: RPCs wait for slots and the path carries what %lld per round trip allow; "
        "twice as many, as the link's rate is not known%s",
        (long long)r.max_rpcs_in_flight, (long long)cur.max_rpcs_in_flight,
        bound_note(want, r.max_rpcs_in_flight, "tune.min_rpcs_in_flight", "tune.max_rpcs_in_flight")
            .c_str());
  } else {
    r.max_rpcs_in_flight = cur.max_rpcs_in_flight;
    a.why_rpcs =
        fmt("%lld: kept; no peer has both a measured RTT and bandwidth (send traffic, run pfsnet "
            "tune --probe, or set tune.link_mbit)",
            (long long)r.max_rpcs_in_flight);
  }
  int64_t most_rpcs = r.max_rpcs_in_flight, most_now = cur.max_rpcs_in_flight;
  for (const auto& [peer, n] : r.peer_rpcs_in_flight) most_rpcs = std::max(most_rpcs, n);
  for (const auto& [peer, n] : cur.peer_rpcs_in_flight) most_now = std::max(most_now, n);
  // peer_credits
  int64_t want_pc = std::max(most_rpcs, b.min_peer_credits);
  r.peer_credits = clamp64(want_pc, b.min_peer_credits, b.max_peer_credits);
  a.why_peer_credits =
      fmt("%lld: at least max_rpcs_in_flight (%lld%s), as requests and replies each take one; "
          "above peer_credits throughput falls away from RPCs x size / RTT%s",
          (long long)r.peer_credits, (long long)most_rpcs,
          most_rpcs > r.max_rpcs_in_flight ? ", a peer's own" : "",
          r.peer_credits < want_pc ? " (capped by tune.max_peer_credits)" : "");
  // credits
  size_t n = std::max<size_t>(1, active_peers);
  int64_t want_credits = std::max<int64_t>(64, r.peer_credits * int64_t(n));
  r.credits = clamp64(want_credits, r.peer_credits, b.max_credits);
  a.why_credits =
      fmt("%lld: peer_credits %lld x %zu peer(s) this node talks to, and at least LNet's 64%s",
          (long long)r.credits, (long long)r.peer_credits, n,
          r.credits < want_credits ? " (capped by tune.max_credits)" : "");

  // conns_per_peer
  const PeerAdvice* lossy = nullptr;
  for (const PeerAdvice& p : a.peers)
    if (p.lossy && (!lossy || p.m.retrans_ratio > lossy->m.retrans_ratio)) lossy = &p;
  if (lossy) {
    r.conns_per_peer = std::max(cur.conns_per_peer, kLossyConnsPerPeer);
    a.why_conns =
        fmt("%lld: the path to %s retransmits %.4f%% of its TCP segments; over %lld connections a "
            "lost segment holds back one stream's bulk, not all of it",
            (long long)r.conns_per_peer, lossy->m.peer.c_str(), 100 * lossy->m.retrans_ratio,
            (long long)r.conns_per_peer);
  } else {
    r.conns_per_peer = cur.conns_per_peer;
    a.why_conns =
        fmt("%lld: kept; no path is seen losing packets (one TCP stream fills a clean path whose "
            "window is large enough)",
            (long long)r.conns_per_peer);
  }

  if (cur.peer_credits < most_now)
    a.problems.push_back(
        {"peer_credits_below_rpcs", "",
         fmt("peer_credits %lld is below max_rpcs_in_flight %lld: RPCs beyond %lld per peer "
             "wait for credits",
             (long long)cur.peer_credits, (long long)most_now, (long long)cur.peer_credits)});
  if (cur.credits < cur.peer_credits * int64_t(n) && active_peers > 0)
    a.problems.push_back(
        {"credits_below_peers", "",
         fmt("credits %lld is below peer_credits %lld x %zu peers = %lld: the peers share too "
             "few NI credits",
             (long long)cur.credits, (long long)cur.peer_credits, n,
             (long long)(cur.peer_credits * int64_t(n)))});
  return a;
}

// ---- TuneWatch ----

std::vector<TuneWatch::Event> TuneWatch::update(const Advice& a) {
  auto same = [](const TuneProblem& x, const TuneProblem& y) {
    return x.code == y.code && x.peer == y.peer;
  };
  auto changed = [](double then, double now) {
    return then > 0 && now > 0 && (now >= 1.5 * then || now * 1.5 <= then);
  };
  std::vector<Event> ev;
  for (const TuneProblem& p : a.problems) {
    if (std::any_of(active_.begin(), active_.end(), [&](const auto& o) { return same(o, p); }))
      continue;
    std::string what;
    if (have_fit_) {
      for (const PeerAdvice& pa : a.peers) {
        if (!p.peer.empty() && pa.m.peer != p.peer) continue;
        auto it = fit_.find(pa.m.peer);
        if (it == fit_.end()) continue;
        if (changed(it->second.first, pa.m.rtt_ms))
          what += fmt("; RTT to %s went from %.2f to %.2f ms", pa.m.peer.c_str(), it->second.first,
                      pa.m.rtt_ms);
        if (changed(it->second.second, pa.m.bandwidth))
          what += fmt("; bandwidth to %s went from %s to %s", pa.m.peer.c_str(),
                      rate_text(it->second.second).c_str(), rate_text(pa.m.bandwidth).c_str());
      }
      if (fit_peers_ != a.active_peers)
        what += fmt("; peers went from %zu to %zu", fit_peers_, a.active_peers);
      if (!what.empty()) what += " since the settings last fit";
    }
    ++warnings_;
    ev.push_back({true, p, "tune: the settings no longer fit: " + p.text + what});
  }
  for (const TuneProblem& o : active_)
    if (std::none_of(a.problems.begin(), a.problems.end(),
                     [&](const auto& p) { return same(o, p); }))
      ev.push_back({false, o,
                    "tune: " + o.code + (o.peer.empty() ? "" : " for " + o.peer) +
                        " no longer applies; the settings fit"});
  active_ = a.problems;
  if (a.problems.empty()) {
    have_fit_ = true;
    fit_.clear();
    for (const PeerAdvice& pa : a.peers) fit_[pa.m.peer] = {pa.m.rtt_ms, pa.m.bandwidth};
    fit_peers_ = a.active_peers;
  }
  return ev;
}

// ---- loss ----

void LossCounter::add(uint64_t retrans, uint64_t segs, bool queued) {
  bool count = seen_ && retrans >= last_retrans_ && segs >= last_segs_;
  if (count && !queued && !queued_last_) {
    retrans_ += retrans - last_retrans_;
    segs_ += segs - last_segs_;
  }
  seen_ = true;
  queued_last_ = queued;
  last_retrans_ = retrans;
  last_segs_ = segs;
}

// ---- AutoTuner ----

double AutoTuner::base_round_trip_ms() const {
  if (recent_rtt_.empty()) return 0;
  return *std::min_element(recent_rtt_.begin(), recent_rtt_.end());
}

TuneSettings AutoTuner::clamp(TuneSettings s, size_t peers) const {
  s.max_rpcs_in_flight =
      clamp64(s.max_rpcs_in_flight, bounds_.min_rpcs_in_flight, bounds_.max_rpcs_in_flight);
  s.peer_credits = clamp64(std::max(s.peer_credits, s.max_rpcs_in_flight), bounds_.min_peer_credits,
                           bounds_.max_peer_credits);
  int64_t want = s.peer_credits * int64_t(std::max<size_t>(1, peers));
  if (s.credits < want) s.credits = std::min(want, bounds_.max_credits);
  return s;
}

std::optional<TuneChange> AutoTuner::step(const TuneInterval& iv, const TuneSettings& cur) {
  constexpr size_t kBaseWindow = 120;  // intervals the base round trip is the minimum of
  bool client = iv.rpcs >= 4;
  if (!(iv.seconds > 0) || (!client && iv.credit_waits == 0)) return std::nullopt;  // idle
  if (skip_ > 0) {
    --skip_;
    return std::nullopt;
  }
  TuneSettings next = cur;
  std::string why;
  if (hold_ > 0) --hold_;
  // An overflow long ago says little about the path now: double again.
  if (ceiling_ && ++since_overflow_ > 60) ceiling_ = 0;
  if (client) {
    double tput = double(iv.bytes) / iv.seconds;
    double rps = double(iv.rpcs) / iv.seconds;
    double lat = iv.round_trip_ms;
    recent_rtt_.push_back(lat);
    if (recent_rtt_.size() > kBaseWindow) recent_rtt_.pop_front();
    double base = base_round_trip_ms();
    double queued = rps * (lat - base) / 1000.0;  // Little's law
    int64_t w = cur.max_rpcs_in_flight;
    bool grew_last = grown_from_ > 0;
    grown_from_ = 0;
    // Two intervals in a row, so one slow second (a busy CPU) is not taken for a queue.
    bool overflow = queued > std::max(2.0, double(w) / 4) && w > bounds_.min_rpcs_in_flight;
    overflows_ = overflow ? overflows_ + 1 : 0;
    if (overflow && overflows_ < 2) {
      grown_from_ = grew_last ? w : 0;  // still judged against the rate before the growth
    } else if (overflow) {
      overflows_ = 0;
      // What the pipe holds at the better of this rate and the one before the growth
      // (an overfull pipe may carry less than a full one).
      double best_rps = std::max(rps, grew_last ? last_rps_ : 0.0);
      int64_t pipe = static_cast<int64_t>(std::ceil(best_rps * base / 1000.0));
      next.max_rpcs_in_flight = std::min(w - 1, pipe + 2);
      if (iv.credit_waits == 0) next.peer_credits = next.max_rpcs_in_flight;
      why = fmt(
          "max_rpcs_in_flight %lld -> %lld: round trip %.1f ms is %.1f ms above its base %.1f "
          "ms while throughput is %s%s: about %.0f RPCs wait in the network, and %.0f RPCs/s "
          "x the base round trip fill the pipe",
          (long long)w, (long long)std::max(next.max_rpcs_in_flight, bounds_.min_rpcs_in_flight),
          lat, lat - base, base, rate_text(tput).c_str(),
          grew_last ? fmt(" (%s before the last growth)", rate_text(last_tput_).c_str()).c_str()
                    : "",
          queued, best_rps);
      hold_ = 5;
      ceiling_ = w;
      since_overflow_ = 0;
    } else if (iv.slot_waits > 0 && w < bounds_.max_rpcs_in_flight && hold_ == 0 &&
               queued < std::max(1.0, double(w) / 16)) {  // grow only while nothing queues
      if (grew_last && tput < last_tput_ * 1.05) {
        why =
            fmt("max_rpcs_in_flight stays %lld: throughput %s did not grow from %s with more RPCs "
                "in flight; something else limits it (holding 5 intervals)",
                (long long)w, rate_text(tput).c_str(), rate_text(last_tput_).c_str());
        hold_ = 5;
      } else {
        // Doubling until the pipe has overflowed once; then a quarter at a time.
        int64_t grown = ceiling_ ? w + std::max<int64_t>(1, w / 4) : 2 * w;
        next.max_rpcs_in_flight = std::min(grown, bounds_.max_rpcs_in_flight);
        last_tput_ = tput;
        last_rps_ = rps;
        grown_from_ = w;
        why =
            fmt("max_rpcs_in_flight %lld -> %lld: %llu RPCs waited for a slot in %.1f s while "
                "throughput is %s and the round trip %.1f ms is at its base %.1f ms",
                (long long)w, (long long)next.max_rpcs_in_flight, (unsigned long long)iv.slot_waits,
                iv.seconds, rate_text(tput).c_str(), lat, base);
      }
    }
  }
  if (iv.credit_waits > 0 && next.peer_credits <= cur.peer_credits &&
      cur.peer_credits < bounds_.max_peer_credits &&
      next.max_rpcs_in_flight >= cur.max_rpcs_in_flight) {
    next.peer_credits = std::min(2 * cur.peer_credits, bounds_.max_peer_credits);
    why += fmt("%speer_credits %lld -> %lld: %llu sends waited for credits in %.1f s",
               why.empty() ? "" : "; ", (long long)cur.peer_credits,
               (long long)std::max(next.peer_credits, next.max_rpcs_in_flight),
               (unsigned long long)iv.credit_waits, iv.seconds);
  }
  next = clamp(next, iv.peers);
  if (next == cur) {
    if (why.empty()) return std::nullopt;
    return TuneChange{cur, why};
  }
  // A new window is judged on an interval that ran entirely with it, after the peer had
  // an interval to raise its credits to match; raising credits alone needs no pause.
  skip_ = next.max_rpcs_in_flight != cur.max_rpcs_in_flight ? 2 : 0;
  return TuneChange{next, why};
}

std::optional<TuneChange> lossy_floor(const Advice& last, const std::string& peer, int64_t limit,
                                      int64_t most) {
  for (const PeerAdvice& p : last.peers) {
    if (p.m.peer != peer || !p.lossy || p.rpcs_needed <= 0) continue;
    int64_t floor = std::min(p.rpcs_needed, most);
    if (floor <= limit) return std::nullopt;
    TuneChange c;
    c.to = last.current;
    c.to.max_rpcs_in_flight = floor;
    c.why =
        fmt("max_rpcs_in_flight %lld -> %lld: the path loses packets (TCP retransmits %.4f%% "
            "of its segments) and needs %.0f x its BDP of %s in flight",
            (long long)limit, (long long)floor, 100 * p.m.retrans_ratio, p.headroom,
            bytes_text(p.bdp_bytes).c_str());
    return c;
  }
  return std::nullopt;
}

}  // namespace pfsnet
