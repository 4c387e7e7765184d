// The membership protocol (Lustre's scalable pinger, the scalable pinger): message types, their
// payloads and a small bounds-checked little-endian codec. Every node registers with the
// MGS and pings it on its period; the MGS notifies subscribers of state changes.
//
//   MGS_REGISTER  node -> MGS  name, roles, NIDs, instance  -> id, MGS instance
//   MGS_PING      node -> MGS  id, instance, heard-from NIDs,  -> status, generation, the
//                              NIDs whose role it asks          asked NIDs that are servers'
//   MGS_NOTIFY    MGS -> node  generation, state changes     -> (empty)
//   MGS_STATUS    any  -> MGS  offset, limit                  -> a page of the table (bulk)
//   MGS_REPORT    node -> MGS  id, instance, unreachable NIDs  -> status, generation
//   MGS_RELAY     MGS -> server  a notification, clients' NIDs -> those it did not reach
//   MESH_SYNC     node -> MGS  name, its probe-mesh row        -> status, epoch, next, targets
//   MESH_MATRIX   any  -> MGS  offset, limit (PageReq)        -> a page of the rows (bulk)
//   MGS_UPGRADE   any  -> MGS  check or commit, a level        -> the level, the nodes below
//
// Thread safety: plain values and pure functions.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rpc/msg_types.h"

