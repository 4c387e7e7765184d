// The rules of `pfsnet health` (issue 70 item 7): pure functions that make the one list of
// the cluster's problems out of what the nodes find. Each node's own findings
// (health/problems.h: find_problems) are merged with every other node's (the MGS's board),
// then the passes below take out what follows from a culprit named already, fold what one
// cause explains into one line, and give a lone observer's view back to the observer. judge()
// runs them in their one order; health/view.h fetches its inputs. docs/health_rules.md says
// why each rule is there, with the drill that found it.
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "health/problems.h"
#include "membership/protocol.h"   // MeshRow, StatusTable
#include "probe/cluster_health.h"  // Problem, NodeProblems
#include "probe/mesh.h"            // MeshMark, MeshOutlierRule

namespace pfsnet {

// Everything the cluster's list is judged from, as the view fetched it.
struct ClusterInputs {
  // This node's own findings' inputs (its NIs, peers, CPU, RPCs, settings, certificates);
  // judge() sets their table and mesh from the fields below.
  ProblemInputs own;
  const StatusTable* table = nullptr;               // the MGS's; null: not had
  std::vector<MeshRow> rows;                        // the MGS's mesh rows; empty: none
  std::optional<std::vector<NodeProblems>> others;  // every node's own list; none: not had
  // The asking node's own findings as it found them (judged at the MGS, HEALTH_LIST: `own`
  // then carries only its name and the time), merged in before every other node's.
  std::vector<Problem> found;
  MeshOutlierRule rule;
  // Why the MGS, or part of what it holds, could not be had ("": all was, or no MGS): the
  // list then starts with an UNREACHABLE line, since what follows may be partial.
  std::string mgs_error;
};

// The cluster's problems from `in`, severest first: this node's own findings with the
// table's dead and suspect nodes and the mesh's outliers (marked once, here), every other
// node's merged in, then drop_consequences, fold_partitions, drop_saturated,
// drop_slow_nodes and attribute_to_observers, in that order.
std::vector<Problem> judge(ClusterInputs in);

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
