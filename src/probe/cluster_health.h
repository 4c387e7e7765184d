// Every node's own findings, gathered at the MGS (issue 14 item 5), so `pfsnet health` on
// any node lists the problems of the whole cluster and not only what it sees itself: a
// server's NI down, a client's settings that do not fit, a peer NI a node finds slow.
//
// Each node sends its list (HEALTH_REPORT, msg 28) when it changes, and a list that is
// not empty every 6 report intervals anyway; the MGS keeps the last list of each node
// (HealthBoard), drops a list not renewed within `keep`, and serves them all
// (HEALTH_CLUSTER, msg 29) in pages of nodes -- only nodes with a problem are kept, and a
// healthy node sends nothing, so a healthy cluster of 100,000 costs nothing.
// merge_cluster_problems() folds the lists into one: a problem several nodes see (the same
// kind, subject and cause) once, seen by all of them, since the earliest.
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

// A problem as `pfsnet health` lists it (admin/problems.h builds them).
struct Problem {
  std::string kind;     // "node", "ni", "peer_ni", "server", "settings", "path", "network"
  std::string subject;  // the node's name, the NID, the peer the settings are about, or
                        // the network ("tcp1")
  std::string cause;    // DEAD SUSPECT DOWN PARTITION LOSSY SLOW MTU THROTTLED UNHEALTHY SERVER
                        // SETTINGS
  std::string seen_by;  // the node(s) whose view this is, ", "-separated
  int64_t since_unix_ms = 0;  // 0: not known
  std::string evidence;
  std::string code;  // SETTINGS: which (the tuning check's code, e.g. rpcs_below_bdp)
  // A mute hides it (probe/health_mutes.h; set by the view, never on the wire).
  bool muted = false;
  bool operator==(const Problem&) const = default;
};

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

// Folds the nodes' lists into `into` (this node's own), leaving out `self`'s list (its own
// view is fresher) and a peer NI of the nodes in `down` (DEAD or SUSPECT: the node is the
// culprit, named already). A problem already there gains the node as a seer.
void merge_cluster_problems(std::vector<Problem>& into, const std::vector<NodeProblems>& nodes,
                            const std::string& self, const std::vector<std::string>& down_nids);

// Leaves out what follows from a faulty NI, named already as the culprit:
//   an NI its own node calls DOWN   any problem naming it (as its subject, or one end of a
//                                   path) with cause UNHEALTHY, SLOW, LOSSY or THROTTLED --
//                                   other nodes' failed sends to it, the mesh's lost probes
//   an NI named DOWN, SLOW, LOSSY   the peer NIs on its network that only its own node
//   or THROTTLED                    calls UNHEALTHY, SLOW, LOSSY or THROTTLED: a node whose
//                                   egress is shaped or lossy sees its peers so (TCP
//                                   retransmits what its own link dropped), the others do
//                                   not; and the mesh's SLOW or THROTTLED paths to or from
//                                   its node: the node's traffic moved to its other NIs,
//                                   whose bulk probes then share them
//   an NI the probe mesh names      a peer NI view of it LOSSY from one node alone: the
//   THROTTLED ("NID (node)")        shaper's full queue dropped that node's segments or
//                                   their ACKs (congestion, not loss; issue 70 item 6: a
//                                   20 Mbit/s tbf was called LOSSY by one of nine peers on
//                                   1.15% retransmitted). Seen so by two or more, it stays.
void drop_consequences(std::vector<Problem>& v);

// An NI whose link is at capacity: the probe mesh's rows say it carried at least
// kSaturatedShare of its speed (known: configured or the kernel's) one way in one interval
// of the window. Its small RPCs wait behind the bulk its queues hold, and a shaper's full
// queue drops -- load, not a fault.
inline constexpr double kSaturatedShare = 0.7;
// The NIDs (text) of the saturated NIs, with their nodes.
std::map<std::string, std::string> saturated_nis(const std::vector<MeshRow>& rows);

// Leaves out the SLOW, LOSSY, THROTTLED and UNHEALTHY problems that a saturated NI
// explains: those naming it (as the subject, or one end of a path), and the peer NIs on its
// network that only nodes with a saturated NI there see so. UNHEALTHY too: a link that
// carried 70% of its speed works, and what failed on it (a connect whose SYNs a full
// shaper dropped, a send that timed out in its queue) is its load's -- seen in the quiet
// run as PEER_NI_UNREACHABLE and PEER_NI_CONNECT_ERROR on a full 50 Mbit/s link.
void drop_saturated(std::vector<Problem>& v, const std::map<std::string, std::string>& saturated);

// A node starved of CPU (kind "node", cause CPU, its own finding: base/cpu_wait.h) answers
// late on every path: its peers see its NIs SLOW or its execution SERVER, the mesh its paths
// SLOW, THROTTLED or LOSSY (probes that timed out), and it sees its peers slow, since it
// reads their replies late. Those are left out -- the SLOW, LOSSY, THROTTLED, UNHEALTHY and
// SERVER problems naming its NIs (`nids_of`: the NIDs of each node), and the peer NIs only
// starved nodes see so -- and the CPU line stays.
//
// A server named SERVER (kind "server", subject its first NID: its peers' RPCs wait for it
// while TCP's round trip to it stays short -- a process stopped or descheduled most of the
// time, net/slowness.h) explains the same, but for the SERVER line itself, which stays: the
// peers' SLOW views of its NIs and the mesh's late or lost probes to and from it.
void drop_slow_nodes(std::vector<Problem>& v,
                     const std::map<std::string, std::vector<std::string>>& nids_of);

// What the list is for (issue 34 item 6): a peer NI that one node alone calls SLOW or
// UNHEALTHY while at least kFineViews other nodes' mesh probes reach it fine (answered, at
// least `min_answered` of them, their cells not marked) and nobody else finds fault with it
// is that observer's problem, not the peer's: it is listed once per observer and network as
// the observer's NI on that network (kind "ni", "NID (node)"), with the peers it sees so and
// the nodes that reach them fine. `marks` are mark_outliers(rows). LOSSY stays the peer's:
// the mesh's few small probes over TCP hide a loss its retransmits repair, so their being
// answered is no evidence against it. When the observer's own probes reach the peer fine
// too, its view is older than they are (a fault healed, still in its window: seen after a
// starved server got its CPU back) and is left out. So is a SERVER line (a server that
// answered late) whose every seer's probes reach the server's NI fine, as more than
// kFineViews nodes' do.
inline constexpr size_t kFineViews = 2;

// Partitions (issue 34 item 3): on a network, nodes that reach each other (a mesh cell
// answered, either way) form a side; two sides with a probed path between them that
// answered none of at least `min_sent` probes are a partition. It is listed once per
// network (kind "network", subject the network, cause PARTITION, its sides), seen by the
// nodes whose probes crossed it, and what it explains is left out: the UNHEALTHY, LOSSY,
// SLOW and THROTTLED peer NIs and paths across it, and the mesh's culprit NIs on that network
// of its sides. NIs in `culprits` (down, or of a dead or suspect node: named already) take
// no part. Ends when a probe across it is answered.
void fold_partitions(std::vector<Problem>& v, const std::vector<MeshRow>& rows,
                     const std::set<std::string>& culprits, uint32_t min_sent);
void attribute_to_observers(std::vector<Problem>& v, const std::vector<MeshRow>& rows,
                            const std::vector<std::vector<MeshMark>>& marks, uint32_t min_answered);

}  // namespace pfsnet