namespace pfsnet {

// The message types (kMsgMgsRegister, kMsgMgsPing, kMsgMgsNotify, kMsgMgsStatus,
// kMsgMgsReport) are in
// rpc/msg_types.h with every other.

// Roles, as a bit set. kRoleRouter is not configured: a node with lnet.routing has it, so
// the MGS's table says which nodes route (a release before it ignores the bit).
inline constexpr uint8_t kRoleClient = 1, kRoleServer = 2, kRoleMgs = 4, kRoleRouter = 8;
// "client,server,router" from the bits; parse from config names ("client", "server", "mgs").
std::string roles_string(uint8_t roles);
uint8_t roles_from(const std::vector<std::string>& names);

enum class NodeState : uint8_t { kUp = 1, kSuspect = 2, kDead = 3 };
const char* node_state_name(NodeState s);

struct RegisterReq {
  std::string name;
  uint8_t roles = 0;
  std::vector<Nid> nids;
  uint64_t instance = 0;  // random per daemon start: a new value is a restart
  // The node was told it had been declared dead and has dropped what it held since (its
  // tokens, cached blocks, RPCs to servers): only then does the MGS take it back.
  bool after_eviction = false;
};

// A node's state as the MGS announces it.
struct NodeEvent {
  uint32_t id = 0;
  std::string name;
  uint8_t roles = 0;
  NodeState state = NodeState::kUp;
  std::vector<Nid> nids;
};

// Leadership (issue 36), on every MGS answer: with etcd, the leader's epoch (the leader
// key's create revision in etcd; 0 without etcd) and, from an MGS that does not lead, the
// leader it knows of (a packed NID; 0: none known -- no leader now, or etcd unreachable).
struct Leadership {
  uint64_t epoch = 0;
  bool not_leader = false;
  std::optional<Nid> leader;  // the MGS that leads, when this one does not and knows it
  bool operator==(const Leadership&) const = default;
};

struct RegisterRep {
  uint32_t id = 0;
  uint64_t mgs_instance = 0;
  uint64_t generation = 0;
  Leadership lead;  // not_leader: nothing else is set
  // The MGS declared this node (this instance) dead and it did not say it has dropped what
  // it held: not registered; it drops it and registers again with after_eviction.
  bool evicted = false;
  // The cluster's minimum release level (release_level.h); 0: not said. Appended only for
  // a node that announced its level in its handshake (an 8827b49 node refuses trailing
  // bytes); absent from an MGS of a release before levels.
  uint16_t cluster_level = 0;
};

struct PingReq {
  uint32_t id = 0;
  uint64_t instance = 0;
  std::vector<Nid> heard;  // servers: NIDs of clients heard this period
  // Clients: peers it talked to whose role it does not know (packed NIDs, at most
  // kMaxRoleAsks): the reply says which are servers' (issue 36: no node is sent the whole
  // server list -- at 2,000 servers that was 46 KB a registration).
  std::vector<Nid> ask;
};
inline constexpr size_t kMaxRoleAsks = 64;

// kUnknown: the MGS does not know this node (it restarted, or a new leader): register again.
// kEvicted: the MGS declared this node dead (issue 36): what it held is gone -- token
// managers dropped its tokens, servers refuse its I/O -- so it drops its own state of that
// (its tokens, cached blocks, RPCs under way) and only then registers again; until it does,
// nothing it says (pings, reports, servers' word of it) brings it back.
enum class PingStatus : uint8_t { kOk = 0, kUnknown = 1, kEvicted = 2 };
struct PingRep {
  PingStatus status = PingStatus::kOk;
  uint64_t generation = 0;
  uint64_t mgs_instance = 0;
  Leadership lead;             // not_leader: status and the rest are not the leader's
  std::vector<Nid> servers;    // of the ping's `ask`, the NIDs of servers
  uint16_t cluster_level = 0;  // as RegisterRep's
};

// A node tells the MGS of peers it cannot reach: their NIDs failed to connect or timed
// out (the health kind says which) and sent it nothing since. The MGS verifies each with
// its own ping before it believes it. The reply is a PingRep (kUnknown: register again).
struct Unreachable {
  Nid nid;
  HealthKind kind = HealthKind::kNone;
  bool operator==(const Unreachable&) const = default;
};
struct ReportReq {
  uint32_t id = 0;
  uint64_t instance = 0;
  std::vector<Unreachable> peers;
};
inline constexpr size_t kMaxReportPeers = 4096;

struct NotifyReq {
  uint64_t generation = 0;
  std::vector<NodeEvent> events;
  uint64_t epoch = 0;  // the sending leader's (0 without etcd): a node drops older ones
  // To servers: dead clients every live server has been told of (each refuses their I/O):
  // a token manager may now give the tokens they held to others (issue 36: never while a
  // data server that has not heard could still take a write under them).
  std::vector<NodeEvent> fenced;
};

// A notification for many clients at once (issue 36, item 5: a million clients): the MGS
// sends it to a server, which passes `notify` on to every NID of `targets` (MGS_NOTIFY,
// each with its own deadline) and answers with the positions in `targets` it did not
// reach. One message of the MGS's reaches up to notify_relay_fanout clients.
struct RelayReq {
  NotifyReq notify;
  std::vector<Nid> targets;  // one NID per client
};
struct RelayRep {
  std::vector<uint32_t> failed;  // indices into targets, ascending
};
inline constexpr size_t kMaxRelayTargets = 4096;

// One node of the MGS's table as the leader keeps it where the next leader finds it
// (issue 36, item 2): who it is and whether it is dead; the rest (when last heard) the
// next pings fill in. A chunk is the records of kTableChunkNodes consecutive ids.
struct TableRecord {
  NodeEvent node;  // id, name, roles, state (up or dead), NIDs
  uint64_t instance = 0;
};
inline constexpr uint32_t kTableChunkNodes = 1024;

// A page of a table the MGS holds: MGS_STATUS's nodes, MESH_MATRIX's rows.
struct PageReq {
  uint32_t offset = 0;
  uint32_t limit = 1000;
};
using StatusReq = PageReq;

// One node of the MGS's table. Times are the MGS's wall clock (ms since the epoch).
struct StatusNode {
  uint32_t id = 0;
  std::string name;
  uint8_t roles = 0;
  NodeState state = NodeState::kUp;
  std::vector<Nid> nids;
  int64_t last_heard_unix_ms = 0, registered_unix_ms = 0, last_change_unix_ms = 0;
  uint64_t last_heard_ago_ms = 0;  // at the time the MGS answered
  bool heard_by_report = false;    // last heard through a server's report, not a ping
  // Suspect on another node's report of it less than a second ago, the MGS's own ping out to
  // check it: one node's word, not yet the MGS's verdict (a live node answers well within
  // the second; one that does not is listed SUSPECT from then on, DEAD at the verdict).
  bool verifying = false;
  // The release the node named in its handshake with the MGS (wire version 2); "" for a
  // node of version 1, or where the MGS did not say. Not in MGS_STATUS (an 8827b49 node
  // decodes that to its last byte): MGS_RELEASES carries it.
  std::string release;
  bool operator==(const StatusNode&) const = default;
};

struct StatusCounters {
  uint64_t registers = 0, pings = 0, reported = 0, notifications_sent = 0;
  uint64_t notification_failures = 0, notifications_dropped = 0, events_delivered = 0;
  bool operator==(const StatusCounters&) const = default;
};

// The MGS's table, or the page [offset, offset + nodes.size()) of it that MGS_STATUS
// carries (at most kMaxStatusPage nodes).
struct StatusTable {
  Nid mgs;  // who answered; not on the wire (the receiver knows whom it asked)
  uint64_t generation = 0;
  uint32_t total = 0;  // nodes in the whole table
  uint32_t offset = 0;
  std::vector<StatusNode> nodes;
  StatusCounters counters;
  // Not on the wire: why the nodes' releases are not known (an MGS of a release before
  // MGS_RELEASES), empty when they are.
  std::string releases_error;
};
inline constexpr uint32_t kMaxStatusPage = 5000;

// MGS_RELEASES: the release each node of a page of the table named (StatusNode::release),
// by node id, in the table's order; a page as MGS_STATUS's, at most kMaxStatusPage.
struct NodeRelease {
  uint32_t id = 0;
  std::string release;  // at most kMaxReleaseBytes; "" when the node named none
  bool operator==(const NodeRelease&) const = default;
};
struct ReleasesPage {
  uint32_t total = 0, offset = 0;
  std::vector<NodeRelease> nodes;
};
inline constexpr size_t kMaxReleaseBytes = 64;  // as the handshake's release field

// MGS_UPGRADE (release_level.h): the cluster's minimum release level checked against the
// MGS's table, or raised to `level` (commit). A commit is refused while a node that is not
// dead is below the level (or its level is not known yet), unless `force`; a level is never
// lowered, nor raised above what the MGS's release speaks.
struct UpgradeReq {
  bool commit = false;
  uint16_t level = 0;  // 0: the highest the MGS's release speaks (LATEST)
  bool force = false;
  bool operator==(const UpgradeReq&) const = default;
};
// A node of the table as the level sees it.
struct NodeLevel {
  uint32_t id = 0;
  std::string name;
  NodeState state = NodeState::kUp;
  uint16_t level = 0;   // its release's; 0: not known (not heard from since the MGS started)
  std::string release;  // as its handshake named it; "" from a node of wire version 1
  bool operator==(const NodeLevel&) const = default;
};
struct UpgradeRep {
  uint16_t level = 1;      // the cluster's minimum release level (after a commit, the new one)
  uint16_t mgs_level = 0;  // the highest the MGS's release speaks
  uint16_t target = 0;     // the level checked or committed
  bool committed = false;  // this request raised the level (a commit to the level in force
                           // changes nothing and says false)
  std::string refusal;     // why a commit was refused (at most 255 bytes); "" otherwise
  uint32_t total = 0;      // nodes in the table
  uint32_t below = 0;      // of them, below `target` or not known, in any state
  std::vector<NodeLevel> nodes;  // the first kMaxStatusPage of those, by id
};

struct MeshCell {
  std::string to;  // the peer node's name
  Nid local, peer;
  uint32_t sent = 0, lost = 0;             // probes of the window (small and bulk)
  uint32_t rtt_count = 0;                  // small probes answered
  double p50_ms = 0, p99_ms = 0;           // small-probe RTT (0 when none answered)
  double write_mib_s = 0, read_mib_s = 0;  // bulk probes (0 when none)
  // The interfaces' MTUs at both ends (0: not known yet), and whether the peer's address is
  // on the local NI's own link (the kernel sends to it directly, no gateway): only then must
  // the two agree.
  uint32_t local_mtu = 0, peer_mtu = 0;
  bool on_link = false;
  bool operator==(const MeshCell&) const = default;
};

// One of the reporting node's NIs: its link's speed (the class its paths are compared
// within) and the most it carried each way in one interval of the window (what its link
// has shown it can carry, and how busy it is: a bulk probe through a busy NI measures
// what the load leaves over).
struct MeshNi {
  Nid nid;
  uint32_t speed_mbit = 0;  // 0: not known
  double tx_mib_s = 0, rx_mib_s = 0;
  bool operator==(const MeshNi&) const = default;
};
inline constexpr size_t kMaxMeshNis = 64;

struct MeshRow {
  std::string from;
  int64_t updated_unix_ms = 0;  // when the MGS received it (the MGS's wall clock)
  std::vector<MeshCell> cells;
  std::vector<MeshNi> nis;
  bool operator==(const MeshRow&) const = default;
};

// A node's probe-mesh row, sent to the MGS; the reply names the peers to probe next.
struct MeshSyncReq {
  std::string name;
  std::vector<MeshCell> cells;
  std::vector<MeshNi> nis;
};
inline constexpr size_t kMaxMeshCells = 4096;
struct MeshSyncRep {
  PingStatus status = PingStatus::kOk;  // kUnknown: not (yet) in the MGS's table
  uint64_t epoch = 0;
  uint32_t next_sync_ms = 0;  // when to sync again (the MGS keeps its load bounded)
  std::vector<NodeEvent> targets;
};
// The rows the MGS holds, or the page [offset, offset + rows.size()) of them.
struct MeshMatrix {
  Nid mgs;  // who answered; not on the wire
  uint64_t epoch = 0;
  uint32_t total = 0;
  uint32_t offset = 0;
  std::vector<MeshRow> rows;
};
inline constexpr uint32_t kMaxMeshPage = 1000;

// What a peer of wire version 1 may be sent (docs/wire_format.md, "Large NIDs"): the
// message without its large (IPv6) NIDs, which such a peer cannot decode. A node's NID list
// keeps its IPv4 NIDs (it may be left empty: a node that peer cannot reach); a NID of its
// own -- a mesh cell's path, an NI, a server asked about, a leader -- goes with its entry.
void drop_large_nids(std::vector<Nid>* v);
void for_version1(RegisterReq* m);
void for_version1(RegisterRep* m);
void for_version1(PingReq* m);
void for_version1(PingRep* m);
void for_version1(ReportReq* m);
void for_version1(NotifyReq* m);
void for_version1(StatusTable* m);
void for_version1(MeshSyncReq* m);
void for_version1(MeshSyncRep* m);
void for_version1(MeshMatrix* m);

Buffer encode(const RegisterReq& m);
Buffer encode(const RegisterRep& m);
Buffer encode(const PingReq& m);
Buffer encode(const PingRep& m);
Buffer encode(const ReportReq& m);
Buffer encode(const NotifyReq& m);
Buffer encode(const RelayReq& m);
Buffer encode(const RelayRep& m);
Buffer encode_table_chunk(const std::vector<TableRecord>& records);
Buffer encode(const PageReq& m);
Buffer encode(const StatusTable& m);
Buffer encode(const ReleasesPage& m);
Buffer encode(const UpgradeReq& m);
Buffer encode(const UpgradeRep& m);
Buffer encode(const MeshSyncReq& m);
Buffer encode(const MeshSyncRep& m);
Buffer encode(const MeshMatrix& m);
// Decoders refuse truncated input, trailing bytes and oversized counts (kProtocol).
Result<RegisterReq> decode_register_req(std::span<const uint8_t> b);
Result<RegisterRep> decode_register_rep(std::span<const uint8_t> b);
Result<PingReq> decode_ping_req(std::span<const uint8_t> b);
Result<PingRep> decode_ping_rep(std::span<const uint8_t> b);
Result<ReportReq> decode_report_req(std::span<const uint8_t> b);
Result<NotifyReq> decode_notify_req(std::span<const uint8_t> b);
Result<RelayReq> decode_relay_req(std::span<const uint8_t> b);
Result<RelayRep> decode_relay_rep(std::span<const uint8_t> b);
Result<std::vector<TableRecord>> decode_table_chunk(std::span<const uint8_t> b);
Result<PageReq> decode_page_req(std::span<const uint8_t> b);
Result<StatusTable> decode_status_rep(std::span<const uint8_t> b);
Result<ReleasesPage> decode_releases_rep(std::span<const uint8_t> b);
Result<UpgradeReq> decode_upgrade_req(std::span<const uint8_t> b);
Result<UpgradeRep> decode_upgrade_rep(std::span<const uint8_t> b);
Result<MeshSyncReq> decode_mesh_sync_req(std::span<const uint8_t> b);
Result<MeshSyncRep> decode_mesh_sync_rep(std::span<const uint8_t> b);
Result<MeshMatrix> decode_mesh_matrix(std::span<const uint8_t> b);

// Encoded size of an event, for batching notifications under the payload limit.
size_t encoded_size(const NodeEvent& e);

}  // namespace pfsnet
