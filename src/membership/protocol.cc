#include "membership/protocol.h"

#include <cmath>
#include <cstring>

#include "wire/byte_codec.h"

namespace pfsnet {
namespace {

constexpr size_t kMaxName = kMaxFieldString;
constexpr size_t kMaxNids = kMaxFieldNids;

class Writer : public ByteWriter {
 public:
  void cell(const MeshCell& c) {
    str(c.to);
    nid(c.local);
    nid(c.peer);
    u32(c.sent);
    u32(c.lost);
    u32(c.rtt_count);
    for (double v : {c.p50_ms, c.p99_ms, c.write_mib_s, c.read_mib_s}) f64(v);
    u32(c.local_mtu);
    u32(c.peer_mtu);
    u8(c.on_link ? 1 : 0);
  }
  void nis(const std::vector<MeshNi>& v) {
    size_t n = std::min(v.size(), kMaxMeshNis);
    u32(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) {
      nid(v[i].nid);
      u32(v[i].speed_mbit);
      f64(v[i].tx_mib_s);
      f64(v[i].rx_mib_s);
    }
  }
  void event(const NodeEvent& e) {
    u32(e.id);
    str(e.name);
    u8(e.roles);
    u8(static_cast<uint8_t>(e.state));
    nids(e.nids);
  }
  void lead(const Leadership& l) {
    u64(l.epoch);
    u8(l.not_leader ? 1 : 0);
    if (l.leader)
      nid(*l.leader);
    else
      u64(0);  // none known
  }
};

class Reader : public ByteReader {
 public:
  using ByteReader::ByteReader;
  NodeEvent event() {
    NodeEvent e;
    e.id = u32();
    e.name = str();
    e.roles = u8();
    uint8_t st = u8();
    if (st < 1 || st > 3) fail();
    e.state = static_cast<NodeState>(st);
    e.nids = nids();
    return e;
  }
  // The optional release level at a reply's end (absent: 0); false for a level of 0.
  bool cluster_level(uint16_t* level) {
    if (!ok() || done()) return true;
    *level = u16();
    return *level != 0 || !ok();
  }
  Leadership lead() {
    Leadership l;
    l.epoch = u64();
    uint8_t nl = u8();
    l.leader = nid_or_none();
    if (nl > 1) fail();
    l.not_leader = nl == 1;
    return l;
  }
  MeshCell cell() {
    MeshCell c;
    c.to = str();
    c.local = nid();
    c.peer = nid();
    c.sent = u32();
    c.lost = u32();
    c.rtt_count = u32();
    for (double* v : {&c.p50_ms, &c.p99_ms, &c.write_mib_s, &c.read_mib_s}) *v = f64();
    c.local_mtu = u32();
    c.peer_mtu = u32();
    uint8_t on_link = u8();
    if (c.lost > c.sent || on_link > 1) fail();
    c.on_link = on_link == 1;
    return c;
  }
  std::vector<MeshNi> mesh_nis() {
    std::vector<MeshNi> v;
    size_t n = count(28);  // NID, speed, two figures
    if (n > kMaxMeshNis) {
      fail();
      return v;
    }
    for (size_t i = 0; i < n && ok(); ++i) {
      MeshNi x;
      x.nid = nid();
      x.speed_mbit = u32();
      x.tx_mib_s = f64();
      x.rx_mib_s = f64();
      v.push_back(x);
    }
    return v;
  }
};

}  // namespace

std::string roles_string(uint8_t roles) {
  std::string s;
  auto add = [&](const char* n) { s += (s.empty() ? "" : ",") + std::string(n); };
  if (roles & kRoleMgs) add("mgs");
  if (roles & kRoleServer) add("server");
  if (roles & kRoleClient) add("client");
  if (roles & kRoleRouter) add("router");
  return s.empty() ? "-" : s;
}

uint8_t roles_from(const std::vector<std::string>& names) {
  uint8_t r = 0;
  for (const std::string& n : names)
    r |= n == "client" ? kRoleClient : n == "server" ? kRoleServer : n == "mgs" ? kRoleMgs : 0;
  return r;
}

const char* node_state_name(NodeState s) {
  switch (s) {
    case NodeState::kUp:
      return "up";
    case NodeState::kSuspect:
      return "suspect";
    case NodeState::kDead:
      return "dead";
  }
  return "?";
}

size_t encoded_size(const NodeEvent& e) {
  return 4 + 1 + std::min(e.name.size(), kMaxName) + 2 + 1 + 8 * std::min(e.nids.size(), kMaxNids);
}

void drop_large_nids(std::vector<Nid>* v) {
  std::erase_if(*v, [](const Nid& n) { return n.is_large(); });
}

namespace {
void drop_large(Leadership* l) {
  if (l->leader && l->leader->is_large()) l->leader.reset();
}
void drop_large(std::vector<NodeEvent>* events) {
  for (NodeEvent& e : *events) drop_large_nids(&e.nids);
}
void drop_large(std::vector<MeshCell>* cells, std::vector<MeshNi>* nis) {
  std::erase_if(*cells, [](const MeshCell& c) { return c.local.is_large() || c.peer.is_large(); });
  std::erase_if(*nis, [](const MeshNi& n) { return n.nid.is_large(); });
}
}  // namespace

void for_version1(RegisterReq* m) { drop_large_nids(&m->nids); }
void for_version1(RegisterRep* m) { drop_large(&m->lead); }
void for_version1(PingReq* m) {
  drop_large_nids(&m->heard);
  drop_large_nids(&m->ask);
}
void for_version1(PingRep* m) {
  drop_large(&m->lead);
  drop_large_nids(&m->servers);
}
void for_version1(ReportReq* m) {
  std::erase_if(m->peers, [](const Unreachable& u) { return u.nid.is_large(); });
}
void for_version1(NotifyReq* m) {
  drop_large(&m->events);
  drop_large(&m->fenced);
}
void for_version1(StatusTable* m) {
  for (StatusNode& n : m->nodes) drop_large_nids(&n.nids);
}
void for_version1(MeshSyncReq* m) { drop_large(&m->cells, &m->nis); }
void for_version1(MeshSyncRep* m) { drop_large(&m->targets); }
void for_version1(MeshMatrix* m) {
  for (MeshRow& r : m->rows) drop_large(&r.cells, &r.nis);
}

Buffer encode(const RegisterReq& m) {
  Writer w;
  w.str(m.name);
  w.u8(m.roles);
  w.nids(m.nids);
  w.u64(m.instance);
  w.u8(m.after_eviction ? 1 : 0);
  return w.take();
}

Buffer encode(const RegisterRep& m) {
  Writer w;
  w.u32(m.id);
  w.u64(m.mgs_instance);
  w.u64(m.generation);
  w.lead(m.lead);
  w.u8(m.evicted ? 1 : 0);
  if (m.cluster_level) w.u16(m.cluster_level);
  return w.take();
}

Buffer encode(const PingReq& m) {
  Writer w;
  w.u32(m.id);
  w.u64(m.instance);
  w.u32(static_cast<uint32_t>(m.heard.size()));
  for (const Nid& n : m.heard) w.nid(n);
  w.u32(static_cast<uint32_t>(m.ask.size()));
  for (const Nid& n : m.ask) w.nid(n);
  return w.take();
}

Buffer encode(const PingRep& m) {
  Writer w;
  w.u8(static_cast<uint8_t>(m.status));
  w.u64(m.generation);
  w.u64(m.mgs_instance);
  w.lead(m.lead);
  w.u32(static_cast<uint32_t>(m.servers.size()));
  for (const Nid& n : m.servers) w.nid(n);
  if (m.cluster_level) w.u16(m.cluster_level);
  return w.take();
}

Buffer encode(const ReportReq& m) {
  Writer w;
  w.u32(m.id);
  w.u64(m.instance);
  w.u32(static_cast<uint32_t>(m.peers.size()));
  for (const Unreachable& u : m.peers) {
    w.nid(u.nid);
    w.u8(static_cast<uint8_t>(u.kind));
  }
  return w.take();
}

namespace {
void write_notify(Writer& w, const NotifyReq& m) {
  w.u64(m.generation);
  w.u32(static_cast<uint32_t>(m.events.size()));
  for (const NodeEvent& e : m.events) w.event(e);
  w.u64(m.epoch);
  w.u32(static_cast<uint32_t>(m.fenced.size()));
  for (const NodeEvent& e : m.fenced) w.event(e);
}
}  // namespace

Buffer encode(const NotifyReq& m) {
  Writer w;
  write_notify(w, m);
  return w.take();
}

Buffer encode(const RelayReq& m) {
  Writer w;
  write_notify(w, m.notify);
  w.u32(static_cast<uint32_t>(m.targets.size()));
  for (const Nid& n : m.targets) w.nid(n);
  return w.take();
}

Buffer encode(const RelayRep& m) {
  Writer w;
  w.u32(static_cast<uint32_t>(m.failed.size()));
  for (uint32_t i : m.failed) w.u32(i);
  return w.take();
}

Buffer encode(const PageReq& m) {
  Writer w;
  w.u32(m.offset);
  w.u32(m.limit);
  return w.take();
}

Buffer encode(const StatusTable& m) {
  Writer w;
  w.u64(m.generation);
  w.u32(m.total);
  w.u32(m.offset);
  const StatusCounters& c = m.counters;
  for (uint64_t v : {c.registers, c.pings, c.reported, c.notifications_sent,
                     c.notification_failures, c.notifications_dropped, c.events_delivered})
    w.u64(v);
  size_t n = std::min<size_t>(m.nodes.size(), kMaxStatusPage);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    const StatusNode& e = m.nodes[i];
    w.event({e.id, e.name, e.roles, e.state, e.nids});
    w.u64(static_cast<uint64_t>(e.last_heard_unix_ms));
    w.u64(static_cast<uint64_t>(e.registered_unix_ms));
    w.u64(static_cast<uint64_t>(e.last_change_unix_ms));
    w.u64(e.last_heard_ago_ms);
    w.u8((e.heard_by_report ? 1 : 0) | (e.verifying ? 2 : 0));
  }
  return w.take();
}

