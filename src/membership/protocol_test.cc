// The membership protocol's messages: round trips, and garbage refused (truncated, a byte
// too many, counts larger than the bytes behind them, flags and states out of range).
#include "membership/protocol.h"

#include <gtest/gtest.h>

#include <cstring>

#include "base/test_nid.h"

namespace pfsnet {
namespace {

TEST(MembershipProtocol, RoundTripsAndRefusesGarbage) {
  RegisterReq r{"oss01", kRoleServer, {nid("10.0.0.4@tcp"), nid("10.1.0.4@tcp1")}, 42};
  Buffer b = encode(r);
  auto back = decode_register_req(b.span());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->name, "oss01");
  EXPECT_EQ(back->nids.size(), 2u);
  EXPECT_EQ(back->instance, 42u);
  // Truncated at every length, and with a trailing byte: refused.
  for (size_t n = 0; n < b.size(); ++n)
    EXPECT_FALSE(decode_register_req(b.span().first(n)).ok()) << n;
  Buffer longer(b.size() + 1);
  std::memcpy(longer.data(), b.data(), b.size());
  longer.data()[b.size()] = 0;
  EXPECT_FALSE(decode_register_req(longer.span()).ok());
  // A list count larger than the bytes behind it allocates nothing and fails.
  PingReq p{7, 9, {Nid::ipv4(1), Nid::ipv4(2), Nid::ipv4(3)}};
  Buffer pb = encode(p);
  pb.data()[12] = 0xff;  // the count's low byte
  EXPECT_FALSE(decode_ping_req(pb.span()).ok());
  NotifyReq nr{5, {NodeEvent{3, "c1", kRoleClient, NodeState::kDead, {nid("10.0.0.9@tcp")}}}};
  auto nb = decode_notify_req(encode(nr).span());
  ASSERT_TRUE(nb.ok());
  EXPECT_EQ(nb->events[0].state, NodeState::kDead);
  EXPECT_EQ(encoded_size(nr.events[0]), encode(nr).size() - 24);
  nr.fenced = {nr.events[0]};
  auto nf = decode_notify_req(encode(nr).span());
  ASSERT_TRUE(nf.ok());
  ASSERT_EQ(nf->fenced.size(), 1u);
  EXPECT_EQ(nf->fenced[0].name, "c1");
  // Eviction: the registration's flag and its answer's, each 0 or 1; the ping's status.
  r.after_eviction = true;
  auto ra = decode_register_req(encode(r).span());
  ASSERT_TRUE(ra.ok());
  EXPECT_TRUE(ra->after_eviction);
  Buffer bad = encode(r);
  bad.data()[bad.size() - 1] = 2;
  EXPECT_FALSE(decode_register_req(bad.span()).ok());
  RegisterRep rr;
  rr.evicted = true;
  auto rb = decode_register_rep(encode(rr).span());
  ASSERT_TRUE(rb.ok());
  EXPECT_TRUE(rb->evicted);
  Buffer bad_rep = encode(rr);
  bad_rep.data()[bad_rep.size() - 1] = 2;
  EXPECT_FALSE(decode_register_rep(bad_rep.span()).ok());
  PingRep evicted{PingStatus::kEvicted, 1, 1};
  auto pe = decode_ping_rep(encode(evicted).span());
  ASSERT_TRUE(pe.ok());
  EXPECT_EQ(pe->status, PingStatus::kEvicted);
  Buffer bad_ping = encode(evicted);
  bad_ping.data()[0] = 3;
  EXPECT_FALSE(decode_ping_rep(bad_ping.span()).ok());
}

// A client asks the roles of peers on its ping; the answer names the servers among them.
// More than kMaxRoleAsks either way is refused.
// A router (lnet.routing) says so in its roles; configured names never give the bit.
TEST(MembershipProtocol, RolesNameARouter) {
  EXPECT_EQ(roles_string(kRoleClient | kRoleRouter), "client,router");
  EXPECT_EQ(roles_string(kRoleRouter), "router");
  EXPECT_EQ(roles_string(0), "-");
  EXPECT_EQ(roles_from({"client", "router"}), kRoleClient);
  RegisterReq r{"r1", kRoleRouter | kRoleServer, {*Nid::parse("198.18.1.2@tcp1")}, 7, false};
  auto back = decode_register_req(encode(r).span());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->roles, kRoleRouter | kRoleServer);
}

