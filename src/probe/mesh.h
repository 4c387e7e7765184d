// The probe mesh (Pingmesh-style, ARCHITECTURE.md "Probing"): every node probes a few
// peers on every path to them, all the time and cheaply, so that figures between nodes
// exist when no application talks, and the MGS gathers every node's row so that one
// command shows the whole cluster. This header is the pure part:
//
//   assignment  mesh_targets(): node i of n (the MGS's live nodes in name order) probes
//               min(k, n-1) others at offsets spread over the ring and rotated by the
//               epoch: a circulant graph, so every node probes exactly min(k, n-1) peers
//               and is probed by exactly as many, and each rotation (mesh.rotate_interval)
//               brings new pairs until every pair has been seen.
//   cells       one per path a node probes (local NI -> peer NI): small-probe RTT p50 and
//               p99, probes sent and lost, and the bulk probes' best throughput per
//               direction (write: this node to the peer; read: back), over the node's window.
//   outliers    mark_outliers(): a cell whose p50 is more than `factor` x the median p50
//               of all cells and at least `min_excess_ms` above it, whose loss exceeds
//               `loss_ratio`, or whose bulk throughput is below the median's 1/`factor`
//               in either direction, is marked with the reason.
//   MeshBoard   the MGS's store: the newest row of each node, stamped; rows older than
//               `expiry` are dropped (a node that stopped reporting is not shown as fine).
//   MeshMgsCore the MGS's side: live nodes, a sync answered with targets, the board.
//
// Memory: a cell is about 80 bytes; the MGS holds one row per node, k x rails cells each
// (100,000 nodes at k = 8 and 2 rails: about 128 MB). Threads: none; owners serialise.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/config.h>
#include <pfsnet/nid.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "membership/protocol.h"  // MeshCell, MeshRow

namespace pfsnet {

// The nodes node `self` of `n` probes (indices into the same name-ordered list).
// REQUIRES: self < n. Empty when n < 2 or k == 0.
std::vector<size_t> mesh_targets(size_t n, size_t self, size_t k, uint64_t epoch);

struct MeshOutlierRule {
  double factor = 3.0;
  double min_excess_ms = 1.0;
  double loss_ratio = 0.01;
  uint32_t min_sent = 5;  // loss is judged over at least this many probes

  static MeshOutlierRule from(const Config& cfg);
};

// Why a cell stands out: SLOW (its p50), LOSSY (probes lost), THROTTLED (bulk
// throughput); none when it does not.
struct MeshMark {
  bool slow = false, lossy = false, throttled = false;
  std::string reason;  // e.g. "p50 4.210 ms > 3 x median 0.110 ms"
  bool any() const { return slow || lossy || throttled; }
};
// Marks for every cell of `rows`, in the same order (rows, then cells).
std::vector<std::vector<MeshMark>> mark_outliers(const std::vector<MeshRow>& rows,
                                                 const MeshOutlierRule& rule);

// The probing node's window on one path: the outcomes of its probes of the last `window`
// (at most kMaxSamples), from which its cell is made: p50 and p99 of the answered small
// probes, probes sent and lost, the best bulk throughput each way (what the path can carry:
// a throttled path never does better, a busy host only sometimes does worse).
class MeshWindow {
 public:
  static constexpr size_t kMaxSamples = 1024;
  explicit MeshWindow(Duration window) : window_(window) {}

  void rtt(TimePoint t, double ms) { add(t, Kind::kRtt, ms); }
  void bulk(TimePoint t, bool write, double mib_s) {
    add(t, write ? Kind::kWrite : Kind::kRead, mib_s);
  }
  void lost(TimePoint t) { add(t, Kind::kLost, 0); }
  // The cell of the samples within the window of `now` (older ones are dropped); `to`,
  // `local` and `peer` are left to the caller.
  MeshCell cell(TimePoint now);

 private:
  enum class Kind : uint8_t { kRtt, kWrite, kRead, kLost };
  struct Sample {
    TimePoint t;
    Kind kind;
    double v;
  };
  void add(TimePoint t, Kind k, double v);
  Duration window_;
  std::deque<Sample> samples_;
};

class MeshBoard {
 public:
  explicit MeshBoard(Duration expiry) : expiry_(expiry) {}
  void set_expiry(Duration expiry) { expiry_ = expiry; }
  // `from`'s newest row, received at `now` (`wall_ms`: the same moment on the wall clock).
  void update(MeshRow row, TimePoint now, int64_t wall_ms);
  // Rows received within `expiry` of `now`, in name order; older ones are dropped.
  std::vector<MeshRow> rows(TimePoint now);
  size_t size() const { return rows_.size(); }

 private:
  struct Entry {
    MeshRow row;
    TimePoint at;
  };
  Duration expiry_;
  std::map<std::string, Entry> rows_;
};

// The MGS's side of the mesh as a pure core: the live nodes (set from its table), each
// node's sync answered with its targets, the rows kept. Time is what the caller passes.
class MeshMgsCore {
 public:
  // Each node syncs every `report_interval`, or as much less often as keeps the syncs of
  // all live nodes under `max_syncs_per_s`; a row not renewed within three such
  // intervals is dropped.
  MeshMgsCore(size_t peers, int64_t rotate_interval_s, Duration report_interval,
              double max_syncs_per_s)
      : peers_(peers),
        rotate_s_(std::max<int64_t>(rotate_interval_s, 1)),
        report_(report_interval),
        max_rate_(std::max(max_syncs_per_s, 1e-3)),
        board_(3 * report_interval) {}
  // The live nodes (any order; dead ones left out by the caller).
  void set_nodes(std::vector<NodeEvent> live);
  bool knows(const std::string& name) const { return index_.count(name) != 0; }
  // A node's row and its targets: kUnknown when it is not among the live nodes.
  MeshSyncRep sync(MeshSyncReq req, TimePoint now, int64_t wall_ms);
  std::vector<MeshRow> rows(TimePoint now) { return board_.rows(now); }
  size_t row_count() const { return board_.size(); }
  uint64_t epoch(int64_t wall_ms) const {
    return static_cast<uint64_t>(wall_ms / 1000 / rotate_s_);
  }
  // The interval each node syncs at now.
  Duration sync_interval() const;

 private:
  size_t peers_;
  int64_t rotate_s_;
  Duration report_;
  double max_rate_;
  MeshBoard board_;
  std::vector<NodeEvent> live_;  // in name order
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace pfsnet
