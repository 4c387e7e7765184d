#include "tune/tune_service.h"

#include <algorithm>

#include "base/log.h"
#include "base/mutex.h"
#include "net/slowness.h"
#include "tune/text.h"

namespace pfsnet {

namespace {

constexpr size_t kPeakMinutes = 10;  // traffic peaks kept per peer
// Trains a probe sends at most: on a long path TCP's windows grow during the first ones.
constexpr int kMaxProbeTrains = 10;

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

uint64_t total_credit_waits(const std::vector<NiInfo>& nis) {
  uint64_t n = 0;
  for (const NiInfo& i : nis) n += i.credit_waits;
  return n;
}

}  // namespace

TuneService::TuneService(Net& net, RpcEngine& rpc, RpcStats& stats, LiveConfig& cfg, Clock& clock)
    : net_(net),
      rpc_(rpc),
      stats_(stats),
      cfg_(cfg),
      clock_(clock),
      autotune_(cfg.read([](const Config& c) { return c.tune; })) {}

TuneSettings TuneService::settings() const {
  return cfg_.read([](const Config& c) {
    return TuneSettings{c.rpc.max_rpcs_in_flight, c.lnet.peer_credits, c.lnet.credits,
                        c.lnet.conns_per_peer, c.rpc.peer_rpcs_in_flight};
  });
}

Result<ConfigApplied> TuneService::apply(const TuneSettings& s) {
  return cfg_.update([&](Config& next) {
    next.rpc.max_rpcs_in_flight = s.max_rpcs_in_flight;
    next.rpc.peer_rpcs_in_flight = s.peer_rpcs_in_flight;
    next.lnet.peer_credits = s.peer_credits;
    next.lnet.credits = s.credits;
    next.lnet.conns_per_peer = s.conns_per_peer;
  });
}

double TuneService::round_period() const {
  return cfg_.read([](const Config& c) { return std::min(1.0, c.tune.interval); });
}

Status TuneService::start(TimerQueue& queue) {
  reset(clock_.now());
  ticker_.start(
      queue, clock_,
      [this] {
        return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(round_period()));
      },
      [this](TimePoint now) { round(now); });
  return Status::Ok();
}

void TuneService::reset(TimePoint now) {
  MutexLock lk(mu_);
  last_sample_ = last_step_ = last_check_ = now;
  peer_tune_.clear();
  last_credit_waits_ = total_credit_waits(net_.nis());
}

void TuneService::round(TimePoint now) {
  TuneConfig tc = cfg_.read([](const Config& c) { return c.tune; });
  MutexLock lk(mu_);
  autotune_.set_bounds(tc);
  if (now - last_sample_ >= std::chrono::milliseconds(990)) sample_traffic(now);
  // The check first: auto-tune reads its findings (a path TCP's window holds back). A path
  // newly found losing packets is checked at once, not at the next interval: auto-tune
  // spreads it and keeps its RPCs in flight up from then on.
  if (now - last_check_ >= std::chrono::seconds(tc.check_interval) || new_loss()) {
    check(tc, now);
  }
  if (now - last_step_ >= std::chrono::duration<double>(tc.interval * 0.99)) {
    if (tc.auto_tune) {
      autotune_step(now);
    } else {  // keep the baseline current, so turning auto-tune on starts afresh
      last_step_ = now;
      peer_tune_.clear();
      last_credit_waits_ = total_credit_waits(net_.nis());
    }
  }
}

size_t TuneService::active_peers() const {
  size_t n = 0;
  for (const PeerLoad& l : net_.peer_loads()) n += l.up ? 1 : 0;
  return n;
}

