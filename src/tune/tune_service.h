// TuneService: tuning inside a running node (tune.h holds the rules). Every second it
// samples each peer node's traffic (one sum per peer from Net::peer_loads, one look at
// the RPC engine's waiting targets); every tune.interval it feeds auto-tune (when
// tune.auto is on: one AutoTuner per target, each setting that peer's own
// max_rpcs_in_flight from its own RPCs -- a WAN peer's round trip says nothing of a LAN
// peer's -- and one for the node's credits, raised while sends wait for them); every
// tune.check_interval it checks that the settings still fit the measured paths and logs the warning
// events of TuneWatch. `pfsnet tune` asks it for advice (optionally probing peers first) and may
// apply it.
//
// What is known of a peer: its RTT from the fastest RPC latency of the last 60 s of
// statistics, or from a probe; its bandwidth from a probe, from tune.link_mbit, or --
// a lower bound only -- from the peak second of its traffic in the last 10 minutes.
//
// Threads: round() from one timer thread at a time; tune() and status() from any
// thread. Settings are read from and written through the LiveConfig.
#pragma once

#include <pfsnet/clock.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/live_config.h"
#include "base/mutex.h"
#include "net/net.h"
#include "rpc/node_part.h"
#include "rpc/rpc_engine.h"
#include "stats/rpc_stats.h"
#include "tune/tune.h"
#include "tune/window.h"

namespace pfsnet {

struct TuneRequest {
  bool probe = false;           // measure each peer (or `peers`) now
  bool apply = false;           // apply the recommendation
  std::vector<Nid> peers;       // empty: every peer node
  std::optional<int64_t> size;  // bulk RPC size; default maxBlockSize
};

struct TuneReport {
  Advice advice;
  TuneSettings current;
  std::map<std::string, std::string> probe_errors;  // peer NID -> why its probe failed
  // peer NID -> bytes sent over its bulk connections after the probe (warm_streams)
  std::map<std::string, int64_t> warmed_bytes;
  bool auto_tune = false;
  std::optional<std::vector<ConfigChange>> applied;  // set when the request applied
};

// What the tuning thread found last, for /metrics.
struct TuneStatus {
  std::vector<TuneProblem> active;  // problems of the last check
  uint64_t warnings = 0;            // warning events so far
  uint64_t autotune_changes = 0;    // settings changed by auto-tune
  std::optional<Advice> last_advice;
};

class TuneService final : public NodePart {
 public:
  // Everything must outlive the service.
  TuneService(Net& net, RpcEngine& rpc, RpcStats& stats, LiveConfig& cfg, Clock& clock);

  const char* part_name() const override { return "tune"; }
  // reset(now), then round() every round_period() on `queue` (the node's) until stop().
  Status start(TimerQueue& queue) override;
  void stop() override { ticker_.stop(); }

  // Takes the counters' baseline at `now`.
  void reset(TimePoint now);
  // One round at `now`: traffic every second, auto-tune every tune.interval, the drift
  // check every tune.check_interval.
  void round(TimePoint now);
  // How often round() should run (seconds): min(1, tune.interval).
  double round_period() const;

  // `pfsnet tune`: advice for every peer node (or those of req.peers). Errors: a bad
  // size, no peer to probe, or the apply refused.
  Result<TuneReport> tune(const TuneRequest& req);
  TuneStatus status() const;

  // Where the paths' TCP connections are read from (TCP_INFO through Net::peers by
  // default); tests give the kernel's account of a path. REQUIRES: before round().
  using TcpReader = std::function<std::vector<ConnTcpSample>()>;
  void set_tcp_reader(TcpReader r) { tcp_reader_ = std::move(r); }

 private:
  struct PeerTraffic {
    uint64_t bytes = 0, sends = 0;                        // counters at the last sample
    double rate = 0;                                      // bytes/s over the last sample
    std::deque<std::pair<int64_t, double>> minute_peaks;  // (minute, peak bytes/s)
    TimePoint queued_at{};                                // RPCs to it last seen waiting for a slot
  };

