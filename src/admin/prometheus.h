// The /metrics body: Prometheus text exposition (version 0.0.4) of a typed snapshot of a
// node -- its NIs and peer NIs, the RPC statistics of the last 60 one-second intervals and
// latency histograms since start, membership, health, the probe mesh and the tuning
// state. Every family has HELP and TYPE; names are prefixed pfsnet_, follow Prometheus's
// conventions (base units in the name, counters end in _total) and pass `promtool check
// metrics`.
// Thread safety: pure functions and a plain value.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "health/problems.h"
#include "membership/service.h"
#include "net/net.h"
#include "probe/mesh.h"
#include "rpc/reply_cache.h"
#include "rpc/worker_pool.h"
#include "stats/rpc_stats.h"
#include "tune/tune_service.h"

namespace pfsnet {

// Families (HELP and TYPE lines) and their samples, appended in order.
class PromText {
 public:
  void family(const std::string& name, const char* type, const char* help);
  // `labels` without braces ("nid=\"...\""); empty: a sample without labels. Values are
  // printed by prom_number.
  void sample(const std::string& name, const std::string& labels, double v);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// A sample value: whole numbers below 10^15 exactly (counters, counts), others to 15
// significant digits (a Unix time in ms keeps its milliseconds).
std::string prom_number(double v);

// The latency histograms' upper bounds: 2^k ns for k in [low, high] (4.1 us .. 34 s), and
// +Inf.
inline constexpr int kHistogramLowPow2 = 12, kHistogramHighPow2 = 35;

struct MetricsSnapshot {
  std::vector<NiInfo> nis, peers;
  StatsReport rpc;  // what = kAll, granularity = kSecond, the last 60 intervals, totals
  std::function<std::string(uint32_t)> type_name;
  std::optional<TuneStatus> tune;  // absent: no tuning families
  WorkerStats workers;
  ReplyCacheStats replay;  // exactly-once execution of the requests served here
  // The top stats.metrics_top_jobs jobs and clients by bytes, and `other` (absent: none).
  std::optional<JobStats::View> jobs, clients;
  // The health monitor's counters (absent: none runs): degradations by SlowCause, probes.
  struct Slowness {
    std::array<uint64_t, 4> degraded{};
    std::array<double, 4> degraded_seconds{};  // summed over the states that ended
    uint64_t probes = 0;
    // This node's CPU (base/cpu_wait.h): seconds its threads waited for one, times it was
    // called starved, seconds it stayed so (the states that ended), and whether it is now.
    double cpu_wait_seconds = 0;
    uint64_t cpu_starved_events = 0;
    double cpu_starved_seconds = 0;
    bool cpu_starved = false;
  };
  std::optional<Slowness> slowness;
  // What `pfsnet health` lists, as far as this node holds it without an RPC: on the MGS that
  // leads, the cluster's list (`cluster_list`); on any other node, its own findings.
  std::vector<Problem> problems;
  bool cluster_list = false;
  // Health events: this node's problems that started and ended, by cause (absent: the
  // health reporter does not run).
  struct HealthEvents {
    std::map<std::string, uint64_t> started, ended;
    std::map<std::string, double> lasted_seconds;  // of the ended ones, summed
  };
  std::optional<HealthEvents> health_events;
  // The probe mesh (absent: none runs): this node's row and its counters.
  struct Mesh {
    MeshRow row;
    uint64_t probes = 0, lost = 0, bulk_bytes = 0;
  };
  std::optional<Mesh> mesh;
  // Membership (absent: none runs): this node's counters and, on the MGS only, its table
  // of every node (another node would have to ask the MGS on every scrape).
  struct Membership {
    MembershipCounters counters;
    std::optional<StatusTable> table;
  };
  std::optional<Membership> membership;
  // Routes (none: no route families) and, on a router (lnet.routing), what it forwarded.
  std::vector<RouteInfo> routes;
  RouterStats router;
};

// Count, average, minimum and maximum (ms) over a statistic's one-second intervals: the
// intervals' own sums, so the average is over RPCs, not over seconds.
struct WindowSummary {
  int64_t count = 0;
  double avg_ms = 0, min_ms = 0, max_ms = 0;
};
WindowSummary summarize_seconds(const StatView& v);

std::string prometheus_text(const MetricsSnapshot& m);

}  // namespace pfsnet