void TuneService::sample_traffic(TimePoint now) {
  double dt = seconds(now - last_sample_);
  last_sample_ = now;
  // Minutes on the monotonic clock: peaks are kept per minute of this node's uptime.
  int64_t minute = std::chrono::duration_cast<std::chrono::minutes>(now.time_since_epoch()).count();
  for (const PeerLoad& l : net_.peer_loads()) {
    auto [it, fresh] = traffic_.try_emplace(l.peer.to_string());
    PeerTraffic& t = it->second;
    if (!fresh && dt > 0 && l.bytes >= t.bytes) {
      t.rate = double(l.bytes - t.bytes) / dt;
      if (t.minute_peaks.empty() || t.minute_peaks.back().first != minute)
        t.minute_peaks.emplace_back(minute, 0.0);
      t.minute_peaks.back().second = std::max(t.minute_peaks.back().second, t.rate);
      while (t.minute_peaks.front().first + int64_t(kPeakMinutes) <= minute)
        t.minute_peaks.pop_front();
    }
    t.bytes = l.bytes;
    t.sends = l.sends;
  }
  for (const Nid& n : rpc_.waiting_targets())
    if (auto peer = net_.peer_of(n)) {
      auto it = traffic_.find(peer->to_string());
      if (it != traffic_.end()) it->second.queued_at = now;
    }
  sample_loss();
}

bool TuneService::new_loss() {
  for (const auto& entry : loss_) {
    // Not a structured binding: clang 14 cannot capture one in the lambda below.
    const std::string& peer = entry.first;
    const LossCounter& l = entry.second;
    if (l.segs() < kLossCheckSegments || l.ratio() < kLossyRetransRatio) continue;
    if (!loss_checked_.insert(peer).second) continue;  // once a peer
    bool known = last_advice_ &&
                 std::any_of(last_advice_->peers.begin(), last_advice_->peers.end(),
                             [&](const PeerAdvice& p) { return p.m.peer == peer && p.lossy; });
    if (!known) return true;
  }
  return false;
}

void TuneService::sample_loss() {
  struct Totals {
    uint64_t retrans = 0, segs = 0;
    bool queue = false;
  };
  std::map<std::string, Totals> tcp;
  for (const ConnTcpSample& c : tcp_samples()) {
    Totals& t = tcp[c.peer];
    t.retrans += c.k.total_retrans;
    t.segs += c.k.segs_out;
    t.queue = t.queue || queue_on_path(c.k);
  }
  for (const auto& [peer, t] : tcp) loss_[peer].add(t.retrans, t.segs, t.queue);
}

