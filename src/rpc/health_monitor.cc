#include "rpc/health_monitor.h"

#include <algorithm>
#include <map>

#include "base/log.h"
#include "rpc/msg_types.h"
#include "rpc/ping.h"

namespace pfsnet {

namespace {
constexpr size_t kProbeBulk = 64 * 1024;
}  // namespace

HealthMonitorOptions HealthMonitorOptions::from(const Config& cfg) {
  HealthMonitorOptions o;
  o.enabled = cfg.health.slowness;
  o.board.tracker.factor = cfg.health.slow_factor;
  o.board.tracker.min_excess = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double, std::milli>(cfg.health.slow_min_excess_ms));
  o.board.tracker.loss_ratio = cfg.health.loss_ratio;
  o.board.quiet_bytes = static_cast<uint64_t>(cfg.health.quiet_bytes);
  o.penalty = static_cast<int>(cfg.health.degraded_penalty);
  o.probe_timeout = RpcOptions::from(cfg).attempt_timeout();
  o.cpu.wait_per_slice = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double, std::milli>(cfg.health.cpu_starved_ms));
  return o;
}

HealthMonitor::HealthMonitor(Net& net, RpcEngine& rpc, RpcStats* stats, HealthMonitorOptions o)
    : net_(net),
      rpc_(rpc),
      stats_(stats),
      opts_(o),
      board_(o.board),
      probe_bulk_(std::make_shared<const Buffer>(make_ping_pattern(kProbeBulk))),
      cpu_judge_(o.cpu) {}

void HealthMonitor::run(TimePoint now) {
  if (!opts_.enabled && opts_.cpu.wait_per_slice <= Duration::zero()) return;
  if (!started_) {
    started_ = true;
    next_ = now + std::chrono::seconds(1);
    return;
  }
  if (now < next_) return;
  next_ += std::chrono::seconds(1);
  if (next_ <= now) next_ = now + std::chrono::seconds(1);  // fell behind: no catching up
  if (opts_.cpu.wait_per_slice > Duration::zero()) judge_cpu(now);
  if (opts_.enabled) second(now);
}

HealthMonitor::CpuState HealthMonitor::cpu() const {
  MutexLock lk(mu_);
  return cpu_state_;
}

void HealthMonitor::judge_cpu(TimePoint now) {
  const double waited_before = cpu_judge_.total_wait_s();
  const CpuStarvation::Change change = cpu_judge_.sample(now, read_cpu_wait());
  cpu_wait_ms_.fetch_add(
      static_cast<uint64_t>((cpu_judge_.total_wait_s() - waited_before) * 1000.0 + 0.5));
  // The cgroup's figures of the last 10 s (its quota, when it is the cause, is what an
  // operator changes) -- read only while the threads wait at all, not every second.
  const double min_ms = std::chrono::duration<double, std::milli>(opts_.cpu.min_wait_per_s).count();
  if (cpu_judge_.starved() || cpu_judge_.last().wait_ms_per_s >= min_ms / 3) {
    cgroups_.push_back(read_cgroup_cpu());
    if (cgroups_.size() > 11) cgroups_.pop_front();
  } else {
    cgroups_.clear();
  }
  if (!cpu_judge_.starved() && change != CpuStarvation::Change::kEnded) return;
  auto figures = [](const CpuWaitFigures& f, const char* when) {
    return fmt::format(
        "its threads waited {:.0f} ms a second for a CPU, {:.1f} ms each time one was woken "
        "({})",
        f.wait_ms_per_s, f.wait_per_slice_ms, when);
  };
  if (change == CpuStarvation::Change::kEnded) {
    const double lasted_s = std::chrono::duration<double>(cpu_judge_.lasted()).count();
    cpu_starved_ms_.fetch_add(static_cast<uint64_t>(lasted_s * 1000.0));
    PFS_LOG_INFO("this node is no longer starved of CPU (for {:.0f} s): {}", lasted_s,
                 figures(cpu_judge_.last(), "its last second"));
    MutexLock lk(mu_);
    cpu_state_ = CpuState{};
    return;
  }
  std::string evidence = figures(cpu_judge_.mean(), "last 10 s");
  if (!cgroups_.empty() && cgroups_.front() && cgroups_.back() &&
      cgroups_.front()->path == cgroups_.back()->path) {
    const CgroupCpu &a = *cgroups_.front(), &b = *cgroups_.back();
    if (int64_t periods = b.periods - a.periods; periods > 0)
      evidence += fmt::format("; its cgroup {} ran out of its quota in {} of {} periods", b.path,
                              b.throttled - a.throttled, periods);
    if (b.quota_us > 0 && b.period_us > 0)
      evidence += fmt::format(" (cpu quota {:.1f} ms per {:.0f} ms)", double(b.quota_us) / 1000,
                              double(b.period_us) / 1000);
  }
  MutexLock lk(mu_);
  if (change == CpuStarvation::Change::kStarted) {
    cpu_starved_.fetch_add(1);
    PFS_LOG_WARN("this node is starved of CPU: {}", evidence);
    const auto ago =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - cpu_judge_.since());
    cpu_state_.since_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   net_.clock().wall_now().time_since_epoch())
                                   .count() -
                               ago.count();
  }
  cpu_state_.starved = true;
  cpu_state_.evidence = std::move(evidence);
}

