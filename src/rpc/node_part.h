// NodePart: a service of a node in one shape, opened, started and stopped by its NodeCore
// (rpc/node_core.h).
#pragma once

#include <pfsnet/status.h>

#include "transport/timer_queue.h"

namespace pfsnet {

// A service of a node (membership, the probe mesh, netverify, cluster health, tune, the
// block service, tokens, the I/O benchmark), in one shape: the core opens, starts and stops
// its parts in one order (NodeCore::add_part). What a part shows an operator -- its admin
// commands and metrics -- is rendered at the admin edge (admin/node_commands.h) from the
// part's typed accessors, so no service depends on JSON or on the admin layer.
// Threads: the core calls open/start/stop from its owner's thread.
class NodePart {
 public:
  virtual ~NodePart() = default;
  virtual const char* part_name() const = 0;
  // Before the NIs listen: what must serve from the first connection (a block target
  // open). An error stops the node's start.
  virtual Status open() { return Status::Ok(); }
  // Once they listen: its rounds on `queue`, the node's one timer queue -- no thread of its
  // own for timing.
  virtual Status start(TimerQueue& queue) {
    (void)queue;
    return Status::Ok();
  }
  // Before the core stops, in the reverse order of add_part; no round of it runs after it
  // returns. Called for a part whose open() succeeded, even if the node's start failed later.
  virtual void stop() = 0;
};

}  // namespace pfsnet