  TuneSettings settings() const;
  // Sets the three settings through the LiveConfig, as `config set` would.
  Result<ConfigApplied> apply(const TuneSettings& s);
  // Peer nodes with a connection open.
  size_t active_peers() const;
  void sample_traffic(TimePoint now) REQUIRES(mu_);
  // Each second: the paths' retransmits into loss_, but for the seconds in which a queue
  // stood on the path (congestion, not loss).
  void sample_loss() REQUIRES(mu_);
  // Whether a peer's loss_ now shows loss (over kLossCheckSegments counted or more) that
  // the last advice does not know of: true once per peer.
  bool new_loss() REQUIRES(mu_);
  void autotune_step(TimePoint now) REQUIRES(mu_);
  void check(const TuneConfig& tc, TimePoint now) REQUIRES(mu_);
  // Every path's TCP connection, read from the kernel now (a system call each).
  std::vector<ConnTcpSample> tcp_samples() const;
  // Keeps the kernel's RTT of each peer from `samples`, and reads the host's settings.
  void note_tcp(const std::vector<ConnTcpSample>& samples) REQUIRES(mu_);
  // The TCP window's problems, added to `a`: the paths the last check found held back by a
  // window, and the host's settings against the largest bandwidth x TCP's own RTT.
  void add_window_problems(Advice& a) REQUIRES(mu_);
  std::vector<PeerMeasure> measure_peers(const std::vector<Nid>& only, TimePoint now) REQUIRES(mu_);

  Net& net_;
  RpcEngine& rpc_;
  RpcStats& stats_;
  LiveConfig& cfg_;
  Clock& clock_;
  Repeating ticker_;      // round() on the node's queue
  TcpReader tcp_reader_;  // empty: Net::peers(true)

  mutable Mutex mu_;                                            // guards everything below
  std::map<std::string, PeerTraffic> traffic_ GUARDED_BY(mu_);  // peer node NID -> traffic
  std::map<std::string, ProbeResult> probes_ GUARDED_BY(mu_);   // peer node NID -> its last probe
  AutoTuner autotune_ GUARDED_BY(mu_);                          // the node's credits
  struct PeerTune {
    AutoTuner tuner;
    RpcCounters last;  // the target's counters at the last step
  };
  std::map<std::string, PeerTune> peer_tune_ GUARDED_BY(mu_);  // target NID -> its tuner
  TuneWatch watch_ GUARDED_BY(mu_);
  std::optional<Advice> last_advice_ GUARDED_BY(mu_);
  uint64_t last_credit_waits_ GUARDED_BY(mu_) = 0;
  uint64_t autotune_changes_ GUARDED_BY(mu_) = 0;
  TimePoint last_sample_ GUARDED_BY(mu_){};
  TimePoint last_step_ GUARDED_BY(mu_){};
  TimePoint last_check_ GUARDED_BY(mu_){};
  WindowWatch window_watch_ GUARDED_BY(mu_);
  std::vector<WindowFinding> window_findings_ GUARDED_BY(mu_);  // of the last check
  HostTcp host_ GUARDED_BY(mu_);                                // read at the last check
  // Peer node -> the kernel's lowest RTT of its TCP connections (ms) at the last check:
  // TCP's windows must cover TCP's round trip (an emulated delay above the socket is not
  // one).
  std::map<std::string, double> tcp_rtt_ms_ GUARDED_BY(mu_);
  // Peer node -> its TCP connections' retransmitted / sent segments over the seconds in
  // which no queue stood on the path (loss_), at the last reading.
  std::map<std::string, double> tcp_retrans_ GUARDED_BY(mu_);
  // Peer node -> its paths' loss, read each second.
  std::map<std::string, LossCounter> loss_ GUARDED_BY(mu_);
  std::set<std::string> loss_checked_ GUARDED_BY(mu_);  // peers new_loss() has told
  // Peer node -> the largest segment (MSS) of its TCP connections at the last reading.
  std::map<std::string, double> tcp_mss_ GUARDED_BY(mu_);
};

}  // namespace pfsnet