void TuneService::autotune_step(TimePoint now) {
  TuneConfig tc = cfg_.read([](const Config& c) { return c.tune; });
  uint64_t cw = total_credit_waits(net_.nis());
  double secs = seconds(now - last_step_);
  size_t peers = 0;
  for (const auto& [key, t] : traffic_) peers += t.rate > 0 ? 1 : 0;
  peers = std::max<size_t>(1, peers);
  last_step_ = now;
  TuneSettings cur = settings();
  TuneSettings next = cur;
  std::vector<std::string> why;
  // Each target's own RPCs decide its own max_rpcs_in_flight.
  for (const RpcEngine::TargetInfo& t : rpc_.targets()) {
    std::string key = t.dst.to_string();
    auto [it, fresh] = peer_tune_.try_emplace(key, PeerTune{AutoTuner(tc), t.counters});
    PeerTune& pt = it->second;
    if (fresh) continue;  // its counters so far are the baseline
    pt.tuner.set_bounds(tc);
    TuneInterval iv;
    iv.seconds = secs;
    iv.rpcs = t.counters.completed - pt.last.completed;
    iv.round_trip_ms =
        iv.rpcs ? double(t.counters.round_trip_ns - pt.last.round_trip_ns) / 1e6 / double(iv.rpcs)
                : 0;
    iv.bytes = t.counters.bytes - pt.last.bytes;
    iv.slot_waits = t.counters.slot_waits - pt.last.slot_waits;
    iv.peers = peers;
    pt.last = t.counters;
    TuneSettings mine = cur;
    mine.max_rpcs_in_flight = t.limit;
    auto ch = pt.tuner.step(iv, mine);
    std::string peer = net_.peer_of(t.dst).value_or(t.dst).to_string();
    // A lossy path: at least what the last check's advice says it needs.
    if (last_advice_)
      if (auto floor = lossy_floor(*last_advice_, peer, t.limit, tc.max_rpcs_in_flight);
          floor && (!ch || ch->to.max_rpcs_in_flight < floor->to.max_rpcs_in_flight))
        ch = std::move(floor);
    if (!ch) continue;
    // A path TCP's window holds back carries no more for more RPCs: they would wait in
    // the socket, not on the wire (the last check's finding).
    auto held = std::find_if(window_findings_.begin(), window_findings_.end(),
                             [&](const WindowFinding& f) { return f.peer == peer; });
    if (ch->to.max_rpcs_in_flight > t.limit && held != window_findings_.end()) {
      PFS_LOG_INFO(
          "auto-tune: {}: max_rpcs_in_flight stays {}: the last check found the path held "
          "back by {} (at most {} at {:.1f} ms), so more RPCs would wait in the socket; see "
          "pfsnet tune for the cure",
          key, t.limit,
          held->limit == WindowLimit::kPeerReceiveWindow ? "the peer's receive window"
                                                         : "the send buffer",
          tune_text::rate_text(held->ceiling), held->rtt_ms);
      continue;
    }
    if (ch->to.max_rpcs_in_flight != t.limit) {
      next.peer_rpcs_in_flight[key] = ch->to.max_rpcs_in_flight;
      why.push_back(key + ": " + ch->why);
    } else {
      PFS_LOG_INFO("auto-tune: {}: {}", key, ch->why);
    }
  }
  // A path that loses packets (the last check found TCP retransmitting kLossyRetransRatio
  // of its segments or more) spreads its bulk over more connections, as the advice says:
  // a lost segment then holds back one stream of several. Auto-tune never takes it back (a
  // lossy path that went quiet may lose again).
  if (last_advice_ && last_advice_->recommended.conns_per_peer > cur.conns_per_peer) {
    next.conns_per_peer = last_advice_->recommended.conns_per_peer;
    why.push_back(last_advice_->why_conns);
  }
  // The node's credits: raised while sends wait for them (a server's replies), and never
  // below the most RPCs in flight any peer may have.
  int64_t most = next.max_rpcs_in_flight;
  for (const auto& [peer, n] : next.peer_rpcs_in_flight) most = std::max(most, n);
  TuneInterval node;
  node.seconds = secs;
  node.credit_waits = cw - last_credit_waits_;
  node.peers = peers;
  last_credit_waits_ = cw;
  TuneSettings credit_cur = cur;
  credit_cur.max_rpcs_in_flight = most;
  if (auto ch = autotune_.step(node, credit_cur); ch && ch->to.peer_credits > cur.peer_credits) {
    next.peer_credits = ch->to.peer_credits;
    why.push_back(ch->why);
  }
  next.peer_credits = std::clamp(std::max(next.peer_credits, most), tc.min_peer_credits,
                                 std::max(tc.min_peer_credits, tc.max_peer_credits));
  int64_t want = next.peer_credits * int64_t(peers);
  if (next.credits < want) next.credits = std::min(want, tc.max_credits);
  if (next == cur) return;
  auto r = apply(next);
  std::string all;
  for (const std::string& w : why) all += (all.empty() ? "" : "; ") + w;
  if (!r.ok()) {
    PFS_LOG_ERROR("auto-tune: could not apply the change ({}): {}", all, r.status().message());
    return;
  }
  ++autotune_changes_;
  std::string own;
  for (const auto& [peer, n] : next.peer_rpcs_in_flight)
    own += (own.empty() ? "" : ", ") + peer + " " + std::to_string(n);
  PFS_LOG_INFO(
      "auto-tune: {} (now max_rpcs_in_flight {}{}{}, peer_credits {}, credits {}, conns_per_peer "
      "{})",
      all, next.max_rpcs_in_flight, own.empty() ? "" : "; own: ", own, next.peer_credits,
      next.credits, next.conns_per_peer);
}

