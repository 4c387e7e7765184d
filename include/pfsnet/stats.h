// RPC statistics as libpfsnet reports them (GPFS's mmdiag --rpc): the per-node,
// per-size-range and per-message-type statistics, a query, and the report it returns.
// Thread safety: plain values.
#pragma once

#include <pfsnet/nid.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace pfsnet {

enum class NodeStat : uint8_t {
  kChannelWait,
  kSendTcp,
  kSendVerbs,
  kReceiveTcp,
  kLatencyTcp,
  kLatencyVerbs,
  kLatencyMixed,
};
inline constexpr int kNumNodeStats = 7;
// "channel_wait", "send_time_tcp", ... (the JSON names of docs/interfaces.md).
std::string_view node_stat_name(NodeStat s);
bool node_stat_is_verbs(NodeStat s);

// The probe mesh's statistics per path (local NI -> peer NI), label "mesh": the small
// probe's round trip, the bulk probes' times (write: to the peer; read: from it), and
// lost probes (each with the time it waited). A count is probes; avg/min/max are times.
enum class ProbeStat : uint8_t { kRtt, kWrite, kRead, kLost };
inline constexpr int kNumProbeStats = 4;
// "mesh_rtt", "mesh_write", "mesh_read", "mesh_lost".
std::string_view probe_stat_name(ProbeStat s);

enum class Granularity : uint8_t { kSecond, kMinute, kHour, kDay };

struct StatsQuery {
  enum class What : uint8_t { kNode, kSize, kMessage, kAll, kProbe };  // kAll: not kProbe
  What what = What::kNode;
  std::optional<Nid> node;                 // only this node
  std::optional<Granularity> granularity;  // only this granularity
  size_t last = 0;                         // the newest `last` intervals; 0 = all held
  bool totals = false;                     // fill StatView::total (for Prometheus)
};

struct IntervalView {
  int64_t start = 0;  // unix seconds
  int64_t count = 0;
  double avg_ms = 0, min_ms = 0, max_ms = 0;
  // From the interval's log-scale histogram: within 1/16 of the true value (0 when the
  // interval had no data).
  double p50_ms = 0, p99_ms = 0;
};

// Every value since the statistic appeared (up to the last closed second), as a
// histogram of log-scale buckets: 8 per power of two of nanoseconds, so every power of
// two of nanoseconds is a bucket boundary.
struct StatTotal {
  int64_t count = 0;
  double sum_ms = 0;
  // (the bucket's upper bound in ns -- its values are below it --, its count), for the
  // buckets with values, in increasing order.
  std::vector<std::pair<int64_t, uint64_t>> buckets;
};

struct StatView {
  std::vector<IntervalView> seconds, minutes, hours, days;  // oldest first
  // Of the last completed minute (0 when it had no data).
  double p50_ms = 0, p99_ms = 0;
  StatTotal total;  // only with StatsQuery::totals
};

struct NodeReport {
  Nid node;
  std::vector<std::pair<NodeStat, StatView>> stats;
};
struct SizeReport {
  uint64_t low = 0, high = 0;
  StatView latency;
};
struct MessageReport {
  uint32_t type = 0;
  StatView execution;
};
struct ProbeReport {
  Nid local, peer;
  std::vector<std::pair<ProbeStat, StatView>> stats;
};
struct StatsReport {
  uint64_t dropped_stat = 0, dropped_exec = 0;
  std::vector<NodeReport> nodes;
  std::vector<SizeReport> sizes;
  std::vector<MessageReport> messages;
  std::vector<ProbeReport> probes;
};

}  // namespace pfsnet
