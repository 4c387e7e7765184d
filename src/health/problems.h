// Problems: what is wrong, as `pfsnet health` lists it (like `mmhealth cluster show`): one
// entry per problem, naming what is faulty -- a node, a local NI, a peer NI, a server, the
// settings -- with the cause, since when, the node that sees it, and the figures behind
// the call. Built from typed snapshots:
//   the MGS's node table    DEAD, SUSPECT (a node)
//   this node's NIs         DOWN (link down), UNHEALTHY (health below 1000: errors),
//                           SLOW, LOSSY (slowness, net/slowness_board.h)
//   this node's peer NIs    UNHEALTHY, SLOW, LOSSY; SERVER (the peer's execution time)
//   this node's CPU         CPU (kind "node": its threads wait for a processor)
//   this node's routes      ROUTER (kind "router": a gateway it does not use -- dead to its
//                           router pings, not routing, its far side down, its connect
//                           failing -- with the networks that are cut off for it)
//   this node's RPCs        SLOW_OPS (kind "node": RPCs it called or serves in flight for
//                           over health.slow_ops_s, with the oldest's verdict)
//   the tuning check        SETTINGS (the settings do not fit the measured path)
//   this node's TLS         SETTINGS (a certificate expires within 30 days, or has)
//   other nodes' own lists  any of the above (probe/cluster_health.h: each node sends its
//                           own to the MGS; health/rules.h's judge() folds them in)
//   the probe mesh          SLOW, LOSSY, THROTTLED (probe/mesh.h's outlier cells, the whole
//                           cluster's): an NI in at least two outlier cells that are at
//                           least half of the mesh cells it is in is the culprit (kind "ni",
//                           the cause most of them share); the other outlier cells are
//                           listed as paths, seen by their prober; MTU: an NI whose MTU is
//                           not the one most NIs on its link have (mtu_outliers)
// A peer NI of a node the table calls DEAD or SUSPECT is not listed again: the node is the
// culprit, its NIs' errors the consequence. Sorted by severity, then oldest first.
// Thread safety: pure functions.
#pragma once

#include <pfsnet/ni_info.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "membership/protocol.h"
#include "net/net.h"
#include "probe/cluster_health.h"
#include "probe/mesh.h"
#include "transport/tls.h"
#include "tune/tune.h"

namespace pfsnet {

struct ProblemInputs {
  std::string node;                    // this node's name
  const StatusTable* table = nullptr;  // the MGS's table (null: not asked or not reachable)
  std::vector<NiInfo> nis, peers;
  std::vector<TuneProblem> settings;  // the tuning check's active problems
  // The certificates this node's TLS uses, and the time now (a Clock's wall_now()).
  std::vector<CertificateInForce> certificates;
  int64_t now_unix_ms = 0;
  // This node starved of CPU (rpc/health_monitor.h): since, and the figures.
  bool cpu_starved = false;
  int64_t cpu_since_unix_ms = 0;
  std::string cpu_evidence;
  // RPCs in flight on this node for over health.slow_ops_s (rpc/op_tracker.h's
  // find_slow_ops): since the oldest crossed it, and its evidence. Empty: none.
  std::optional<std::pair<int64_t, std::string>> slow_ops;
  // The probe mesh's rows (the MGS's: every node's) and their outlier marks; null: none.
  const std::vector<MeshRow>* mesh = nullptr;
  const std::vector<std::vector<MeshMark>>* mesh_marks = nullptr;
  // This node's routes and their gateways' states (Net::routes()).
  std::vector<RouteInfo> routes;
};

// How long before a certificate expires `pfsnet health` says so (SETTINGS).
inline constexpr int64_t kCertificateWarningDays = 30;

// Whether the MGS's table has `n` down (DEAD or SUSPECT) for `pfsnet health`: a node suspect
// on a report less than a second old, the MGS's own ping out to check it, counts as up --
// one node's word is not the MGS's verdict, and a live node answers within the second.
inline bool down_in_table(const StatusNode& n) { return n.state != NodeState::kUp && !n.verifying; }

// Every cause a problem can have, severest first: UNREACHABLE (the MGS could not be asked),
// DEAD, DOWN, PARTITION, SUSPECT, ROUTER, CPU, LOSSY, SLOW, MTU, THROTTLED, UNHEALTHY, SERVER,
// SLOW_OPS, SETTINGS. docs/health.md has a section for each (HealthCatalogueTest).
const std::vector<std::string>& problem_causes();

std::vector<Problem> find_problems(const ProblemInputs& in);
// Severest first (problem_causes()' order), then oldest first.
void sort_problems(std::vector<Problem>& v);

}  // namespace pfsnet