Buffer encode(const ReleasesPage& m) {
  Writer w;
  w.u32(m.total);
  w.u32(m.offset);
  size_t n = std::min<size_t>(m.nodes.size(), kMaxStatusPage);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    w.u32(m.nodes[i].id);
    w.str(m.nodes[i].release.substr(0, kMaxReleaseBytes));
  }
  return w.take();
}

Buffer encode(const MeshSyncReq& m) {
  Writer w;
  w.str(m.name);
  size_t n = std::min(m.cells.size(), kMaxMeshCells);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) w.cell(m.cells[i]);
  w.nis(m.nis);
  return w.take();
}

Buffer encode(const MeshSyncRep& m) {
  Writer w;
  w.u8(static_cast<uint8_t>(m.status));
  w.u64(m.epoch);
  w.u32(m.next_sync_ms);
  size_t n = std::min(m.targets.size(), kMaxMeshCells);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) w.event(m.targets[i]);
  return w.take();
}

Buffer encode(const MeshMatrix& m) {
  Writer w;
  w.u64(m.epoch);
  w.u32(m.total);
  w.u32(m.offset);
  size_t n = std::min<size_t>(m.rows.size(), kMaxMeshPage);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    const MeshRow& r = m.rows[i];
    w.str(r.from);
    w.u64(static_cast<uint64_t>(r.updated_unix_ms));
    size_t c = std::min(r.cells.size(), kMaxMeshCells);
    w.u32(static_cast<uint32_t>(c));
    for (size_t j = 0; j < c; ++j) w.cell(r.cells[j]);
    w.nis(r.nis);
  }
  return w.take();
}

