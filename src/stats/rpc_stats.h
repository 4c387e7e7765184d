// RpcStats: GPFS RPC performance statistics (docs/sources.md; docs/architecture.md "RPC
// statistics").
//
// The RPC path records one RawStatRecord per reply received and one RawExecRecord per
// request executed; both go into bounded raw buffers without locks or allocation (a full
// buffer counts a drop). Once per second tick() processes the raw buffers into
// aggregates and closes the second:
//   per target node: channel wait, send time TCP, send time verbs, receive time TCP,
//     latency TCP, latency verbs, latency mixed (verbs ones only with a verbs NI);
//   per size range (0-64, 65-128, ..., up to 2 x maxBlockSize): latency, where the size
//     of an RPC is sent + received unless one is more than 16 times the other, then the
//     larger; sizes above the last bound count in the last range;
//   per message type (on the receiving node): execution time.
// Aggregates exist only for statistics that have had data. A node without data for
// longer than the day ring covers is freed.
//
// Memory: one aggregate is 4 rings of 32-byte intervals (60+60+24+30 by default: 5.6 KB)
// plus two 1280-byte histograms: about 8.4 KB. A TCP peer has 4 (channel wait, send,
// receive, latency): about 34 KB. memory_bytes() and node_bytes() measure it.
//
// Threads: record()/record_exec() from any thread, lock-free. tick(), query(),
// set_config() and the accessors from any thread; they serialise on a mutex.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/config.h>
#include <pfsnet/stats.h>
#include <pfsnet/status.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "stats/aggregate.h"
#include "stats/job_stats.h"
#include "stats/log_histogram.h"
#include "stats/raw_buffer.h"

namespace pfsnet {

class RpcStats {
 public:
  // `clock` must outlive this. Seconds are counted from construction.
  RpcStats(const StatsConfig& cfg, Clock& clock, bool verbs_configured);
  ~RpcStats();

  // The RPC path. Lock-free; a full buffer drops the record and counts it.
  void record(const RawStatRecord& r);
  void record_exec(const RawExecRecord& r);

  // Processes and closes every second boundary passed since the last call. Returns how
  // many seconds it closed.
  size_t tick();
  // Processes the raw buffers and closes one second, now (tests drive this directly).
  void process_second();

  StatsReport query(const StatsQuery& q) const;
  // Applies new attributes at run time: rings resized keeping the newest data, raw
  // buffers replaced (records in the old ones are still processed), size ranges
  // extended or cut to 2 x maxBlockSize.
  void set_config(const StatsConfig& cfg);

  // Small RPCs per path, for health's slowness judgement: RPCs of at most kSmallRpcBytes
  // each way, whose latency is the path's round trip rather than its transfer time. Summed
  // over the records processed since the last call, which takes them.
  static constexpr uint64_t kSmallRpcBytes = 4096;
  struct PathLatency {
    Nid local_ni, peer_ni;
    uint64_t count = 0;
    double latency_ms = 0, exec_ms = 0;  // sums
  };
  std::vector<PathLatency> take_path_latency();

  // An RPC type's p99 on this node over the last 5 to 10 minutes, for SLOW_OPS's second
  // trigger (an RPC in flight N x longer than its type's p99 usually takes): as its client,
  // submitted to reply; as its server, arrival to reply. None with fewer than
  // kTypeP99MinSamples of that type in the window (a p99 of a few is not one).
  static constexpr uint64_t kTypeP99MinSamples = 100;
  static constexpr int64_t kTypeP99EpochSeconds = 300;
  std::optional<Duration> type_p99(bool client, uint32_t type) const;

  // A probe of the mesh (label "mesh", ProbeStat): its outcome on path local -> peer
  // `ns` its time. Takes the lock: a probe is rare, not the RPC path.
  void record_probe(const Nid& local, const Nid& peer, ProbeStat s, int64_t ns);

