// Every node's own findings, gathered at the MGS (issue 14 item 5), so `pfsnet health` on
// any node lists the problems of the whole cluster and not only what it sees itself: a
// server's NI down, a client's settings that do not fit, a peer NI a node finds slow.
//
// Each node sends its list (HEALTH_REPORT, msg 28) when it changes, and a list that is
// not empty every 6 report intervals anyway; the MGS keeps the last list of each node
// (HealthBoard), drops a list not renewed within `keep`, and serves them all
// (HEALTH_CLUSTER, msg 29) in pages of nodes -- only nodes with a problem are kept, and a
// healthy node sends nothing, so a healthy cluster of 100,000 costs nothing.
// health/rules.h folds the lists into one (merge_cluster_problems and the passes after it).
//
// Thread safety: pure functions; HealthBoard is a plain value (its owner serialises).
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/clock.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "membership/protocol.h"  // MeshRow
#include "probe/mesh.h"           // MeshMark

namespace pfsnet {

// A problem as `pfsnet health` lists it: what is faulty -- a node, a local NI, a peer NI, a
// server, a path, a network, the settings -- its cause, since when, who sees it and the
// figures behind the call. A node's own findings (health/problems.h) travel to the MGS as
// these; the rules (health/rules.h) make the one list of them that every consumer shows.
struct Problem {
  std::string kind;     // "node", "ni", "peer_ni", "server", "settings", "path", "network",
                        // "router"
  std::string subject;  // the node's name, the NID, the peer the settings are about, or
                        // the network ("tcp1")
  std::string cause;    // DEAD SUSPECT DOWN PARTITION ROUTER LOSSY SLOW MTU THROTTLED UNHEALTHY
                        // SERVER SLOW_OPS SETTINGS UNREACHABLE
  std::string seen_by;  // the node(s) whose view this is, ", "-separated
  int64_t since_unix_ms = 0;  // 0: not known
  std::string evidence;
  std::string code;  // SETTINGS: which (the tuning check's code, e.g. rpcs_below_bdp)
  // A mute hides it (probe/health_mutes.h; set by the view, never on the wire).
  bool muted = false;
  bool operator==(const Problem&) const = default;
};

class ByteWriter;
class ByteReader;
// One problem in its wire form (Problem::muted not in it); a malformed one fails `r`.
void write_problem(ByteWriter& w, const Problem& p);
Problem read_problem(ByteReader& r);

inline constexpr size_t kMaxReportedProblems = 64;   // per node; more are cut
inline constexpr uint32_t kMaxHealthPage = 1000;     // nodes per HEALTH_CLUSTER page
inline constexpr size_t kHealthPageBytes = 1 << 20;  // and at most this encoded (its bulk)

// HEALTH_REPORT: a node's whole list now (replaces its last one; empty clears it).
struct HealthReport {
  std::string node;
  std::vector<Problem> problems;
  bool operator==(const HealthReport&) const = default;
};
Buffer encode_health_report(const HealthReport& r);
Result<HealthReport> decode_health_report(std::span<const uint8_t> b);
// The same layout with up to `max_problems` (HEALTH_LIST's request: a node's whole list);
// `what` names the message in a decoding error.
Buffer encode_health_report_up_to(const HealthReport& r, size_t max_problems);
Result<HealthReport> decode_health_report_up_to(std::span<const uint8_t> b, size_t max_problems,
                                                const char* what);

struct NodeProblems {
  std::string node;
  int64_t updated_unix_ms = 0;  // when the MGS received it (its wall clock)
  std::vector<Problem> problems;
  bool operator==(const NodeProblems&) const = default;
};
// HEALTH_CLUSTER's reply (in the reply's bulk): nodes [offset, offset + nodes.size()) of `total`.
struct HealthPage {
  uint32_t total = 0, offset = 0;
  std::vector<NodeProblems> nodes;
  bool operator==(const HealthPage&) const = default;
};
Buffer encode_health_page(const HealthPage& p);
Result<HealthPage> decode_health_page(std::span<const uint8_t> b);

// Whether two lists name the same problems (kind, subject, cause), whatever their order,
// times and evidence: what makes a node send its list before the refresh is due.
bool same_problems(const std::vector<Problem>& a, const std::vector<Problem>& b);

// The MGS's lists, by node name.
class HealthBoard {
 public:
  explicit HealthBoard(Duration keep) : keep_(keep) {}
  void report(HealthReport r, TimePoint now, int64_t wall_ms);
  void forget(const std::string& node) { nodes_.erase(node); }
  // Drops the lists not renewed within `keep`.
  void expire(TimePoint now);
  // Nodes from `offset` on: at most `limit` (and kMaxHealthPage), and no more than fit in
  // kHealthPageBytes encoded -- always at least one.
  HealthPage page(uint32_t offset, uint32_t limit) const;
  std::vector<NodeProblems> all() const;
  size_t size() const { return nodes_.size(); }

 private:
  struct Entry {
    NodeProblems np;
    TimePoint heard{};
  };
  Duration keep_;
  std::map<std::string, Entry> nodes_;
};

}  // namespace pfsnet
