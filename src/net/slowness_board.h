// SlownessBoard: health that sees slowness, for a whole node (net/slowness.h judges one
// subject). Once a second the caller hands it every path's figures -- the second's small
// RPCs (RpcStats::take_path_latency: latency, server execution), the path's bytes and the
// kernel's TCP totals -- and it keeps a SlownessTracker per peer NI:
//
//   peer NI   the sum over its paths: latency and execution averaged over the second's
//             small RPCs, TCP segments sent and retransmitted summed. Latency and execution
//             count only in a second in which the peer NI moved less than `quiet_bytes`:
//             behind the node's own bulk a small RPC waits in the socket, which is load,
//             not a slow link (a link too slow to carry quiet_bytes a second is judged
//             whatever its load). Its peers, for the comparison: the median of the peer
//             NIs of its network with a window of their own (recomputed every window).
//   local NI  degraded when at least two of the peer NIs it reached in the last window are
//             degraded for a network cause (SLOW, LOSSY) and they are more than half of
//             them: a fault near this node shows at every peer, one at a peer only there.
//             It takes the cause most of them have.
//   SERVER    a fact about the peer node, not about the path: reported like the others;
//             the caller gives it no penalty (another rail would not be faster).
//
// Pure logic on the figures and times the caller passes: no clock, no Net. Memory: one
// tracker (about 1-2 KiB) and a few counters per peer NI and path that ever had figures.
// Time per second: the paths that moved bytes and their peer NIs; every window, the
// network medians (all peer NIs); while some peer NI is degraded, the local NI rule (all
// paths). A server with 100,000 idle clients thus pays for the busy ones.
// Threads: none; the owner serialises calls.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/nid.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "net/slowness.h"

namespace pfsnet {

struct SlownessBoardOptions {
  SlownessOptions tracker;
  uint64_t quiet_bytes = 1 << 20;  // per second
};

// One path's figures at one second.
struct PathFigures {
  Nid local, peer;
  uint64_t rpcs = 0;                   // small RPCs completed this second
  double latency_ms = 0, exec_ms = 0;  // their sums
  uint64_t bytes = 0;                  // sent and received, since the path was created
  bool tcp = false;                    // the TCP totals were read this second
  uint64_t segs_out = 0, retrans = 0;  // TCP totals (never going down)
  double srtt_ms = 0, min_rtt_ms = 0;  // the kernel's RTT of its busiest connection (0: none)
  double queue_ms = 0;                 // the most queue in a fresh connection's RTT (net.h)
  std::vector<ConnFigures> conns;      // its open connections'
};

struct SlownessChange {
  Nid nid;
  bool local = false;                  // a local NI (else a peer NI)
  SlowCause cause = SlowCause::kNone;  // kNone: healthy again
  SlowCause was = SlowCause::kNone;    // the cause before
  std::string evidence;
  Duration lasted{0};  // how long the state before this change lasted
};

class SlownessBoard {
 public:
  explicit SlownessBoard(SlownessBoardOptions o = {}) : opts_(o) {}

  // One second at `now`: the figures of the paths wants() picked (one missing is idle).
  // Returns what changed, local NIs after peer NIs.
  std::vector<SlownessChange> second(const std::vector<PathFigures>& paths, TimePoint now);

  // Whether the path is worth sampling this second (its TCP totals: a system call per
  // connection): it moved bytes since the board last saw it, or its peer NI is degraded.
  // The board only ever looks at such paths: an idle one costs nothing.
  bool wants(const Nid& local, const Nid& peer, uint64_t bytes) const;

  // Peer NIs now degraded (the caller probes them: an avoided NI carries no traffic, and
  // without traffic it cannot recover).
  std::vector<Nid> degraded_peers() const;
  // A peer NI's tracker (null when it never had figures).
  const SlownessTracker* tracker(const Nid& peer) const;
  // A local NI's cause (kNone: not degraded).
  SlowCause local_cause(const Nid& local) const;

 private:
  struct PeerState;
  struct PathState {
    PeerState* peer = nullptr;  // its peer NI's (owned by peers_)
    uint64_t bytes = 0;
    bool have_tcp = false;
    uint64_t segs_out = 0, retrans = 0;
    std::unordered_map<uintptr_t, uint64_t> conn_lost;  // each open connection's, last second
    TimePoint last_active{};                            // bytes moved
    bool active_ever = false;
  };
  struct PeerState {
    SlownessTracker tracker;
    uint64_t segs_out = 0, retrans = 0;  // summed deltas of its paths: never going down
    uint64_t congestion = 0;             // of the retransmits, those on a connection with a queue
    explicit PeerState(const SlownessOptions& o) : tracker(o) {}
  };
  std::vector<SlownessChange> local_changes(TimePoint now);
  void update_medians(TimePoint now);

  SlownessBoardOptions opts_;
  // Hashed: wants() runs for every path every second.
  std::unordered_map<std::pair<Nid, Nid>, PathState> paths_;  // (local, peer)
  std::unordered_map<Nid, std::unique_ptr<PeerState>> peers_;
  std::map<Nid, SlowCause> locals_;     // degraded local NIs
  std::map<uint32_t, double> medians_;  // network (Nid::net) -> median window latency
  TimePoint medians_due_{};
  size_t degraded_ = 0;  // peer NIs degraded now
};

}  // namespace pfsnet