TEST(MembershipProtocol, RoleAsksRoundTripAndAreBounded) {
  PingReq p{7, 9, {}, {Nid::ipv4(11), Nid::ipv4(12), Nid::ipv4(13)}};
  auto pb = decode_ping_req(encode(p).span());
  ASSERT_TRUE(pb.ok());
  EXPECT_EQ(pb->ask, (std::vector<Nid>{Nid::ipv4(11), Nid::ipv4(12), Nid::ipv4(13)}));
  PingRep r;
  r.servers = {Nid::ipv4(12)};
  auto rb = decode_ping_rep(encode(r).span());
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->servers, std::vector<Nid>{Nid::ipv4(12)});
  p.ask.assign(kMaxRoleAsks + 1, Nid::ipv4(5));
  EXPECT_FALSE(decode_ping_req(encode(p).span()).ok());
  r.servers.assign(kMaxRoleAsks + 1, Nid::ipv4(5));
  EXPECT_FALSE(decode_ping_rep(encode(r).span()).ok());
  // A registration's answer is small whatever the cluster: no server list.
  EXPECT_LT(encode(RegisterRep{}).size(), 64u);
}

TEST(MembershipProtocol, LeadershipRoundTripsOnEveryAnswerAndRefusesGarbage) {
  const Nid leader = nid("10.0.0.2@tcp");
  RegisterRep rr;
  rr.lead = Leadership{41, true, leader};
  auto r = decode_register_rep(encode(rr).span());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->lead, rr.lead);
  PingRep pr;
  pr.generation = 3;
  pr.lead = Leadership{42, false, std::nullopt};
  auto p = decode_ping_rep(encode(pr).span());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->lead, pr.lead);
  EXPECT_EQ(p->generation, 3u);
  NotifyReq nr{5, {}, 43};
  auto n = decode_notify_req(encode(nr).span());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->epoch, 43u);
  // The flag is 0 or 1, and a leader NID must unpack.
  Buffer b = encode(pr);
  b.data()[b.size() - 9] = 2;
  EXPECT_FALSE(decode_ping_rep(b.span()).ok());
  Buffer c = encode(pr);
  for (size_t i = 1; i <= 8; ++i) c.data()[c.size() - i] = 0xff;
  EXPECT_FALSE(decode_ping_rep(c.span()).ok());
  for (size_t k = 0; k < encode(pr).size(); ++k)
    EXPECT_FALSE(decode_ping_rep(encode(pr).span().first(k)).ok()) << k;
}

TEST(MembershipProtocol, ReportRoundTripsAndRefusesGarbage) {
  ReportReq r{4,
              9,
              {{nid("10.0.0.3@tcp"), HealthKind::kPeerNiConnectError},
               {nid("10.1.0.3@tcp1"), HealthKind::kPeerNiUnreachable}}};
  Buffer b = encode(r);
  auto back = decode_report_req(b.span());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->id, 4u);
  EXPECT_EQ(back->instance, 9u);
  EXPECT_EQ(back->peers, r.peers);
  for (size_t n = 0; n < b.size(); ++n)
    EXPECT_FALSE(decode_report_req(b.span().first(n)).ok()) << n;
  Buffer bad = Buffer::copy_of(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
  bad.data()[b.size() - 1] = kNumHealthKinds;  // the last peer's kind
  EXPECT_FALSE(decode_report_req(bad.span()).ok());
}