std::vector<PeerMeasure> TuneService::measure_peers(const std::vector<Nid>& only, TimePoint now) {
  auto [tc, block] = cfg_.read(
      [](const Config& c) { return std::make_pair(c.tune, double(c.stats.maxBlockSize)); });
  std::map<std::string, std::vector<Nid>> nodes;
  for (const NiInfo& i : net_.peers()) nodes[i.peer.to_string()].push_back(i.nid);
  std::vector<PeerMeasure> out;
  for (const auto& [key, nids] : nodes) {
    if (!only.empty() && std::none_of(nids.begin(), nids.end(), [&](const Nid& n) {
          return std::find(only.begin(), only.end(), n) != only.end();
        }))
      continue;
    PeerMeasure m;
    m.peer = key;
    m.rpc_bytes = block;
    for (const Nid& n : nids) {
      StatsQuery q;
      q.what = StatsQuery::What::kNode;
      q.node = n;
      q.granularity = Granularity::kSecond;
      q.last = 60;
      for (const NodeReport& r : stats_.query(q).nodes)
        for (const auto& [k, v] : r.stats) {
          if (k != NodeStat::kLatencyTcp) continue;
          for (const IntervalView& iv : v.seconds)
            if (iv.count > 0 && iv.min_ms > 0 && (m.rtt_ms == 0 || iv.min_ms < m.rtt_ms))
              m.rtt_ms = iv.min_ms;
        }
    }
    if (m.rtt_ms > 0) m.rtt_source = "statistics (fastest RPC latency, last 60 s)";
    auto t = traffic_.find(key);
    double peak = 0;
    if (t != traffic_.end()) {
      m.throughput = t->second.rate;
      for (const auto& [minute, p] : t->second.minute_peaks) peak = std::max(peak, p);
      // With auto-tune on, RPCs waiting for slots are its input, not a warning.
      m.window_limited = !tc.auto_tune && t->second.queued_at != TimePoint{} &&
                         now - t->second.queued_at <= std::chrono::seconds(tc.check_interval);
    }
    auto pr = probes_.find(key);
    if (pr != probes_.end()) {
      if (m.rtt_ms == 0 || pr->second.rtt_ms < m.rtt_ms) {
        m.rtt_ms = pr->second.rtt_ms;
        m.rtt_source = "probe (fastest of 3 empty PINGs)";
      }
      const ProbeResult& p = pr->second;
      m.bandwidth = p.bandwidth;
      m.bandwidth_source =
          "probe (" + std::to_string(p.clean) + " of " + std::to_string(p.trains) + " trains of " +
          std::to_string(p.train) + " x " + std::to_string(p.size) + " B went through clean" +
          (p.paced > 0 ? "; " + std::to_string(p.paced) + " as fast as the sender paced them"
                       : "") +
          (p.lost > 0 ? "; " + std::to_string(p.lost) + " lost a packet" : "") +
          (p.bounds > 0 ? "; the link carries at least the best of " + std::to_string(p.bounds) +
                              " paced or lost under their pacing"
                        : "") +
          ")";
      if (p.every_train_lost)
        m.bandwidth_source = "probe (every one of " + std::to_string(p.trains) + " trains of " +
                             std::to_string(p.train) + " x " + std::to_string(p.size) +
                             " B lost a packet: a rough figure)";
      m.probe_segments = p.segments;
      m.probe_retransmits = p.retransmits;
      // Its trains fit the pipe: what they lost is the path's loss.
      if (p.segments > 0) m.retrans_ratio = double(p.retransmits) / double(p.segments);
      // A train smaller than the BDP found never filled the pipe.
      m.probe_short = p.train_short_of_bdp();
      if (m.probe_short) m.bandwidth_source += ", smaller than the BDP: may be low";
      if (p.window_limited) {
        m.bandwidth_source = "probe (every one of " + std::to_string(p.trains) + " trains of " +
                             std::to_string(p.train) + " x " + std::to_string(p.size) +
                             " B waited a round trip for the TCP window: what it let through, a "
                             "lower bound)";
        m.bandwidth_lower_bound = true;
      }
    } else if (tc.link_mbit > 0) {
      m.bandwidth = tc.link_mbit * 1e6 / 8;
      m.bandwidth_source = "tune.link_mbit";
    } else if (peak > 0) {
      m.bandwidth = peak;
      m.bandwidth_source = "traffic (peak second of the last 10 min: a lower bound)";
      m.bandwidth_lower_bound = true;
    }
    if (auto r = tcp_retrans_.find(m.peer); r != tcp_retrans_.end())
      m.retrans_ratio = std::max(m.retrans_ratio, r->second);
    out.push_back(std::move(m));
  }
  return out;
}

void TuneService::check(const TuneConfig& tc, TimePoint now) {
  double seconds = std::chrono::duration<double>(now - last_check_).count();
  last_check_ = now;
  // Each path's TCP connection as the kernel sees it, and the host's settings.
  std::vector<ConnTcpSample> samples = tcp_samples();
  window_findings_ = window_watch_.update(samples, seconds);
  note_tcp(samples);
  Advice a = advise(measure_peers({}, now), settings(), tc, active_peers());
  add_window_problems(a);
  for (const TuneWatch::Event& e : watch_.update(a)) {
    if (e.warning)
      PFS_LOG_WARN("{}", e.text);
    else
      PFS_LOG_INFO("{}", e.text);
  }
  last_advice_ = std::move(a);
}

