// MeshService: the probe mesh's I/O shell in pfsnetd (probe/mesh.h is the pure part).
//
//   every node   serves MESH_PROBE (serve_mesh_probe, inline: 8 bytes, a NID, are a small
//                probe, answered with the MTU of that NID's interface; an empty payload a
//                write whose bulk is dropped; 4 bytes N ask for N bytes back, a read); probes
//                its targets on every path to them (local NI -> peer NI on the same
//                network, pinned, no resend): a small probe each `interval`, a write and
//                a read of `bulk_bytes` each `bulk_interval`, staggered over the interval
//                by a hash of the path so that probes do not come in bursts, at most one
//                probe of each kind in flight per path. Each outcome goes to the node's
//                RPC statistics under the label "mesh" (RpcStats::record_probe: the same
//                interval rings, `pfsnet diag rpc mesh`) and to the path's window, whose
//                cell is the node's row. Every report_interval it sends the row to the MGS
//                (MESH_SYNC); the reply names its targets.
//   the MGS      keeps the newest row of each node (MeshBoard; a row older than three
//                report intervals is dropped) and assigns targets from its table's live
//                nodes in name order (mesh_targets; the epoch is the wall clock over
//                rotate_interval), refreshed every 5 s; serves MESH_MATRIX pages.
//
// Threads: its round runs every 100 ms on the node's timer queue; handlers run on I/O
// threads; probe
// outcomes on I/O threads; state under one mutex. The service must outlive the probes it
// sends (it is destroyed after the engine is shut down).
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/config.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "membership/service.h"
#include "net/net.h"
#include "probe/mesh.h"
#include "rpc/node_part.h"
#include "rpc/rpc_engine.h"
#include "stats/rpc_stats.h"
#include "transport/timer_queue.h"

namespace pfsnet {

struct MeshOptions {
  bool enabled = true;
  std::string name;  // this node's
  size_t peers = 8;
  Duration interval = std::chrono::seconds(5);
  Duration bulk_interval = std::chrono::seconds(30);  // 0: no bulk probes
  size_t bulk_bytes = 128 << 10;
  int64_t rotate_interval_s = 600;
  Duration report_interval = std::chrono::seconds(15);
  double mgs_sync_rate = 500;  // the MGS: syncs per second it takes at most
  Duration window = std::chrono::seconds(90);
  Duration probe_timeout = std::chrono::seconds(10);
  size_t max_bulk = 2 << 20;            // what this node serves in a read
  std::map<Nid, uint32_t> speeds_mbit;  // net.speed_mbit where set (0 or absent: the kernel's)

  static MeshOptions from(const Config& cfg);
};

// MESH_PROBE on `engine`, inline: a small probe (mesh_mtu_ask: answered with the MTU of
// the probed NI's interface), an empty payload a write (its bulk is dropped), 4 bytes LE N
// ask for N bytes back (a read), at most `max_bulk`.
void serve_mesh_probe(RpcEngine& engine, size_t max_bulk);

// A local NI's link now: its speed (configured, else the kernel's; 0: not known) and the
// bytes it sent and received -- the kernel's counters of its interface, which count all
// traffic, unless the interface is loopback or not found (every address on it shares
// them): then `own_tx`/`own_rx`, pfsnet's own through the NI. A few system calls.
struct MeshNiNow {
  uint32_t speed_mbit = 0;
  uint64_t tx_bytes = 0, rx_bytes = 0;
};
MeshNiNow mesh_ni_now(const Nid& nid, uint32_t configured_mbit, uint64_t own_tx, uint64_t own_rx);

// The local end of a path now: its interface's MTU (0: not known), and whether the kernel
// sends to the peer straight out of that interface, with no gateway (the peer is on the
// NI's own link). A few system calls (getifaddrs, an ioctl, an rtnetlink route query).
struct MeshLinkEnd {
  uint32_t mtu = 0;
  bool on_link = false;
};
MeshLinkEnd mesh_link_end(const Nid& local, const Nid& peer);

class MeshService final : public NodePart {
 public:
  // Registers the handlers (MESH_SYNC and MESH_MATRIX only on the MGS): construct before
  // traffic starts. `stats` may be null. All must outlive the service.
  MeshService(MeshOptions o, Net& net, RpcEngine& rpc, RpcStats* stats,
              MembershipService& membership, Clock& clock);
  ~MeshService() override;

