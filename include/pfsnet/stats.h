// RPC statistics as libpfsnet reports them (GPFS's mmdiag --rpc): the per-node,
// per-size-range and per-message-type statistics, a query, and the report it returns.
// Thread safety: plain values.
#pragma once

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
// "channel_wait", "send_time_tcp", ... (the JSON names of INTERFACES.md).
std::string_view node_stat_name(NodeStat s);
bool node_stat_is_verbs(NodeStat s);

enum class Granularity : uint8_t { kSecond, kMinute, kHour, kDay };

struct StatsQuery {
  enum class What : uint8_t { kNode, kSize, kMessage, kAll };
  What what = What::kNode;
  std::optional<uint64_t> node;            // only this node
  std::optional<Granularity> granularity;  // only this granularity
  size_t last = 0;                         // the newest `last` intervals; 0 = all held
};

struct IntervalView {
  int64_t start = 0;  // unix seconds
  int64_t count = 0;
  double avg_ms = 0, min_ms = 0, max_ms = 0;
};

struct StatView {
  std::vector<IntervalView> seconds, minutes, hours, days;  // oldest first
  // Of the last completed minute, from its log-scale histogram (0 when it had no data).
  double p50_ms = 0, p99_ms = 0;
};

struct NodeReport {
  uint64_t node = 0;
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
struct StatsReport {
  uint64_t dropped_stat = 0, dropped_exec = 0;
  std::vector<NodeReport> nodes;
  std::vector<SizeReport> sizes;
  std::vector<MessageReport> messages;
};

}  // namespace pfsnet