std::vector<ConnTcpSample> TuneService::tcp_samples() const {
  if (tcp_reader_) return tcp_reader_();
  std::vector<ConnTcpSample> samples;
  for (const NiInfo& p : net_.peers(true))
    for (const PathInfo& path : p.paths)
      if (path.tcp)
        samples.push_back(
            {path.local.to_string() + " -> " + p.nid.to_string(), p.peer.to_string(), *path.tcp});
  return samples;
}

void TuneService::note_tcp(const std::vector<ConnTcpSample>& samples) {
  tcp_rtt_ms_.clear();
  tcp_retrans_.clear();
  tcp_mss_.clear();
  for (const ConnTcpSample& s : samples) {
    double& mss = tcp_mss_[s.peer];
    mss = std::max(mss, double(s.k.snd_mss));
    double ms = s.k.min_rtt_us / 1000.0;
    auto [it, fresh] = tcp_rtt_ms_.emplace(s.peer, ms);
    if (!fresh && ms > 0 && (it->second == 0 || ms < it->second)) it->second = ms;
  }
  for (const auto& [peer, l] : loss_)
    if (l.segs() > 0) tcp_retrans_[peer] = l.ratio();
  host_ = read_host_tcp();
}

void TuneService::add_window_problems(Advice& a) {
  auto [tx, rx] = cfg_.read(
      [](const Config& c) { return std::make_pair(c.lnet.tx_buffer_size, c.lnet.rx_buffer_size); });
  // The largest window a TCP connection needs: bandwidth x the kernel's own RTT.
  double worst_bdp = 0;
  std::string worst_peer;
  for (const PeerAdvice& p : a.peers) {
    auto rtt = tcp_rtt_ms_.find(p.m.peer);
    if (rtt == tcp_rtt_ms_.end() || !(p.m.bandwidth > 0)) continue;
    double bdp = p.m.bandwidth * rtt->second / 1000.0;
    if (bdp > worst_bdp) {
      worst_bdp = bdp;
      worst_peer = p.m.peer;
    }
  }
  for (const WindowFinding& f : window_findings_) {
    double bdp = 0;
    for (const PeerAdvice& p : a.peers)
      if (p.m.peer == f.peer) bdp = p.bdp_bytes;
    a.problems.push_back(window_problem(f, bdp, host_, tx));
  }
  for (TuneProblem& p : host_window_problems(host_, tx, rx, worst_bdp, worst_peer))
    a.problems.push_back(std::move(p));
  if (!worst_peer.empty())
    for (TuneProblem& p : host_cc_problems(host_, worst_bdp, tcp_rtt_ms_[worst_peer],
                                           tcp_mss_[worst_peer], worst_peer))
      a.problems.push_back(std::move(p));
}