TEST(MembershipProtocol, StatusTableRoundTripsAndRefusesGarbage) {
  StatusTable t;
  t.generation = 12;
  t.total = 3;
  t.offset = 1;
  t.counters = {1, 2, 3, 4, 5, 6, 7};
  StatusNode a{
      4, "oss01", kRoleServer, NodeState::kSuspect, {nid("10.0.0.4@tcp"), nid("10.1.0.4@tcp1")}};
  a.last_heard_unix_ms = 1700000001234;
  a.registered_unix_ms = 1700000000000;
  a.last_change_unix_ms = 1700000000999;
  a.last_heard_ago_ms = 15000;
  a.heard_by_report = true;
  a.verifying = true;
  StatusNode b{5, "c1", kRoleClient, NodeState::kUp, {nid("10.0.0.5@tcp")}};
  t.nodes = {a, b};
  Buffer buf = encode(t);
  auto back = decode_status_rep(buf.span());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->generation, 12u);
  EXPECT_EQ(back->total, 3u);
  EXPECT_EQ(back->offset, 1u);
  EXPECT_EQ(back->counters, t.counters);
  EXPECT_EQ(back->nodes, t.nodes);
  for (size_t n = 0; n < buf.size(); ++n)
    EXPECT_FALSE(decode_status_rep(buf.span().first(n)).ok()) << n;
  Buffer bad =
      Buffer::copy_of(std::string_view(reinterpret_cast<const char*>(buf.data()), buf.size()));
  bad.data()[buf.size() - 1] = 4;  // the last node's flags: bits 0 and 1 only
  EXPECT_FALSE(decode_status_rep(bad.span()).ok());
  bad.data()[buf.size() - 1] = 2;  // verifying alone is a flag like any
  auto v = decode_status_rep(bad.span());
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->nodes[1].verifying);
  EXPECT_FALSE(v->nodes[1].heard_by_report);
}

// Large NIDs in membership messages: each in its marked wire form, which decodes back; a
// release without them refuses the message (the marked word is no NID to it); what a
// version-1 peer is sent has none (for_version1).
TEST(MembershipProtocol, LargeNidsRoundTripAndAreLeftOutForVersion1Peers) {
  const Nid v4 = *Nid::parse("198.18.0.5@tcp"), v6 = *Nid::parse("2001:2::5@tcp");
  RegisterReq q{"oss6", kRoleServer, {v6, v4}, 9, false};
  Buffer b = encode(q);
  EXPECT_EQ(b.size(), encode(RegisterReq{"oss6", kRoleServer, {v4, v4}, 9, false}).size() + 16);
  auto back = decode_register_req(b.span());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->nids, q.nids);
  for (size_t n = 0; n < b.size(); ++n) EXPECT_FALSE(decode_register_req(b.span().first(n)).ok());
  for_version1(&q);
  EXPECT_EQ(q.nids, (std::vector<Nid>{v4}));
  EXPECT_EQ(encode(q).size(), encode(RegisterReq{"oss6", kRoleServer, {v4}, 9, false}).size());

  StatusTable t;
  t.nodes.push_back(StatusNode{1, "c6", kRoleClient, NodeState::kUp, {v6}});
  t.nodes.push_back(StatusNode{2, "c4", kRoleClient, NodeState::kUp, {v4, v6}});
  auto tb = decode_status_rep(encode(t).span());
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(tb->nodes[0].nids, (std::vector<Nid>{v6}));
  for_version1(&t);
  ASSERT_EQ(t.nodes.size(), 2u) << "the table keeps its nodes (and its paging)";
  EXPECT_TRUE(t.nodes[0].nids.empty());
  EXPECT_EQ(t.nodes[1].nids, (std::vector<Nid>{v4}));

  MeshSyncReq m{"c4", {}, {MeshNi{v4, 1000, 0, 0}, MeshNi{v6, 1000, 0, 0}}};
  MeshCell small, large;
  small.local = small.peer = v4;
  large.local = v6;
  large.peer = *Nid::parse("2001:2::6@tcp");
  m.cells = {small, large};
  auto mb = decode_mesh_sync_req(encode(m).span());
  ASSERT_TRUE(mb.ok()) << mb.status().to_string();
  EXPECT_EQ(mb->cells, m.cells);
  for_version1(&m);
  EXPECT_EQ(m.cells, (std::vector<MeshCell>{small}));
  ASSERT_EQ(m.nis.size(), 1u);
  EXPECT_EQ(m.nis[0].nid, v4);

  PingRep r;
  r.lead = Leadership{3, true, v6};
  r.servers = {v4, v6};
  auto rb = decode_ping_rep(encode(r).span());
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->lead.leader, v6);
  for_version1(&r);
  EXPECT_FALSE(r.lead.leader);
  EXPECT_EQ(r.servers, (std::vector<Nid>{v4}));
}

