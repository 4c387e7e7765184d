// Fuzz target: the membership protocol's decoders (membership/protocol.h) -- every message
// a node or the MGS takes from a peer. The first byte picks the decoder; whatever the rest,
// it decodes or fails cleanly, and what decodes re-encodes canonically (fuzz.h).
#include "fuzz.h"
#include "membership/protocol.h"
#include "membership/release_level.h"

using namespace pfsnet;

namespace {

const auto kEnc = [](const auto& m) { return encode(m); };

template <class Decode>
void one(Decode decode, std::span<const uint8_t> in) {
  fuzz::roundtrip(decode(in), kEnc, decode);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::span<const uint8_t> in(data + 1, size - 1);
  switch (data[0] % 17) {
    case 0:
      one(decode_register_req, in);
      break;
    case 1:
      one(decode_register_rep, in);
      break;
    case 2:
      one(decode_ping_req, in);
      break;
    case 3:
      one(decode_ping_rep, in);
      break;
    case 4:
      one(decode_report_req, in);
      break;
    case 5:
      one(decode_notify_req, in);
      break;
    case 6:
      one(decode_page_req, in);
      break;
    case 7:  // StatusTable's `mgs` is not on the wire: the bytes compare what is
      one(decode_status_rep, in);
      break;
    case 8:
      one(decode_mesh_sync_req, in);
      break;
    case 9:
      one(decode_mesh_sync_rep, in);
      break;
    case 10:  // MeshMatrix's `mgs` likewise
      one(decode_mesh_matrix, in);
      break;
    case 11:
      one(decode_relay_req, in);
      break;
    case 12:
      one(decode_relay_rep, in);
      break;
    case 13:
      one(decode_releases_rep, in);
      break;
    case 14:
      one(decode_upgrade_req, in);
      break;
    case 15:
      one(decode_upgrade_rep, in);
      break;
    case 16:  // the MGS's release level record (a file, or etcd's value)
      fuzz::roundtrip(
          decode_level_record(
              std::string_view(reinterpret_cast<const char*>(in.data()), in.size())),
          [](const LevelRecord& r) {
            return Buffer::copy_of(std::string_view(encode_level_record(r)));
          },
          [](std::span<const uint8_t> b) {
            return decode_level_record(
                std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
          });
      break;
  }
  return 0;
}

namespace pfsnet::fuzz {

std::vector<std::vector<uint8_t>> fuzz_seeds() {
  Nid a = *Nid::parse("198.18.1.2@tcp"), b = *Nid::parse("198.18.2.3@o2ib1");
  NodeEvent ev{7, "oss01", kRoleServer, NodeState::kSuspect, {a, b}};
  MeshCell cell{"oss02", a, b, 10, 1, 9, 0.125, 2.5, 410.5, 380.25, 1500, 9000, true};
  MeshRow row{"client1", 1795576298187, {cell, cell}};
  StatusNode sn{3, "mgs", kRoleMgs, NodeState::kUp, {a}, 1, 2, 3, 4, true};
  StatusTable st;
  st.generation = 9;
  st.total = 2;
  st.nodes = {sn, sn};
  st.counters.pings = 5;
  MeshSyncReq sync;
  sync.name = "client1";
  sync.cells = {cell};
  MeshSyncRep srep;
  srep.epoch = 3;
  srep.next_sync_ms = 1000;
  srep.targets = {ev};
  MeshMatrix mm;
  mm.epoch = 4;
  mm.total = 1;
  mm.rows = {row};
  // Large NIDs (IPv6) in their marked wire form.
  Nid six = *Nid::parse("2001:2::5@tcp"), six2 = *Nid::parse("2001:2:0:2::9@tcp1");
  MeshCell cell6{"oss06", six, six2, 10, 0, 10, 0.2, 0.4, 100, 90, 1500, 1500, true};
  MeshSyncReq sync6{"client6", {cell6, cell}, {MeshNi{six, 10000, 1, 2}}};
  PingRep lead6{PingStatus::kOk, 5, 6, Leadership{7, true, six}, {six, a}};
  return {
      tagged(0, encode(RegisterReq{"client1", kRoleClient, {a, b}, 42})),
      tagged(0, encode(RegisterReq{"client6", kRoleClient, {six, a, six2}, 43})),
      tagged(8, encode(sync6)),
      tagged(3, encode(lead6)),
      tagged(5, encode(NotifyReq{9, {NodeEvent{8, "oss06", kRoleServer, NodeState::kUp, {six}}}})),
      tagged(1, encode(RegisterRep{1, 2, 3})),
      tagged(2, encode(PingReq{1, 42, {a, b}, {b}})),
      tagged(3, encode(PingRep{PingStatus::kOk, 5, 6, {}, {b}})),
      tagged(4, encode(ReportReq{1, 42, {{a, HealthKind::kPeerNiUnreachable}}})),
      tagged(5, encode(NotifyReq{8, {ev}, 3, {ev}})),
      tagged(6, encode(PageReq{10, 100})),
      tagged(7, encode(st)),
      tagged(8, encode(sync)),
      tagged(9, encode(srep)),
      tagged(10, encode(mm)),
      tagged(11, encode(RelayReq{NotifyReq{8, {ev}, 2}, {a, b}})),
      tagged(12, encode(RelayRep{{0, 3}})),
      tagged(13, encode(ReleasesPage{3, 1, {{1, "0.2.0 (5175907abcde)"}, {2, ""}}})),
      tagged(1, encode(RegisterRep{1, 2, 3, {}, false, 2})),
      tagged(3, encode(PingRep{PingStatus::kOk, 5, 6, {}, {b}, 2})),
      tagged(14, encode(UpgradeReq{true, 2, false})),
      tagged(15, encode(UpgradeRep{1,
                                   2,
                                   2,
                                   false,
                                   "1 node(s) not dead are below level 2",
                                   5,
                                   1,
                                   {NodeLevel{3, "oss01", NodeState::kUp, 1, ""}}})),
      tagged(16, [] {
        std::string t = encode_level_record(LevelRecord{2, 1795576298187, "mgs1 (198.18.1.2@tcp)"});
        return Buffer::copy_of(std::string_view(t));
      }())};
}

}  // namespace pfsnet::fuzz
