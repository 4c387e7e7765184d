// The daemon's side of tuning: traffic sampling, auto-tune, the drift check, the
// `tune` admin command and its /metrics (tune/ holds the rules).
#include <algorithm>
#include <cmath>

#include "base/log.h"
#include "pfsnetd/daemon.h"

namespace pfsnet {

using nlohmann::json;

namespace {

constexpr size_t kPeakMinutes = 10;  // traffic peaks kept per peer

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

double round3(double v) { return std::round(v * 1000) / 1000; }

uint64_t total_credit_waits(const std::vector<NiInfo>& nis) {
  uint64_t n = 0;
  for (const NiInfo& i : nis) n += i.credit_waits;
  return n;
}

}  // namespace

TuneSettings Daemon::settings() {
  std::lock_guard lk(cfg_mu_);
  return {cfg_.rpc.max_rpcs_in_flight, cfg_.lnet.peer_credits, cfg_.lnet.credits};
}

json Daemon::apply_settings(const TuneSettings& s, Status* err) {
  std::lock_guard lk(cfg_mu_);
  Config next = cfg_;
  next.rpc.max_rpcs_in_flight = s.max_rpcs_in_flight;
  next.lnet.peer_credits = s.peer_credits;
  next.lnet.credits = s.credits;
  return apply_locked(std::move(next), true, err);
}

void Daemon::start_tuning() {
  {
    std::lock_guard lk(tune_mu_);
    last_sample_ = last_step_ = last_check_ = clock_.now();
    last_rpc_ = rpc_->counters();
    last_credit_waits_ = total_credit_waits(net_->nis());
  }
  tune_ticker_.start(
      [this] {
        std::lock_guard lk(cfg_mu_);
        return Periodic::Period(std::min(1.0, cfg_.tune.interval));
      },
      [this] { tune_round(); });
}

void Daemon::tune_round() {
  TuneConfig tc;
  {
    std::lock_guard c(cfg_mu_);
    tc = cfg_.tune;
  }
  std::lock_guard lk(tune_mu_);
  TimePoint now = clock_.now();
  autotune_->set_bounds(tc);
  if (now - last_sample_ >= std::chrono::milliseconds(990)) sample_traffic(now);
  if (now - last_step_ >= std::chrono::duration<double>(tc.interval * 0.99)) {
    if (tc.auto_tune) {
      autotune_step(now);
    } else {  // keep the baseline current, so turning auto-tune on starts afresh
      last_step_ = now;
      last_rpc_ = rpc_->counters();
      last_credit_waits_ = total_credit_waits(net_->nis());
    }
  }
  if (now - last_check_ >= std::chrono::seconds(tc.check_interval)) {
    last_check_ = now;
    tune_check();
  }
}

size_t Daemon::active_peers() {
  size_t n = 0;
  for (const PeerLoad& l : net_->peer_loads()) n += l.up ? 1 : 0;
  return n;
}

// Every second: a sum per peer node (no per-NI snapshot), and one look at the RPC
// engine's waiting targets.
void Daemon::sample_traffic(TimePoint now) {
  double dt = seconds(now - last_sample_);
  last_sample_ = now;
  int64_t minute = unix_ms_now() / 60000;
  for (const PeerLoad& l : net_->peer_loads()) {
    auto [it, fresh] = traffic_.try_emplace(l.peer.to_string());
    PeerTraffic& t = it->second;
    if (!fresh && dt > 0 && l.bytes >= t.bytes) {
      t.rate = double(l.bytes - t.bytes) / dt;
      if (l.sends > t.sends) t.rpc_bytes = double(l.bytes - t.bytes) / double(l.sends - t.sends);
      if (t.minute_peaks.empty() || t.minute_peaks.back().first != minute)
        t.minute_peaks.emplace_back(minute, 0.0);
      t.minute_peaks.back().second = std::max(t.minute_peaks.back().second, t.rate);
      while (t.minute_peaks.front().first + int64_t(kPeakMinutes) <= minute)
        t.minute_peaks.pop_front();
    }
    t.bytes = l.bytes;
    t.sends = l.sends;
  }
  for (const Nid& n : rpc_->waiting_targets())
    if (auto peer = net_->peer_of(n)) {
      auto it = traffic_.find(peer->to_string());
      if (it != traffic_.end()) it->second.queued_at = now;
    }
}

void Daemon::autotune_step(TimePoint now) {
  RpcCounters c = rpc_->counters();
  uint64_t cw = total_credit_waits(net_->nis());
  TuneInterval iv;
  iv.seconds = seconds(now - last_step_);
  iv.rpcs = c.completed - last_rpc_.completed;
  iv.round_trip_ms =
      iv.rpcs ? double(c.round_trip_ns - last_rpc_.round_trip_ns) / 1e6 / double(iv.rpcs) : 0;
  iv.bytes = c.bytes - last_rpc_.bytes;
  iv.slot_waits = c.slot_waits - last_rpc_.slot_waits;
  iv.credit_waits = cw - last_credit_waits_;
  iv.peers = 0;
  for (const auto& [key, t] : traffic_) iv.peers += t.rate > 0 ? 1 : 0;
  iv.peers = std::max<size_t>(1, iv.peers);
  last_step_ = now;
  last_rpc_ = c;
  last_credit_waits_ = cw;
  TuneSettings cur = settings();
  auto ch = autotune_->step(iv, cur);
  if (!ch) return;
  if (ch->to == cur) {
    PFS_LOG_INFO("auto-tune: {}", ch->why);
    return;
  }
  Status err;
  apply_settings(ch->to, &err);
  if (!err.ok()) {
    PFS_LOG_ERROR("auto-tune: could not apply the change ({}): {}", ch->why, err.message());
    return;
  }
  ++autotune_changes_;
  PFS_LOG_INFO("auto-tune: {} (now max_rpcs_in_flight {}, peer_credits {}, credits {})", ch->why,
               ch->to.max_rpcs_in_flight, ch->to.peer_credits, ch->to.credits);
}

std::vector<PeerMeasure> Daemon::measure_peers(const std::vector<Nid>& only) {
  TuneConfig tc;
  double block;
  int64_t check_s;
  {
    std::lock_guard c(cfg_mu_);
    tc = cfg_.tune;
    block = double(cfg_.stats.maxBlockSize);
    check_s = cfg_.tune.check_interval;
  }
  std::map<std::string, std::vector<Nid>> nodes;
  for (const NiInfo& i : net_->peers()) nodes[i.peer.to_string()].push_back(i.nid);
  TimePoint now = clock_.now();
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
      q.node = n.pack();
      q.granularity = Granularity::kSecond;
      q.last = 60;
      for (const NodeReport& r : stats_->query(q).nodes)
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
                         now - t->second.queued_at <= std::chrono::seconds(check_s);
    }
    auto pr = probes_.find(key);
    if (pr != probes_.end()) {
      if (m.rtt_ms == 0 || pr->second.rtt_ms < m.rtt_ms) {
        m.rtt_ms = pr->second.rtt_ms;
        m.rtt_source = "probe (fastest of 3 empty PINGs)";
      }
      m.bandwidth = pr->second.bandwidth;
      m.bandwidth_source = "probe (train of " + std::to_string(pr->second.train) + " x " +
                           std::to_string(pr->second.size) + " B)";
    } else if (tc.link_mbit > 0) {
      m.bandwidth = tc.link_mbit * 1e6 / 8;
      m.bandwidth_source = "tune.link_mbit";
    } else if (peak > 0) {
      m.bandwidth = peak;
      m.bandwidth_source = "traffic (peak second of the last 10 min: a lower bound)";
      m.bandwidth_lower_bound = true;
    }
    out.push_back(std::move(m));
  }
  return out;
}