Result<RegisterReq> decode_register_req(std::span<const uint8_t> b) {
  Reader r(b);
  RegisterReq m;
  m.name = r.str();
  m.roles = r.u8();
  m.nids = r.nids();
  m.instance = r.u64();
  uint8_t after = r.u8();
  if (r.ok() && (m.name.empty() || m.nids.empty()))
    return Status(Code::kProtocol, "MGS_REGISTER without a name or NIDs");
  if (r.ok() && after > 1) return Status(Code::kProtocol, "MGS_REGISTER: bad eviction flag");
  m.after_eviction = after == 1;
  return finish_decode(r, std::move(m), "MGS_REGISTER");
}

Result<RegisterRep> decode_register_rep(std::span<const uint8_t> b) {
  Reader r(b);
  RegisterRep m;
  m.id = r.u32();
  m.mgs_instance = r.u64();
  m.generation = r.u64();
  m.lead = r.lead();
  uint8_t evicted = r.u8();
  if (r.ok() && evicted > 1)
    return Status(Code::kProtocol, "MGS_REGISTER reply: bad eviction flag");
  m.evicted = evicted == 1;
  if (!r.cluster_level(&m.cluster_level))
    return Status(Code::kProtocol, "MGS_REGISTER reply: release level 0");
  return finish_decode(r, std::move(m), "MGS_REGISTER reply");
}