void HealthMonitor::second(TimePoint now) {
  std::map<std::pair<Nid, Nid>, RpcStats::PathLatency> lat;
  if (stats_)
    for (const RpcStats::PathLatency& p : stats_->take_path_latency())
      lat[{p.local_ni, p.peer_ni}] = p;
  std::vector<PathSample> samples =
      net_.path_samples([&](const Nid& local, const Nid& peer, uint64_t bytes) {
        return board_.wants(local, peer, bytes);
      });
  std::vector<PathFigures> figs;
  figs.reserve(samples.size());
  for (PathSample& s : samples) {
    PathFigures f;
    f.local = s.local;
    f.peer = s.peer;
    f.bytes = s.bytes;
    f.tcp = s.tcp;
    f.segs_out = s.tcp_total.segs_out;
    // Lost ones only: a retransmit the peer had already (D-SACK) was a late ACK, not loss
    // -- on a busy host tail-loss probes fire on every path.
    f.retrans = s.tcp_total.retrans - std::min(s.tcp_total.spurious, s.tcp_total.retrans);
    f.srtt_ms = s.srtt_ms;
    f.min_rtt_ms = s.min_rtt_ms;
    f.queue_ms = s.queue_ms;
    f.conns = std::move(s.conns);
    if (auto it = lat.find({s.local, s.peer}); it != lat.end()) {
      f.rpcs = it->second.count;
      f.latency_ms = it->second.latency_ms;
      f.exec_ms = it->second.exec_ms;
    }
    figs.push_back(f);
  }
  for (const SlownessChange& c : board_.second(figs, now)) {
    const char* what = c.local ? "local NI" : "peer NI";
    int penalty = c.cause == SlowCause::kSlow || c.cause == SlowCause::kLossy ? opts_.penalty : 0;
    net_.set_degraded(c.nid, c.local, c.cause, penalty, c.evidence);
    double lasted_s = std::chrono::duration<double>(c.lasted).count();
    if (c.was != SlowCause::kNone && c.lasted > Duration::zero())
      degraded_ms_[static_cast<size_t>(c.was)].fetch_add(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(c.lasted).count()));
    if (c.cause == SlowCause::kNone) {
      PFS_LOG_INFO("{} {} is no longer degraded (was {}{}): {}", what, c.nid.to_string(),
                   slow_cause_name(c.was),
                   lasted_s > 0 ? fmt::format(", for {:.0f} s", lasted_s) : std::string(),
                   c.evidence);
      continue;
    }
    degraded_[static_cast<size_t>(c.cause)].fetch_add(1);
    PFS_LOG_WARN("{} {} is degraded ({}): {}{}", what, c.nid.to_string(), slow_cause_name(c.cause),
                 c.evidence,
                 penalty ? fmt::format("; selection takes {} off its health", penalty)
                         : std::string("; the server, not the path: no penalty"));
  }
  for (const Nid& peer : board_.degraded_peers())
    for (const PathSample& s : samples)
      if (s.peer == peer) probe(s.local, s.peer);
}

void HealthMonitor::probe(const Nid& local, const Nid& peer) {
  std::pair<Nid, Nid> key{local, peer};
  {
    MutexLock lk(mu_);
    if (!probing_.insert(key).second) return;  // the last pair is still out
  }
  probes_.fetch_add(2);
  CallOptions o;
  o.timeout = opts_.probe_timeout;
  o.via = std::make_pair(local, peer);
  // Two probes; the second's end frees the path for the next pair.
  auto left = std::make_shared<std::atomic<int>>(2);
  auto done = [this, key, left](RpcReply&&) {
    if (left->fetch_sub(1) != 1) return;
    MutexLock lk(mu_);
    probing_.erase(key);
  };
  rpc_.call_async(peer, kMsgPing, Buffer{}, nullptr, done, o);
  rpc_.call_async(peer, kMsgPing, Buffer{}, probe_bulk_, done, o);
}

}  // namespace pfsnet