void Daemon::tune_check() {
  TuneConfig tc;
  {
    std::lock_guard c(cfg_mu_);
    tc = cfg_.tune;
  }
  Advice a = advise(measure_peers({}), settings(), tc, active_peers());
  for (const TuneWatch::Event& e : watch_.update(a)) {
    if (e.warning)
      PFS_LOG_WARN("{}", e.text);
    else
      PFS_LOG_INFO("{}", e.text);
  }
  last_advice_ = std::move(a);
}

Result<json> Daemon::tune(const json& req) {
  bool probe = req.value("probe", false), apply = req.value("apply", false);
  std::vector<Nid> only;
  if (req.contains("peers")) {
    if (!req["peers"].is_array()) return Status(Code::kInvalidArgument, "peers: a list of NIDs");
    for (const json& p : req["peers"]) {
      auto n = Nid::parse(p.is_string() ? p.get<std::string>() : std::string());
      if (!n.ok()) return Status(Code::kInvalidArgument, "bad --peer: " + n.status().message());
      only.push_back(*n);
    }
  }
  TuneConfig tc;
  int64_t size, max_bulk;
  {
    std::lock_guard c(cfg_mu_);
    tc = cfg_.tune;
    size = cfg_.stats.maxBlockSize;
    max_bulk = cfg_.max_bulk();
  }
  size = req.value("size", size);
  if (size < 4096 || size > max_bulk)
    return Status(Code::kInvalidArgument,
                  "size must be 4096.." + std::to_string(max_bulk) + " bytes (2 x maxBlockSize)");
  TuneSettings cur = settings();
  json errors = json::object();
  if (probe) {
    std::vector<Nid> targets = only;
    if (targets.empty())
      for (const PeerLoad& l : net_->peer_loads())
        if (l.up) targets.push_back(l.peer);
    if (targets.empty())
      return Status(Code::kInvalidArgument, "no connected peer to probe: name one with --peer NID");
    // The train fits in the window, so it measures the path and not the credits.
    int train = static_cast<int>(
        std::clamp<int64_t>(std::min(cur.max_rpcs_in_flight, cur.peer_credits), 2, 8));
    for (const Nid& t : targets) {
      auto r =
          probe_peer(*rpc_, t, static_cast<uint32_t>(size), train, 3, std::chrono::seconds(10));
      if (!r.ok()) {
        errors[t.to_string()] = r.status().message();
        continue;
      }
      std::string key = net_->peer_of(t).value_or(t).to_string();
      std::lock_guard lk(tune_mu_);
      probes_[key] = *r;
    }
  }
  std::vector<PeerMeasure> ms;
  {
    std::lock_guard lk(tune_mu_);
    ms = measure_peers(only);
  }
  for (PeerMeasure& m : ms) m.rpc_bytes = double(size);
  Advice a = advise(ms, cur, tc, active_peers());
  constexpr double kMiB = 1024.0 * 1024.0;
  json peers = json::array();
  for (const PeerAdvice& p : a.peers)
    peers.push_back({{"peer", p.m.peer},
                     {"rtt_ms", round3(p.m.rtt_ms)},
                     {"rtt_source", p.m.rtt_source},
                     {"bandwidth_mib_s", round3(p.m.bandwidth / kMiB)},
                     {"bandwidth_gbit_s", round3(p.m.bandwidth * 8 / 1e9)},
                     {"bandwidth_source", p.m.bandwidth_source},
                     {"throughput_mib_s", round3(p.m.throughput / kMiB)},
                     {"window_limited", p.m.window_limited},
                     {"rpc_bytes", static_cast<int64_t>(p.m.rpc_bytes)},
                     {"bdp_bytes", static_cast<int64_t>(p.bdp_bytes)},
                     {"bdp_mib", round3(p.bdp_bytes / kMiB)},
                     {"rpcs_needed", p.rpcs_needed},
                     {"ceiling_mib_s", round3(p.ceiling / kMiB)}});
  auto setting = [](int64_t now, int64_t rec, const std::string& why) {
    return json{{"current", now}, {"recommended", rec}, {"why", why}};
  };
  json problems = json::array();
  for (const TuneProblem& p : a.problems)
    problems.push_back({{"problem", p.code}, {"peer", p.peer}, {"text", p.text}});
  json out = {
      {"peers", peers},
      {"active_peers", a.active_peers},
      {"settings",
       {{"max_rpcs_in_flight",
         setting(cur.max_rpcs_in_flight, a.recommended.max_rpcs_in_flight, a.why_rpcs)},
        {"peer_credits", setting(cur.peer_credits, a.recommended.peer_credits, a.why_peer_credits)},
        {"credits", setting(cur.credits, a.recommended.credits, a.why_credits)}}},
      {"problems", problems},
      {"probe_errors", errors},
      {"auto", tc.auto_tune}};
  if (apply) {
    Status err;
    json changed = apply_settings(a.recommended, &err);
    if (!err.ok()) return err;
    out["applied"] = changed["changed"];
    PFS_LOG_INFO(
        "tune: applied the recommended settings (max_rpcs_in_flight {}, peer_credits "
        "{}, credits {})",
        a.recommended.max_rpcs_in_flight, a.recommended.peer_credits, a.recommended.credits);
  }
  return out;
}