Result<PingReq> decode_ping_req(std::span<const uint8_t> b) {
  Reader r(b);
  PingReq m;
  m.id = r.u32();
  m.instance = r.u64();
  size_t n = r.count(8);
  m.heard.reserve(n);
  for (size_t i = 0; i < n && r.ok(); ++i) m.heard.push_back(r.nid());
  size_t asks = r.count(8);
  if (asks > kMaxRoleAsks) return Status(Code::kProtocol, "MGS_PING asks of too many NIDs");
  for (size_t i = 0; i < asks && r.ok(); ++i) m.ask.push_back(r.nid());
  return finish_decode(r, std::move(m), "MGS_PING");
}

Result<PingRep> decode_ping_rep(std::span<const uint8_t> b) {
  Reader r(b);
  PingRep m;
  uint8_t st = r.u8();
  if (st > 2) return Status(Code::kProtocol, "MGS_PING reply with an unknown status");
  m.status = static_cast<PingStatus>(st);
  m.generation = r.u64();
  m.mgs_instance = r.u64();
  m.lead = r.lead();
  size_t n = r.count(8);
  if (n > kMaxRoleAsks) return Status(Code::kProtocol, "MGS_PING reply names too many servers");
  for (size_t i = 0; i < n && r.ok(); ++i) m.servers.push_back(r.nid());
  if (!r.cluster_level(&m.cluster_level))
    return Status(Code::kProtocol, "MGS_PING reply: release level 0");
  return finish_decode(r, std::move(m), "MGS_PING reply");
}

Result<ReportReq> decode_report_req(std::span<const uint8_t> b) {
  Reader r(b);
  ReportReq m;
  m.id = r.u32();
  m.instance = r.u64();
  size_t n = r.count(9);
  if (n > kMaxReportPeers) return Status(Code::kProtocol, "MGS_REPORT names too many peers");
  m.peers.reserve(n);
  for (size_t i = 0; i < n && r.ok(); ++i) {
    Unreachable u;
    u.nid = r.nid();
    uint8_t k = r.u8();
    if (k >= kNumHealthKinds) return Status(Code::kProtocol, "MGS_REPORT with an unknown kind");
    u.kind = static_cast<HealthKind>(k);
    m.peers.push_back(u);
  }
  return finish_decode(r, std::move(m), "MGS_REPORT");
}

Buffer encode_table_chunk(const std::vector<TableRecord>& records) {
  Writer w;
  w.u32(static_cast<uint32_t>(records.size()));
  for (const TableRecord& t : records) {
    w.event(t.node);
    w.u64(t.instance);
  }
  return w.take();
}

Result<std::vector<TableRecord>> decode_table_chunk(std::span<const uint8_t> b) {
  Reader r(b);
  std::vector<TableRecord> v;
  size_t n = r.count(18);
  for (size_t i = 0; i < n && r.ok(); ++i) {
    TableRecord t;
    t.node = r.event();
    t.instance = r.u64();
    if (r.ok() && (t.node.name.empty() || t.node.nids.empty())) r.fail();
    v.push_back(std::move(t));
  }
  return finish_decode(r, std::move(v), "MGS table chunk");
}

namespace {
NotifyReq read_notify(Reader& r) {
  NotifyReq m;
  m.generation = r.u64();
  size_t n = r.count(9);
  for (size_t i = 0; i < n && r.ok(); ++i) m.events.push_back(r.event());
  m.epoch = r.u64();
  size_t f = r.count(9);
  for (size_t i = 0; i < f && r.ok(); ++i) m.fenced.push_back(r.event());
  return m;
}
}  // namespace

Result<NotifyReq> decode_notify_req(std::span<const uint8_t> b) {
  Reader r(b);
  NotifyReq m = read_notify(r);
  return finish_decode(r, std::move(m), "MGS_NOTIFY");
}

Result<RelayReq> decode_relay_req(std::span<const uint8_t> b) {
  Reader r(b);
  RelayReq m;
  m.notify = read_notify(r);
  size_t n = r.count(8);
  if (n > kMaxRelayTargets) return Status(Code::kProtocol, "MGS_RELAY names too many targets");
  m.targets.reserve(n);
  for (size_t i = 0; i < n && r.ok(); ++i) m.targets.push_back(r.nid());
  if (r.ok() && m.targets.empty()) return Status(Code::kProtocol, "MGS_RELAY without targets");
  return finish_decode(r, std::move(m), "MGS_RELAY");
}

