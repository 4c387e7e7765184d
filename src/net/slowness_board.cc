#include "net/slowness_board.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace pfsnet {

namespace {

bool network_cause(SlowCause c) { return c == SlowCause::kSlow || c == SlowCause::kLossy; }

}  // namespace

std::vector<SlownessChange> SlownessBoard::second(const std::vector<PathFigures>& paths,
                                                  TimePoint now) {
  // Per peer NI: this second's sums over its paths.
  struct Sum {
    uint64_t rpcs = 0, bytes = 0;
    double latency_ms = 0, exec_ms = 0;
    bool queueing = false;      // a path of it has a queue standing
    double rtt_excess_ms = -1;  // the largest queue in a path's smoothed RTT
  };
  std::map<Nid, Sum> sums;
  // The host's own delay this second: the median smoothed-RTT excess of its TCP paths (once
  // a second, not per path). A path's queue must stand out from it (queue_stands); with
  // fewer than 3 paths there is no telling the host's delay from one path's queue.
  std::vector<double> excess;
  for (const PathFigures& f : paths)
    if (f.tcp && f.min_rtt_ms > 0) excess.push_back(f.srtt_ms - f.min_rtt_ms);
  const double host_excess = excess.size() < 3 ? -1.0 : lower_median(excess);
  for (const PathFigures& f : paths) {
    const Nid& peer = f.peer;
    PathState& ps = paths_[{f.local, peer}];
    if (!ps.peer) {
      auto it = peers_.find(peer);
      if (it == peers_.end())
        it = peers_.emplace(peer, std::make_unique<PeerState>(opts_.tracker)).first;
      ps.peer = it->second.get();
    }
    PeerState& pe = *ps.peer;
    Sum& s = sums[peer];
    uint64_t moved = f.bytes >= ps.bytes ? f.bytes - ps.bytes : f.bytes;
    ps.bytes = f.bytes;
    if (moved > 0) {
      ps.last_active = now;
      ps.active_ever = true;
    }
    s.bytes += moved;
    s.rpcs += f.rpcs;
    s.latency_ms += f.latency_ms;
    s.exec_ms += f.exec_ms;
    s.queueing = s.queueing || (f.tcp && queue_stands(f.srtt_ms, f.min_rtt_ms, host_excess));
    if (f.tcp && f.min_rtt_ms > 0) s.rtt_excess_ms = std::max(s.rtt_excess_ms, f.queue_ms);
    // Retransmits judged by their own connection's queue: the one that retransmitted may
    // not be the busiest (a shaper's queue showed on the connection a bulk probe crossed).
    // (Kept in place: no map built per path each second; a closed connection's entry goes.)
    uint64_t congested = 0;
    for (const ConnFigures& k : f.conns) {
      auto [was, fresh] = ps.conn_lost.try_emplace(k.id, k.lost);
      if (fresh) continue;  // new: its first reading is the start
      uint64_t d = k.lost >= was->second ? k.lost - was->second : k.lost;
      if (d > 0 && queue_stands(k.srtt_ms, k.min_rtt_ms, host_excess)) congested += d;
      was->second = k.lost;
    }
    if (ps.conn_lost.size() > f.conns.size())
      std::erase_if(ps.conn_lost, [&](const auto& e) {
        return std::none_of(f.conns.begin(), f.conns.end(),
                            [&](const ConnFigures& k) { return k.id == e.first; });
      });
    if (f.tcp) {
      // Totals never go down; the first reading is the start, not a delta.
      if (ps.have_tcp && f.segs_out >= ps.segs_out && f.retrans >= ps.retrans) {
        uint64_t segs = f.segs_out - ps.segs_out, retrans = f.retrans - ps.retrans;
        // A second that sent mostly retransmissions is an outage (a link down, a peer
        // stopped: nothing got through), named as such elsewhere -- not random loss, and
        // not to be worked off segment by segment once the path is back.
        if (2 * retrans <= segs) {
          congested = std::min(congested, retrans);
          pe.segs_out += segs;
          pe.retrans += retrans - congested;
          pe.congestion += congested;
        }
      }
      ps.have_tcp = true;
      ps.segs_out = f.segs_out;
      ps.retrans = f.retrans;
    }
  }

  update_medians(now);
  std::vector<SlownessChange> out;
  for (auto& [peer, sum] : sums) {
    PeerState& pe = *peers_.at(peer);
    SlownessSample smp;
    if (sum.rpcs > 0) {
      smp.count = sum.rpcs;
      smp.latency_ms = sum.latency_ms / static_cast<double>(sum.rpcs);
      smp.exec_ms = sum.exec_ms / static_cast<double>(sum.rpcs);
      // A busy second's latency is the bulk's as much as the path's: it may only speak for
      // health (SlownessTracker).
      smp.busy = sum.bytes >= opts_.quiet_bytes;
    }
    smp.segs_out = pe.segs_out;
    smp.retrans = pe.retrans;
    smp.congestion_retrans = pe.congestion;
    smp.queueing = sum.queueing;
    smp.rtt_excess_ms = sum.rtt_excess_ms;
    auto m = medians_.find(peer.net());
    SlowCause was = pe.tracker.cause();
    bool was_degraded = pe.tracker.degraded();
    auto ch = pe.tracker.add(smp, now, m == medians_.end() ? 0 : m->second);
    if (!ch) continue;
    if (pe.tracker.degraded() && !was_degraded)
      ++degraded_;
    else if (!pe.tracker.degraded() && was_degraded)
      --degraded_;
    SlownessChange c;
    c.nid = peer;
    c.cause = ch->degraded ? ch->cause : SlowCause::kNone;
    c.was = was;
    c.evidence = ch->evidence.text();
    c.lasted = ch->lasted;
    out.push_back(std::move(c));
  }
  if (degraded_ > 0 || !locals_.empty())
    for (SlownessChange& c : local_changes(now)) out.push_back(std::move(c));
  return out;
}

