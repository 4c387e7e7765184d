// The problem model of `pfsnet health` (issue 70 item 7: health in one module). A problem
// names what is faulty -- a node, a local NI, a peer NI, a server, a path, a network, the
// settings -- with its cause, since when, who sees it and the figures behind the call. A
// node's own findings (health/problems.h) travel to the MGS as these (probe/cluster_health.h:
// HEALTH_REPORT), and every consumer -- the CLI, /metrics, the dashboard -- shows the one list
// the rules (health/rules.h) make of them (health/view.h). Header-only: the wire codec below
// the module includes it.
#pragma once

#include <cstdint>
#include <string>

namespace pfsnet {

struct Problem {
  std::string kind;     // "node", "ni", "peer_ni", "server", "settings", "path", "network"
  std::string subject;  // the node's name, the NID, the peer the settings are about, or
                        // the network ("tcp1")
  std::string cause;    // DEAD SUSPECT DOWN PARTITION LOSSY SLOW MTU THROTTLED UNHEALTHY SERVER
                        // SLOW_OPS SETTINGS UNREACHABLE
  std::string seen_by;  // the node(s) whose view this is, ", "-separated
  int64_t since_unix_ms = 0;  // 0: not known
  std::string evidence;
  std::string code;  // SETTINGS: which (the tuning check's code, e.g. rpcs_below_bdp)
  // A mute hides it (probe/health_mutes.h; set by the view, never on the wire).
  bool muted = false;
  bool operator==(const Problem&) const = default;
};

}  // namespace pfsnet
