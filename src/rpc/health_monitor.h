// HealthMonitor: the I/O shell of health that sees slowness (net/slowness_board.h is the
// rule). Once a second it takes the small RPCs per path from the statistics, samples Net's
// paths (the kernel's TCP totals only of paths that moved bytes or lead to a degraded peer
// NI: a system call per connection), runs the board, and applies what changed:
//   - Net::set_degraded: SLOW and LOSSY take `degraded_penalty` off the NI's health for
//     selection; SERVER is shown with no penalty (another rail would not be faster);
//   - a warning in the log when an NI is degraded, with the evidence; info when it recovers;
//   - counters per cause (/metrics).
// Each second it also asks the kernel how long this node's threads waited for a CPU
// (base/cpu_wait.h): a node starved of CPU is its own problem, CPU, whatever its peers see
// of its paths.
// A degraded peer NI is avoided, so it carries no traffic by which to recover: each second
// it is probed on every path to it with a small PING (latency) and a 64 KiB echo (segments
// for the loss figure), at most one probe pair per path in flight.
// Threads: run() from the timer driver's thread; counters from any thread. The monitor must
// outlive the probes it sends (it is destroyed after the engine is shut down).
#pragma once

#include <pfsnet/config.h>

#include <array>
#include <atomic>
#include <deque>
#include <optional>
#include <set>
#include <string>

#include "base/cpu_wait.h"
#include "base/mutex.h"
#include "net/net.h"
#include "net/slowness_board.h"
#include "rpc/rpc_engine.h"
#include "stats/rpc_stats.h"

namespace pfsnet {

struct HealthMonitorOptions {
  bool enabled = true;
  SlownessBoardOptions board;
  int penalty = 500;
  Duration probe_timeout = std::chrono::seconds(10);
  CpuStarvationOptions cpu;  // cpu.wait_per_slice zero: not judged

  static HealthMonitorOptions from(const Config& cfg);
};

class HealthMonitor {
 public:
  // `stats` may be null (no latency: loss only). All must outlive the monitor.
  HealthMonitor(Net& net, RpcEngine& rpc, RpcStats* stats, HealthMonitorOptions o);

  // At most once a second of `now` does anything.
  void run(TimePoint now);

  // Times an NI became degraded, per cause (index: SlowCause).
  uint64_t degraded_total(SlowCause c) const { return degraded_[static_cast<size_t>(c)].load(); }
  // Seconds the NIs degraded for cause `c` stayed so, summed over the states that ended.
  double degraded_seconds(SlowCause c) const {
    return double(degraded_ms_[static_cast<size_t>(c)].load()) / 1000.0;
  }
  uint64_t probes_sent() const { return probes_.load(); }

  // Whether this node is starved of CPU now, since when, and the figures.
  struct CpuState {
    bool starved = false;
    int64_t since_unix_ms = 0;
    std::string evidence;
  };
  CpuState cpu() const;
  // Seconds this node's threads waited for a CPU since the monitor began (summed over
  // threads); times it was starved; seconds it stayed so, over the states that ended.
  double cpu_wait_seconds() const { return double(cpu_wait_ms_.load()) / 1000.0; }
  uint64_t cpu_starved_total() const { return cpu_starved_.load(); }
  double cpu_starved_seconds() const { return double(cpu_starved_ms_.load()) / 1000.0; }

 private:
  void second(TimePoint now);
  void probe(const Nid& local, const Nid& peer);
  void judge_cpu(TimePoint now);

  Net& net_;
  RpcEngine& rpc_;
  RpcStats* stats_;
  HealthMonitorOptions opts_;
  SlownessBoard board_;  // run()'s thread only
  TimePoint next_{};
  bool started_ = false;
  BulkData probe_bulk_;
  std::array<std::atomic<uint64_t>, 4> degraded_{};
  std::array<std::atomic<uint64_t>, 4> degraded_ms_{};  // durations of the ended states
  std::atomic<uint64_t> probes_{0};
  CpuStarvation cpu_judge_;                       // run()'s thread only
  std::deque<std::optional<CgroupCpu>> cgroups_;  // run()'s thread only: the last 11 s
  std::atomic<uint64_t> cpu_wait_ms_{0}, cpu_starved_{0}, cpu_starved_ms_{0};
  mutable Mutex mu_;
  CpuState cpu_state_ GUARDED_BY(mu_);
  std::set<std::pair<Nid, Nid>> probing_ GUARDED_BY(mu_);  // paths with probes out
};

}  // namespace pfsnet