  // Per job and per client (stats/job_stats.h): the server's part of every RPC it answers.
  JobStats& jobs() { return jobs_; }
  static JobStatsOptions job_options(const StatsConfig& cfg) {
    return JobStatsOptions{static_cast<size_t>(cfg.job_stats_max),
                           std::chrono::seconds(cfg.job_cleanup_interval), cfg.job_stats};
  }

  uint64_t dropped_stat() const;
  uint64_t dropped_exec() const;
  size_t memory_bytes() const;
  size_t node_bytes(const Nid& node) const;
  size_t node_count() const;

  // The size of an RPC for the size-range statistics (the 16x rule).
  static uint64_t rpc_size(uint64_t sent, uint64_t received);
  // Index of the size range of `size` given maxBlockSize (clamped to the last range).
  static size_t size_range(uint64_t size, int64_t max_block_size);
  static size_t num_size_ranges(int64_t max_block_size);
  static uint64_t range_low(size_t i) { return i == 0 ? 0 : (uint64_t(64) << (i - 1)) + 1; }
  static uint64_t range_high(size_t i) { return uint64_t(64) << i; }

 private:
  struct NodeStats {
    std::unique_ptr<Aggregate> stats[kNumNodeStats];
    int64_t last_second = 0;
  };

  Aggregate& get(std::unique_ptr<Aggregate>& slot) REQUIRES(mu_);
  void process_locked() REQUIRES(mu_);
  void add_record(const RawStatRecord& r) REQUIRES(mu_);
  StatView view(const Aggregate& a, const StatsQuery& q) const;

  Clock& clock_;
  bool verbs_;
  mutable Mutex mu_;
  StatsConfig cfg_ GUARDED_BY(mu_);
  RingSizes rings_ GUARDED_BY(mu_);

  // Current raw buffers (swapped by set_config); older generations are kept, and still
  // drained, until destruction.
  std::atomic<RawBuffer<RawStatRecord>*> stat_buf_;
  std::atomic<RawBuffer<RawExecRecord>*> exec_buf_;
  std::vector<std::unique_ptr<RawBuffer<RawStatRecord>>> stat_bufs_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<RawBuffer<RawExecRecord>>> exec_bufs_ GUARDED_BY(mu_);

  std::unordered_map<Nid, NodeStats> nodes_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Aggregate>> sizes_ GUARDED_BY(mu_);
  std::map<uint32_t, std::unique_ptr<Aggregate>> messages_ GUARDED_BY(mu_);
  struct ProbeStats {
    std::unique_ptr<Aggregate> stats[kNumProbeStats];
    int64_t last_second = 0;
  };
  std::map<std::pair<Nid, Nid>, ProbeStats> probes_ GUARDED_BY(mu_);
  // Keyed by (local NI, peer NI); bounded by the paths that carried small RPCs between two
  // take_path_latency() calls (a taker that stops leaves at most one entry per path).
  std::map<std::pair<Nid, Nid>, PathLatency> path_latency_ GUARDED_BY(mu_);

  // type_p99's figures, per (client?, type): this epoch's and the last one's, dense (a value
  // costs one increment as the second is processed). A few types: 2.5 KB each.
  struct TypeTimes {
    LogHistogram cur, prev;
  };
  std::map<std::pair<bool, uint32_t>, TypeTimes> type_times_ GUARDED_BY(mu_);

  TimePoint next_second_ GUARDED_BY(mu_);
  int64_t second_start_ GUARDED_BY(mu_) = 0;  // unix seconds of the second being filled
  int64_t seconds_done_ GUARDED_BY(mu_) = 0;  // seconds closed so far
  int64_t minute_start_ GUARDED_BY(mu_) = 0;
  int64_t hour_start_ GUARDED_BY(mu_) = 0;
  int64_t day_start_ GUARDED_BY(mu_) = 0;

  JobStats jobs_;  // its own locks
};

}  // namespace pfsnet