void SlownessBoard::update_medians(TimePoint now) {
  if (now < medians_due_) return;
  medians_due_ = now + std::chrono::seconds(opts_.tracker.window);
  std::map<uint32_t, std::vector<double>> by_net;
  for (const auto& [peer, pe] : peers_)
    if (double w = pe->tracker.window_latency_ms(); w > 0) by_net[peer.net()].push_back(w);
  medians_.clear();
  // With one peer NI alone on its network there is nothing to compare it with.
  for (auto& [net, v] : by_net)
    if (v.size() >= 2) medians_[net] = lower_median(v);
}

std::vector<SlownessChange> SlownessBoard::local_changes(TimePoint now) {
  // Per local NI: the peer NIs it reached in the last window, and those degraded for a
  // network cause.
  Duration window = std::chrono::seconds(opts_.tracker.window);
  struct Count {
    std::set<Nid> reached, degraded;
    std::map<SlowCause, int> causes;
  };
  std::map<Nid, Count> counts;
  for (const auto& [key, ps] : paths_) {
    auto [local, peer] = key;
    Count& c = counts[local];
    const SlownessTracker& t = ps.peer->tracker;
    bool bad = t.degraded() && network_cause(t.cause());
    if (!bad && !(ps.active_ever && now - ps.last_active <= window)) continue;
    c.reached.insert(peer);
    if (bad && c.degraded.insert(peer).second) ++c.causes[t.cause()];
  }
  std::vector<SlownessChange> out;
  for (auto& [local, c] : counts) {
    SlowCause now_cause = SlowCause::kNone;
    if (c.degraded.size() >= 2 && 2 * c.degraded.size() > c.reached.size())
      now_cause = std::max_element(c.causes.begin(), c.causes.end(), [](auto& a, auto& b) {
                    return a.second < b.second;
                  })->first;
    SlowCause was = locals_.count(local) ? locals_[local] : SlowCause::kNone;
    if (now_cause == was) continue;
    if (now_cause == SlowCause::kNone)
      locals_.erase(local);
    else
      locals_[local] = now_cause;
    SlownessChange ch;
    ch.nid = local;
    ch.local = true;
    ch.cause = now_cause;
    ch.was = was;
    std::string names;
    for (const Nid& p : c.degraded) names += (names.empty() ? "" : ", ") + p.to_string();
    ch.evidence =
        fmt::format("{} of the {} peer NIs reached through it are degraded{}{}", c.degraded.size(),
                    c.reached.size(), names.empty() ? "" : ": ", names);
    out.push_back(std::move(ch));
  }
  return out;
}

bool SlownessBoard::wants(const Nid& local, const Nid& peer, uint64_t bytes) const {
  auto it = paths_.find({local, peer});
  if (it == paths_.end() || it->second.bytes != bytes) return true;
  return it->second.peer->tracker.degraded();
}

std::vector<Nid> SlownessBoard::degraded_peers() const {
  std::vector<Nid> v;
  if (degraded_ == 0) return v;
  for (const auto& [peer, pe] : peers_)
    if (pe->tracker.degraded()) v.push_back(peer);
  std::sort(v.begin(), v.end());
  return v;
}

const SlownessTracker* SlownessBoard::tracker(const Nid& peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? nullptr : &it->second->tracker;
}

SlowCause SlownessBoard::local_cause(const Nid& local) const {
  auto it = locals_.find(local);
  return it == locals_.end() ? SlowCause::kNone : it->second;
}

}  // namespace pfsnet