std::string Daemon::tune_metrics() {
  std::lock_guard lk(tune_mu_);
  PromText t;
  t.family("pfsnet_tune_settings_fit", "gauge",
           "1 when the last check found the settings fit the measured RTT, bandwidth and peers.");
  t.sample("pfsnet_tune_settings_fit", "", watch_.active().empty() ? 1 : 0);
  t.family("pfsnet_tune_problem", "gauge",
           "A reason the settings do not fit, from the last check (1 while it holds).");
  for (const TuneProblem& p : watch_.active())
    t.sample("pfsnet_tune_problem", "problem=\"" + p.code + "\",peer=\"" + p.peer + "\"", 1);
  t.family("pfsnet_tune_warnings_total", "counter",
           "Warning events: the settings stopped fitting the measured paths.");
  t.sample("pfsnet_tune_warnings_total", "", double(watch_.warnings()));
  t.family("pfsnet_tune_autotune_changes_total", "counter", "Settings changed by auto-tune.");
  t.sample("pfsnet_tune_autotune_changes_total", "", double(autotune_changes_));
  if (!last_advice_) return t.take();
  const Advice& a = *last_advice_;
  t.family("pfsnet_tune_recommended", "gauge", "The advisor's value for a setting.");
  t.sample("pfsnet_tune_recommended", "setting=\"max_rpcs_in_flight\"",
           double(a.recommended.max_rpcs_in_flight));
  t.sample("pfsnet_tune_recommended", "setting=\"peer_credits\"",
           double(a.recommended.peer_credits));
  t.sample("pfsnet_tune_recommended", "setting=\"credits\"", double(a.recommended.credits));
  t.family("pfsnet_tune_peer_rtt_seconds", "gauge", "Measured round trip to a peer (0: unknown).");
  for (const PeerAdvice& p : a.peers)
    t.sample("pfsnet_tune_peer_rtt_seconds", "peer=\"" + p.m.peer + "\"", p.m.rtt_ms / 1000);
  t.family("pfsnet_tune_peer_bandwidth_bytes_per_second", "gauge",
           "Measured or configured bandwidth to a peer (0: unknown).");
  for (const PeerAdvice& p : a.peers)
    t.sample("pfsnet_tune_peer_bandwidth_bytes_per_second", "peer=\"" + p.m.peer + "\"",
             p.m.bandwidth);
  t.family("pfsnet_tune_peer_bdp_bytes", "gauge", "Bandwidth-delay product of the path to a peer.");
  for (const PeerAdvice& p : a.peers)
    t.sample("pfsnet_tune_peer_bdp_bytes", "peer=\"" + p.m.peer + "\"", p.bdp_bytes);
  return t.take();
}

}  // namespace pfsnet
