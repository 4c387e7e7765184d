// The probe mesh (Pingmesh-style, docs/architecture.md "Probing"): every node probes a few
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
//   MTUs        a small probe asks the MTU of the probed NI's interface (mesh_mtu_ask), so a
//               cell carries both ends' MTUs and whether the peer is on the local NI's
//               own link; mtu_outliers() names an NI whose MTU differs from the one most
//               NIs on its link have (TCP's MSS hides a mismatch from every other figure).
//   NI loads    each node's row also carries its NIs: the link's speed (configured, or the
//               kernel's) and the most each carried either way in one sample interval of
//               the window (MeshNiLoad).
//   outliers    mark_outliers(): a cell whose p50 is more than `factor` x the median p50
//               of the cells of its speed class (below) and at least `min_excess_ms` above
//               it, or whose loss exceeds `loss_ratio`, is marked with the reason;
//               THROTTLED below.
//   MeshBoard   the MGS's store: the newest row of each node, stamped; rows older than
//               `expiry` are dropped (a node that stopped reporting is not shown as fine).
//   MeshMgsCore the MGS's side: live nodes, a sync answered with targets, the board.
//
// Memory: a cell is about 90 bytes; the MGS holds one row per node, k x rails cells each
// (100,000 nodes at k = 8 and 2 rails: about 186 MiB by mesh_bench). Threads: none; owners
// serialise.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/clock.h>
#include <pfsnet/config.h>
#include <pfsnet/nid.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
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
  double min_excess_ms = 5.0;  // as health.slow_min_excess_ms: below it is a busy host
  double throttled_min_excess_ms = 10.0;
  double loss_ratio = 0.01;
  uint32_t min_sent = 5;          // loss is judged over at least this many probes
  size_t bulk_bytes = 128 << 10;  // a bulk probe's size (mesh.bulk_bytes)

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
//
// THROTTLED, per direction (write: the prober's NI sends, the peer's receives; read: back):
// a cell's best bulk figure v is judged against the median m of that direction's figures
// over the cells of its class -- the paths whose slower end has the same link speed (the
// rows' MeshNi; unknown speeds are a class of their own), so a cluster of 10 and 100 Gbit/s
// links is not a list of its slower paths. It is throttled when all three hold:
//   v x factor < m                   it carries a fraction of what its kind carries;
//   size/v - size/m >= throttled_min_excess_ms
//                                    and the difference is more than a busy host's delay:
//                                    a 128 KiB probe on a fast link is mostly scheduling,
//                                    and a host whose cores the load takes answers it ms late
//                                    (18-27 MiB/s against a median of 80-90, eight daemons
//                                    on two cores) -- a link that negotiated down to 100
//                                    Mbit/s or a shaper at 20 takes 10-50 ms more;
//   max(v, the sending NI's tx, the receiving NI's rx) x factor < m
//                                    and neither end carried more than that in the window:
//                                    a link busy with load leaves a probe what is over, but
//                                    has shown what it carries.
std::vector<std::vector<MeshMark>> mark_outliers(const std::vector<MeshRow>& rows,
                                                 const MeshOutlierRule& rule);

// MESH_PROBE's small probe: the payload is the probed NID (8 bytes, packed), the reply's
// payload the MTU of the interface that holds its address (4 bytes LE; 0: not known).
Buffer encode_mesh_mtu_ask(const Nid& probed);
// The probed NID, or nullopt when `b` is not an MTU ask (another MESH_PROBE form).
std::optional<Nid> decode_mesh_mtu_ask(std::span<const uint8_t> b);
Buffer encode_mesh_mtu_answer(uint32_t mtu);
// The MTU, or 0 when `b` is not an answer.
uint32_t decode_mesh_mtu_answer(std::span<const uint8_t> b);

// What the probe mesh says of one path, set beside a slow RPC's network verdict (issue 70
// item 3: the wire's share against the mesh's view of that path in the same seconds):
// "mesh on L -> P, last 90 s: p50 0.410 ms, p99 3.200 ms (10.7 x the median p50 0.300 ms of
// this node's probed paths), 0 of 120 probes lost". `median_p50_ms` 0: not known (left out).
std::string mesh_path_view(const MeshCell& c, double median_p50_ms, Duration window);

// An NI whose MTU is not the one its link's NIs have. A link is the NIs joined by cells
// whose peer is on the prober's own link (on_link) with both MTUs known; its usual MTU is
// the one more than half of its NIs have. On a link without one (two NIs that differ,
// say) every NI is named, `usual` 0: the probes cannot tell which end is wrong.
struct MtuOutlier {
  Nid nid;
  std::string node;
  uint32_t mtu = 0, usual = 0;
  size_t with_usual = 0, on_link = 0;  // NIs that have `usual`, NIs on the link
  std::vector<std::string> seen_by;    // the nodes whose cells show it, in name order
  bool operator==(const MtuOutlier&) const = default;
};
// An NI's MTU is its own node's figure (its cells' local_mtu) when that node has a row,
// else the one most cells give for it as their peer.
std::vector<MtuOutlier> mtu_outliers(const std::vector<MeshRow>& rows);

// The probing node's window on one path: the outcomes of its probes of the last `window`
// (at most kMaxSamples), from which its cell is made: p50 and p99 of the answered small
// probes, probes sent and lost, the best bulk throughput each way (what the path can carry:
// a throttled path never does better, a busy host only sometimes does worse; once the
// window has kMinBulkSamples of that direction).
class MeshWindow {
 public:
  static constexpr size_t kMaxSamples = 1024;
  // A direction's bulk figure needs this many of its probes in the window (0 before).
  static constexpr size_t kMinBulkSamples = 2;
  // The window's lost probes stand until this many small probes in a row were answered
  // after the last of them (the cell's `lost` is then 0: the outage is over).
  static constexpr size_t kAnsweredAfterLoss = 5;
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

// The most an NI carried each way between two consecutive samples of its byte counters
// within the window (MiB/s). Counters that went back (the interface was recreated) start
// over.
class MeshNiLoad {
 public:
  explicit MeshNiLoad(Duration window) : window_(window) {}
  void sample(TimePoint t, uint64_t tx_bytes, uint64_t rx_bytes);
  // {tx, rx} MiB/s: the peaks of the samples within the window of `now`; 0 before two.
  std::pair<double, double> peak(TimePoint now);

 private:
  struct Rate {
    TimePoint t;
    double tx, rx;
  };
  Duration window_;
  bool have_last_ = false;
  TimePoint last_t_{};
  uint64_t last_tx_ = 0, last_rx_ = 0;
  std::deque<Rate> rates_;
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