TEST(MembershipProtocol, TheClusterLevelIsAnOptionalTailAVersion1NodeNeverSees) {
  // Without a level the replies are byte for byte what an 8827b49 node decodes.
  RegisterRep rr{7, 9, 11};
  PingRep pr{PingStatus::kOk, 3, 4};
  const size_t reg_v1 = encode(rr).size(), ping_v1 = encode(pr).size();
  rr.cluster_level = 2;
  pr.cluster_level = 2;
  Buffer rb = encode(rr), pb = encode(pr);
  EXPECT_EQ(rb.size(), reg_v1 + 2);
  EXPECT_EQ(pb.size(), ping_v1 + 2);
  auto r = decode_register_rep(rb.span());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->cluster_level, 2);
  EXPECT_EQ(r->id, 7u);
  auto p = decode_ping_rep(pb.span());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->cluster_level, 2);
  EXPECT_EQ(decode_ping_rep(pb.span().first(ping_v1))->cluster_level, 0) << "absent: not said";
  // Half a level, a level of 0, or a byte after it: refused.
  EXPECT_FALSE(decode_ping_rep(pb.span().first(ping_v1 + 1)).ok());
  pb.data()[ping_v1] = 0;
  EXPECT_FALSE(decode_ping_rep(pb.span()).ok());
  Buffer longer(rb.size() + 1);
  std::memcpy(longer.data(), rb.data(), rb.size());
  longer.data()[rb.size()] = 0;
  EXPECT_FALSE(decode_register_rep(longer.span()).ok());
}

TEST(MembershipProtocol, UpgradeRoundTripsAndRefusesGarbage) {
  UpgradeReq q{.commit = true, .level = 2, .force = true};
  Buffer qb = encode(q);
  auto qq = decode_upgrade_req(qb.span());
  ASSERT_TRUE(qq.ok());
  EXPECT_EQ(*qq, q);
  for (size_t n = 0; n < qb.size(); ++n) EXPECT_FALSE(decode_upgrade_req(qb.span().first(n)).ok());
  qb.data()[0] = 2;
  EXPECT_FALSE(decode_upgrade_req(qb.span()).ok()) << "a flag of 2";

  UpgradeRep r;
  r.level = 1;
  r.mgs_level = 2;
  r.target = 2;
  r.refusal = "2 node(s) not dead are below level 2";
  r.total = 5;
  r.below = 2;
  r.nodes = {{3, "n3", NodeState::kUp, 1, ""}, {9, "n9", NodeState::kDead, 0, "0.9+abc"}};
  Buffer rb = encode(r);
  auto back = decode_upgrade_rep(rb.span());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->refusal, r.refusal);
  EXPECT_EQ(back->nodes, r.nodes);
  EXPECT_EQ(back->below, 2u);
  EXPECT_EQ(back->total, 5u);
  for (size_t n = 0; n < rb.size(); ++n) EXPECT_FALSE(decode_upgrade_rep(rb.span().first(n)).ok());
  // More nodes listed than are said to be below: refused.
  r.below = 1;
  EXPECT_FALSE(decode_upgrade_rep(encode(r).span()).ok());
  r.below = 2;
  Buffer bad = encode(r);
  bad.data()[0] = 0;  // level 0
  bad.data()[1] = 0;
  EXPECT_FALSE(decode_upgrade_rep(bad.span()).ok());
}

}  // namespace
}  // namespace pfsnet