Result<RelayRep> decode_relay_rep(std::span<const uint8_t> b) {
  Reader r(b);
  RelayRep m;
  size_t n = r.count(4);
  for (size_t i = 0; i < n && r.ok(); ++i) {
    uint32_t k = r.u32();
    if (r.ok() && !m.failed.empty() && k <= m.failed.back())
      return Status(Code::kProtocol, "MGS_RELAY reply: failed targets out of order");
    m.failed.push_back(k);
  }
  return finish_decode(r, std::move(m), "MGS_RELAY reply");
}

Result<PageReq> decode_page_req(std::span<const uint8_t> b) {
  Reader r(b);
  PageReq m;
  m.offset = r.u32();
  m.limit = r.u32();
  return finish_decode(r, m, "page request");
}

Result<StatusTable> decode_status_rep(std::span<const uint8_t> b) {
  Reader r(b);
  StatusTable m;
  m.generation = r.u64();
  m.total = r.u32();
  m.offset = r.u32();
  StatusCounters& c = m.counters;
  for (uint64_t* v : {&c.registers, &c.pings, &c.reported, &c.notifications_sent,
                      &c.notification_failures, &c.notifications_dropped, &c.events_delivered})
    *v = r.u64();
  // id, name, roles, state, NID count, 4 times and a flag: at least 4+1+1+1+1+32+1 bytes.
  size_t n = r.count(41);
  if (n > kMaxStatusPage) return Status(Code::kProtocol, "MGS_STATUS reply: page too large");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    NodeEvent e = r.event();
    StatusNode s{e.id, std::move(e.name), e.roles, e.state, std::move(e.nids)};
    s.last_heard_unix_ms = static_cast<int64_t>(r.u64());
    s.registered_unix_ms = static_cast<int64_t>(r.u64());
    s.last_change_unix_ms = static_cast<int64_t>(r.u64());
    s.last_heard_ago_ms = r.u64();
    uint8_t f = r.u8();
    if (f > 3) return Status(Code::kProtocol, "MGS_STATUS reply: bad flag");
    s.heard_by_report = (f & 1) != 0;
    s.verifying = (f & 2) != 0;
    m.nodes.push_back(std::move(s));
  }
  return finish_decode(r, std::move(m), "MGS_STATUS reply");
}

Buffer encode(const UpgradeReq& m) {
  Writer w;
  w.u8(m.commit ? 1 : 0);
  w.u16(m.level);
  w.u8(m.force ? 1 : 0);
  return w.take();
}

Result<UpgradeReq> decode_upgrade_req(std::span<const uint8_t> b) {
  Reader r(b);
  UpgradeReq m;
  uint8_t commit = r.u8();
  m.level = r.u16();
  uint8_t force = r.u8();
  if (r.ok() && (commit > 1 || force > 1)) return Status(Code::kProtocol, "MGS_UPGRADE: bad flag");
  m.commit = commit == 1;
  m.force = force == 1;
  return finish_decode(r, std::move(m), "MGS_UPGRADE");
}

Buffer encode(const UpgradeRep& m) {
  Writer w;
  w.u16(m.level);
  w.u16(m.mgs_level);
  w.u16(m.target);
  w.u8(m.committed ? 1 : 0);
  w.str(m.refusal);  // cut at 255 bytes
  w.u32(m.total);
  w.u32(m.below);
  size_t n = std::min<size_t>(m.nodes.size(), kMaxStatusPage);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    const NodeLevel& e = m.nodes[i];
    w.u32(e.id);
    w.str(e.name);
    w.u8(static_cast<uint8_t>(e.state));
    w.u16(e.level);
    w.str(e.release.substr(0, kMaxReleaseBytes));
  }
  return w.take();
}