  const char* part_name() const override { return "mesh"; }
  // Rounds every 100 ms on `queue` (the node's) until stop(); nothing when disabled.
  Status start(TimerQueue& queue) override;
  void stop() override;
  // One round: the probes due, the sync with the MGS when due; on the MGS, the node list.
  void tick(TimePoint now);

  // This node's row now.
  MeshRow local_row();
  // Its view of path local -> peer now (mesh_path_view), or that it does not probe it: what
  // a slow RPC's network verdict is set against (RpcEngine::set_path_view, from start() to
  // stop()).
  std::string path_view(const Nid& local, const Nid& peer);
  // The rows the MGS holds (asked page by page, each within `timeout`, unless this node is
  // the MGS); the outliers are for the caller to mark.
  Result<MeshMatrix> matrix(Duration timeout);

  struct Counters {
    uint64_t probes = 0, lost = 0, bulk_bytes = 0;  // sent by this node
    uint64_t syncs = 0, sync_failures = 0;
    uint64_t epoch = 0;
    size_t targets = 0, paths = 0;
    size_t rows = 0;  // on the MGS: rows held
  };
  Counters counters() const;
  const MeshOptions& options() const { return opts_; }

 private:
  struct PathState {
    std::string to;
    Nid local, peer;
    MeshWindow window;
    TimePoint next_small{}, next_bulk{};
    bool small_out = false, bulk_out = false;
    uint32_t local_mtu = 0, peer_mtu = 0;  // the interfaces' at both ends, as last seen
    bool on_link = false;                  // the peer on the local NI's own link
  };
  using PathKey = std::pair<Nid, Nid>;
  struct NiState {
    explicit NiState(Duration window) : load(window) {}
    MeshNiLoad load;
    uint32_t speed_mbit = 0;
  };

  // A page of the MGS's rows (MESH_MATRIX).
  MeshMatrix matrix_page(const PageReq& req);
  // The MGS's answer to a sync: stores the row, names the targets.
  MeshSyncRep sync_locked(MeshSyncReq req, TimePoint now) REQUIRES(mu_);
  // The MGS's live nodes, from its table every 5 s.
  void refresh_nodes(TimePoint now);
  void set_targets(const std::vector<NodeEvent>& targets, uint64_t epoch, TimePoint now)
      REQUIRES(mu_);
  void send_sync(TimePoint now);
  // Every `interval`: the local NIs' speeds and byte counters.
  void sample_nis(TimePoint now);
  void probe_small(const PathKey& k, const Nid& local, const Nid& peer);
  void probe_bulk(const PathKey& k, const Nid& local, const Nid& peer);
  MeshRow row_locked(TimePoint now) REQUIRES(mu_);

  MeshOptions opts_;
  Net& net_;
  RpcEngine& rpc_;
  RpcStats* stats_;
  MembershipService& membership_;
  Clock& clock_;
  BulkData write_bulk_;  // a write probe's data

  mutable Mutex mu_;
  std::map<PathKey, PathState> paths_ GUARDED_BY(mu_);
  std::map<Nid, NiState> nis_ GUARDED_BY(mu_);
  TimePoint next_ni_sample_ GUARDED_BY(mu_){};
  std::vector<NodeEvent> targets_ GUARDED_BY(mu_);
  uint64_t epoch_ GUARDED_BY(mu_) = 0;
  TimePoint next_sync_ GUARDED_BY(mu_){};
  bool sync_out_ GUARDED_BY(mu_) = false;
  std::unique_ptr<MeshMgsCore> mgs_ PT_GUARDED_BY(mu_);  // on the MGS
  TimePoint next_refresh_ GUARDED_BY(mu_){};

  std::atomic<uint64_t> probes_{0}, lost_{0}, bulk_bytes_{0}, syncs_{0}, sync_failures_{0};
  Repeating ticker_;
};

}  // namespace pfsnet