Result<TuneReport> TuneService::tune(const TuneRequest& req) {
  auto [tc, block, max_bulk] = cfg_.read([](const Config& c) {
    return std::make_tuple(c.tune, int64_t(c.stats.maxBlockSize), c.max_bulk());
  });
  int64_t size = req.size.value_or(block);
  if (size < 4096 || size > max_bulk)
    return Status(Code::kInvalidArgument,
                  "size must be 4096.." + std::to_string(max_bulk) + " bytes (2 x maxBlockSize)");
  TuneReport rep;
  rep.current = settings();
  rep.auto_tune = tc.auto_tune;
  std::vector<Nid> probed;  // the targets whose probe succeeded
  int train = 0;            // RPCs per train of their probe
  if (req.probe) {
    std::vector<Nid> targets = req.peers;
    if (targets.empty())
      for (const PeerLoad& l : net_.peer_loads())
        if (l.up) targets.push_back(l.peer);
    if (targets.empty())
      return Status(Code::kInvalidArgument, "no connected peer to probe: name one with --peer NID");
    // The train fits in the window, so it measures the path and not the credits.
    train = static_cast<int>(std::clamp<int64_t>(
        std::min(rep.current.max_rpcs_in_flight, rep.current.peer_credits), 2, 8));
    for (const Nid& t : targets) {
      // The kernel's figures of the paths to the peer (every connection of each): a train
      // during which TCP retransmitted measures the loss, and one as fast as the pacing
      // measures the pacing, not the link.
      Nid peer = net_.peer_of(t).value_or(t);
      auto tcp = [this, peer] {
        ProbeTcp pt;
        for (const NiInfo& p : net_.peers(true))
          if (p.peer == peer)
            for (const PathInfo& path : p.paths)
              if (path.tcp_total) {
                pt.retransmits += path.tcp_total->retrans;
                pt.segments += path.tcp_total->segs_out;
                pt.pacing_rate += double(path.tcp_total->pacing_rate);
              }
        return pt;
      };
      auto r = probe_peer(rpc_, clock_, t, static_cast<uint32_t>(size), train, kMaxProbeTrains,
                          std::chrono::seconds(10), tcp);
      if (!r.ok()) {
        rep.probe_errors[t.to_string()] = r.status().message();
        continue;
      }
      // A path that lost packets under the trains, where only lower bounds were read: BBR
      // paces at about one train per round trip once a loss or its start-up is past, so
      // the trains see no more than that. Trains of RPCs twice as large (2 x maxBlockSize)
      // carry twice as much per round trip and may show more; the higher estimate stands.
      // Only then: on a clean path, larger trains overfill the queues they cross.
      if (r->lost >= 3 && r->bounds > 0 && max_bulk >= 2 * size) {
        auto big = probe_peer(rpc_, clock_, t, static_cast<uint32_t>(max_bulk), train,
                              kMaxProbeTrains, std::chrono::seconds(10), tcp);
        if (big.ok() && big->bandwidth > r->bandwidth) r = std::move(big);
      }
      probed.push_back(t);
      std::string key = net_.peer_of(t).value_or(t).to_string();
      MutexLock lk(mu_);
      probes_[key] = *r;
    }
  }
  std::vector<ConnTcpSample> samples = tcp_samples();
  std::vector<PeerMeasure> ms;
  {
    MutexLock lk(mu_);
    note_tcp(samples);
    ms = measure_peers(req.peers, clock_.now());
  }
  for (PeerMeasure& m : ms) m.rpc_bytes = double(size);
  rep.advice = advise(ms, rep.current, tc, active_peers());
  {
    MutexLock lk(mu_);
    add_window_problems(rep.advice);
  }
  if (req.apply) {
    const TuneSettings& s = rep.advice.recommended;
    auto r = apply(s);
    if (!r.ok()) return r.status();
    rep.applied = r->changed;
    std::string own;
    for (const auto& [peer, n] : s.peer_rpcs_in_flight)
      own += (own.empty() ? "; own: " : ", ") + peer + " " + std::to_string(n);
    PFS_LOG_INFO(
        "tune: applied the recommended settings (max_rpcs_in_flight {}{}, peer_credits {}, "
        "credits {}, conns_per_peer {})",
        s.max_rpcs_in_flight, own, s.peer_credits, s.credits, s.conns_per_peer);
  }
  // With the settings now in force: the probed paths' bulk connections warm (they carried
  // nothing yet), in two waves of the probe's train per connection.
  if (int64_t conns = net_.conns_per_peer(); conns > 1)
    for (const Nid& t : probed) {
      int wave = static_cast<int>(train * std::min<int64_t>(conns, 16));
      Status w =
          warm_streams(rpc_, t, static_cast<uint32_t>(size), wave, 2, std::chrono::seconds(10));
      std::string key = net_.peer_of(t).value_or(t).to_string();
      if (!w.ok()) {
        rep.probe_errors[t.to_string()] = w.message();
        continue;
      }
      rep.warmed_bytes[key] = 2 * int64_t(wave) * size;
      PFS_LOG_INFO("tune: warmed the {} bulk connections to {}: 2 waves of {} RPCs of {} B", conns,
                   key, wave, size);
    }
  return rep;
}

TuneStatus TuneService::status() const {
  MutexLock lk(mu_);
  return {watch_.active(), watch_.warnings(), autotune_changes_, last_advice_};
}

}  // namespace pfsnet