Result<UpgradeRep> decode_upgrade_rep(std::span<const uint8_t> b) {
  Reader r(b);
  UpgradeRep m;
  m.level = r.u16();
  m.mgs_level = r.u16();
  m.target = r.u16();
  uint8_t committed = r.u8();
  if (r.ok() && (committed > 1 || m.level == 0))
    return Status(Code::kProtocol, "MGS_UPGRADE reply: bad level or flag");
  m.committed = committed == 1;
  m.refusal = r.str();
  m.total = r.u32();
  m.below = r.u32();
  size_t n = r.count(9);  // id, two lengths, state, level
  if (n > kMaxStatusPage || n > m.below)
    return Status(Code::kProtocol, "MGS_UPGRADE reply: too many nodes");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    NodeLevel e;
    e.id = r.u32();
    e.name = r.str();
    uint8_t st = r.u8();
    if (st < 1 || st > 3) return Status(Code::kProtocol, "MGS_UPGRADE reply: bad node state");
    e.state = static_cast<NodeState>(st);
    e.level = r.u16();
    e.release = r.str();
    if (e.release.size() > kMaxReleaseBytes)
      return Status(Code::kProtocol, "MGS_UPGRADE reply: a release over 64 bytes");
    m.nodes.push_back(std::move(e));
  }
  return finish_decode(r, std::move(m), "MGS_UPGRADE reply");
}

Result<ReleasesPage> decode_releases_rep(std::span<const uint8_t> b) {
  Reader r(b);
  ReleasesPage m;
  m.total = r.u32();
  m.offset = r.u32();
  size_t n = r.count(5);  // an id and a length byte at least
  if (n > kMaxStatusPage) return Status(Code::kProtocol, "MGS_RELEASES reply: page too large");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    NodeRelease e;
    e.id = r.u32();
    e.release = r.str();
    if (e.release.size() > kMaxReleaseBytes)
      return Status(Code::kProtocol, "MGS_RELEASES reply: a release over 64 bytes");
    for (char ch : e.release)
      if (ch < 0x20 || ch > 0x7e)
        return Status(Code::kProtocol, "MGS_RELEASES reply: a release not printable");
    m.nodes.push_back(std::move(e));
  }
  return finish_decode(r, std::move(m), "MGS_RELEASES reply");
}

// A cell: name length, 2 NIDs, 3 counts, 4 figures: at least 1+16+12+32 bytes.
constexpr size_t kMinCellBytes = 61;

Result<MeshSyncReq> decode_mesh_sync_req(std::span<const uint8_t> b) {
  Reader r(b);
  MeshSyncReq m;
  m.name = r.str();
  size_t n = r.count(kMinCellBytes);
  if (n > kMaxMeshCells) return Status(Code::kProtocol, "MESH_SYNC: too many cells");
  for (size_t i = 0; i < n && r.ok(); ++i) m.cells.push_back(r.cell());
  if (r.ok()) m.nis = r.mesh_nis();
  if (r.ok() && m.name.empty()) return Status(Code::kProtocol, "MESH_SYNC: no node name");
  return finish_decode(r, std::move(m), "MESH_SYNC");
}

Result<MeshSyncRep> decode_mesh_sync_rep(std::span<const uint8_t> b) {
  Reader r(b);
  MeshSyncRep m;
  uint8_t st = r.u8();
  if (st > 1) return Status(Code::kProtocol, "MESH_SYNC reply: bad status");
  m.status = static_cast<PingStatus>(st);
  m.epoch = r.u64();
  m.next_sync_ms = r.u32();
  size_t n = r.count(12);  // id, name length, roles, state, NID count: at least 8 bytes
  if (n > kMaxMeshCells) return Status(Code::kProtocol, "MESH_SYNC reply: too many targets");
  for (size_t i = 0; i < n && r.ok(); ++i) m.targets.push_back(r.event());
  return finish_decode(r, std::move(m), "MESH_SYNC reply");
}

Result<MeshMatrix> decode_mesh_matrix(std::span<const uint8_t> b) {
  Reader r(b);
  MeshMatrix m;
  m.epoch = r.u64();
  m.total = r.u32();
  m.offset = r.u32();
  size_t n = r.count(17);  // name length, time, cell count, NI count
  if (n > kMaxMeshPage) return Status(Code::kProtocol, "MESH_MATRIX reply: page too large");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    MeshRow row;
    row.from = r.str();
    row.updated_unix_ms = static_cast<int64_t>(r.u64());
    size_t c = r.count(kMinCellBytes);
    if (c > kMaxMeshCells) return Status(Code::kProtocol, "MESH_MATRIX reply: too many cells");
    for (size_t j = 0; j < c && r.ok(); ++j) row.cells.push_back(r.cell());
    if (r.ok()) row.nis = r.mesh_nis();
    m.rows.push_back(std::move(row));
  }
  return finish_decode(r, std::move(m), "MESH_MATRIX reply");
}

}  // namespace pfsnet
