// The MGS on a manual clock: its states (up, suspect, dead, evicted, back), heard-from
// reports, and its table handed to the next leader. Its notifications: mgs_notify_test.cc;
// the messages themselves: protocol_test.cc.
#include "membership/mgs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "base/test_nid.h"
#include "membership/mgs_test_fixture.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

TEST_F(MgsTest, ServerGoesSuspectThenDeadAndClientsAreToldOnce) {
  uint32_t s = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t c1 = add("c1", kRoleClient, "10.0.0.5@tcp");
  uint32_t c2 = add("c2", kRoleClient, "10.0.0.6@tcp");
  mgs_.take_changes();
  // Pinging on time keeps it up; the period plus the grace (500 ms) makes it suspect.
  clock_.advance(10s);
  ping(s);
  ping(c1);
  ping(c2);
  clock_.advance(10499ms);
  mgs_.tick(clock_.now());
  EXPECT_EQ(state(s), NodeState::kUp);
  clock_.advance(1ms);
  mgs_.tick(clock_.now());
  EXPECT_EQ(state(s), NodeState::kSuspect);
  EXPECT_TRUE(mgs_.take_notifications(clock_.now()).empty());  // suspect is not broadcast
  // Dead after ping_miss_limit periods (30 s) plus the grace.
  clock_.advance(20s);
  mgs_.tick(clock_.now());
  EXPECT_EQ(state(s), NodeState::kDead);
  EXPECT_EQ(state(c1), NodeState::kUp);  // clients have 50 s periods
  auto changes = mgs_.take_changes();
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[1].state, NodeState::kDead);
  auto out = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(out.size(), 2u);  // both clients, nobody else
  for (auto& o : out) {
    EXPECT_TRUE(o.to == c1 || o.to == c2);
    ASSERT_EQ(o.req.events.size(), 1u);
    EXPECT_EQ(o.req.events[0].name, "oss1");
    EXPECT_EQ(o.req.events[0].state, NodeState::kDead);
    mgs_.notification_done(o.token, true, clock_.now());
  }
  EXPECT_TRUE(mgs_.take_notifications(clock_.now()).empty());
  // It comes back (registers again: a dead node's pings are answered "evicted"), and the
  // clients hear that too.
  back(s);
  EXPECT_EQ(state(s), NodeState::kUp);
  out = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].req.events[0].state, NodeState::kUp);
  EXPECT_EQ(mgs_.counters().events_delivered, 2u);
}

TEST_F(MgsTest, DeadClientIsToldToServersNotToClients) {
  uint32_t s1 = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t s2 = add("oss2", kRoleServer, "10.0.0.4@tcp");
  add("c1", kRoleClient, "10.0.0.5@tcp");
  add("c2", kRoleClient, "10.0.0.6@tcp");
  for (int i = 0; i < 16; ++i) {  // the servers keep pinging; the clients go silent
    clock_.advance(10s);
    ping(s1);
    ping(s2);
    mgs_.tick(clock_.now());
  }
  auto out = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(out.size(), 2u);
  for (auto& o : out) {
    EXPECT_TRUE(o.to == s1 || o.to == s2);
    EXPECT_EQ(o.req.events.size(), 2u);  // both dead clients in one notification
  }
}

TEST_F(MgsTest, HeardFromReportsKeepASilentClientUp) {
  uint32_t s = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t c = add("c1", kRoleClient, "10.0.0.5@tcp");
  for (int i = 0; i < 30; ++i) {  // 300 s: six client periods without a client ping
    clock_.advance(10s);
    ping(s, {nid("10.0.0.5@tcp"), nid("10.9.9.9@tcp")});
    mgs_.tick(clock_.now());
  }
  EXPECT_EQ(state(c), NodeState::kUp);
  EXPECT_TRUE(mgs_.find(c)->heard_by_report);
  EXPECT_EQ(mgs_.counters().reported, 30u);
  // Reports stop: suspect after 50.5 s, dead after 150.5 s.
  for (int i = 0; i < 16; ++i) {
    clock_.advance(10s);
    ping(s);
    mgs_.tick(clock_.now());
  }
  EXPECT_EQ(state(c), NodeState::kDead);
}

// A client's ping asks the roles of peers it heard from: the answer names the servers'
// NIDs among them (a client, an MGS and a NID nobody registered are not).
TEST_F(MgsTest, APingsAskedNidsAreAnsweredWithTheServersAmongThem) {
  add("oss1", kRoleServer, "10.0.0.3@tcp");
  add("oss2", kRoleServer | kRoleClient, "10.0.0.4@tcp");
  add("mgs", kRoleMgs, "10.0.0.2@tcp");
  uint32_t c1 = add("c1", kRoleClient, "10.0.0.5@tcp");
  add("c2", kRoleClient, "10.0.0.6@tcp");
  PingReq p{c1, 7, {}, {}};
  for (const char* n :
       {"10.0.0.3@tcp", "10.0.0.6@tcp", "10.0.0.4@tcp", "10.0.0.2@tcp", "10.0.0.99@tcp"})
    p.ask.push_back(nid(n));
  PingRep r = mgs_.on_ping(p, clock_.now());
  EXPECT_EQ(r.status, PingStatus::kOk);
  EXPECT_EQ(r.servers, (std::vector<Nid>{nid("10.0.0.3@tcp"), nid("10.0.0.4@tcp")}));
}

TEST_F(MgsTest, UnknownOrRestartedNodesAreToldToRegister) {
  uint32_t c = add("c1", kRoleClient, "10.0.0.5@tcp");
  EXPECT_EQ(mgs_.on_ping(PingReq{c + 100, 7, {}}, clock_.now()).status, PingStatus::kUnknown);
  EXPECT_EQ(mgs_.on_ping(PingReq{c, 8, {}}, clock_.now()).status, PingStatus::kUnknown);
  // Registering again under the same name keeps the id.
  EXPECT_EQ(
      mgs_.on_register(RegisterReq{"c1", kRoleClient, {nid("10.0.0.5@tcp")}, 8}, clock_.now()).id,
      c);
  EXPECT_EQ(mgs_.on_ping(PingReq{c, 8, {}}, clock_.now()).status, PingStatus::kOk);
  EXPECT_EQ(mgs_.counters().unknown_pings, 2u);
}

// Dead means evicted: a node the MGS declared dead is not brought back by its own pings or
// reports (answered kEvicted), nor by a server's word that it heard from it, nor by a
// registration of the same process that does not say it dropped what it held -- only by
// one that does (or by a new process). Then it is up, and the servers are told.
TEST_F(MgsTest, ADeadNodeIsEvictedUntilItRegistersAgainHavingDroppedWhatItHeld) {
  uint32_t s = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t c = add("c1", kRoleClient, "10.0.0.5@tcp");
  for (int i = 0; i < 16; ++i) {  // c1 silent past its dead time (150.5 s)
    clock_.advance(10s);
    ping(s);
    mgs_.tick(clock_.now());
  }
  ASSERT_EQ(state(c), NodeState::kDead);
  mgs_.take_changes();
  // The server hears of the death; once it acknowledged it, that c1 is fenced.
  auto told = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].req.events.at(0).state, NodeState::kDead);
  EXPECT_TRUE(told[0].req.fenced.empty());
  mgs_.notification_done(told[0].token, true, clock_.now());
  told = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(told.size(), 1u);
  EXPECT_TRUE(told[0].req.events.empty());
  ASSERT_EQ(told[0].req.fenced.size(), 1u);
  EXPECT_EQ(told[0].req.fenced[0].name, "c1");
  mgs_.notification_done(told[0].token, true, clock_.now());
  EXPECT_EQ(mgs_.on_ping(PingReq{c, 7, {}}, clock_.now()).status, PingStatus::kEvicted);
  ping(s, {nid("10.0.0.5@tcp")});  // oss1 heard from it (its refused I/O)
  EXPECT_EQ(mgs_.on_report(ReportReq{c, 7, {}}, clock_.now()).status, PingStatus::kEvicted);
  RegisterRep again =
      mgs_.on_register(RegisterReq{"c1", kRoleClient, {nid("10.0.0.5@tcp")}, 7}, clock_.now());
  EXPECT_TRUE(again.evicted);
  EXPECT_EQ(again.id, c);
  EXPECT_EQ(state(c), NodeState::kDead);
  EXPECT_EQ(mgs_.counters().evicted_pings, 3u);
  EXPECT_TRUE(mgs_.take_changes().empty());
  EXPECT_TRUE(mgs_.take_notifications(clock_.now()).empty());
  back(c);
  EXPECT_EQ(state(c), NodeState::kUp);
  auto out = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to, s);
  EXPECT_EQ(out[0].req.events.at(0).name, "c1");
  EXPECT_EQ(out[0].req.events.at(0).state, NodeState::kUp);
  ping(c);
  // A new process of a dead node holds nothing: it is taken back at once.
  for (int i = 0; i < 16; ++i) {
    clock_.advance(10s);
    ping(s);
    mgs_.tick(clock_.now());
  }
  ASSERT_EQ(state(c), NodeState::kDead);
  EXPECT_FALSE(
      mgs_.on_register(RegisterReq{"c1", kRoleClient, {nid("10.0.0.5@tcp")}, 8}, clock_.now())
          .evicted);
  EXPECT_EQ(state(c), NodeState::kUp);
}

// State handed over (issue 36, item 2): the chunks a leader leaves let the next one serve
// the same table -- ids, instances, who is dead -- so pings are known and nobody
// registers again; only the chunks a change touched are written again.
TEST_F(MgsTest, TheNextLeaderServesTheSameTableFromTheChunksLeftForIt) {
  std::vector<uint32_t> ids;
  for (int i = 0; i < 2500; ++i)
    ids.push_back(
        add("c" + std::to_string(i), kRoleClient,
            ("10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250) + "@tcp").c_str()));
  uint32_t s = add("oss1", kRoleServer, "10.0.0.3@tcp");
  auto first = mgs_.take_dirty_chunks();
  ASSERT_EQ(first.size(), 3u);  // ids 0-2500: three chunks of 1024
  EXPECT_TRUE(mgs_.take_dirty_chunks().empty());
  // c7 dies (the rest keep pinging): only its chunk is written again.
  for (int i = 0; i < 16; ++i) {
    clock_.advance(10s);
    for (uint32_t id : ids)
      if (id != ids[7]) ping(id);
    ping(s);
    mgs_.tick(clock_.now());
  }
  ASSERT_EQ(state(ids[7]), NodeState::kDead);
  auto second = mgs_.take_dirty_chunks();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].first, 0u);
  std::map<uint32_t, std::string> left;  // what etcd would hold
  for (auto* v : {&first, &second})
    for (auto& [c, b] : *v)
      left[c] = std::string(reinterpret_cast<const char*>(b.data()), b.size());
  std::vector<std::string> chunks;
  for (auto& [c, b] : left) chunks.push_back(b);

  MgsCore next(opts(), 2);
  clock_.advance(3s);
  ASSERT_TRUE(next.restore(chunks, clock_.now()).ok());
  EXPECT_EQ(next.nodes().size(), mgs_.nodes().size());
  EXPECT_EQ(next.find(ids[7])->state, NodeState::kDead);
  EXPECT_EQ(next.find(s)->name, "oss1");
  // Every live node's ping is known (same id and instance); the dead one is evicted.
  for (uint32_t id : ids)
    EXPECT_EQ(next.on_ping(PingReq{id, 7, {}}, clock_.now()).status,
              id == ids[7] ? PingStatus::kEvicted : PingStatus::kOk)
        << id;
  EXPECT_EQ(next.counters().unknown_pings, 0u);
  EXPECT_EQ(next.counters().registers, 0u);
  // Whether c7 was fenced is not known to the new leader: oss1 hears of its death again, and
  // once it acknowledged it, that c7 is fenced.
  auto again = next.take_notifications(clock_.now());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].to, s);
  ASSERT_EQ(again[0].req.events.size(), 1u);
  EXPECT_EQ(again[0].req.events[0].name, "c7");
  EXPECT_EQ(next.counters().fenced, 0u);
  next.notification_done(again[0].token, true, clock_.now());
  EXPECT_EQ(next.counters().fenced, 1u);
  again = next.take_notifications(clock_.now());
  ASSERT_EQ(again.size(), 1u);
  ASSERT_EQ(again[0].req.fenced.size(), 1u);
  EXPECT_EQ(again[0].req.fenced[0].name, "c7");
  // Each restored node has a whole period from the takeover: none dies of it.
  clock_.advance(10499ms);
  next.tick(clock_.now());
  EXPECT_EQ(next.find(s)->state, NodeState::kUp);
  clock_.advance(1ms);
  next.tick(clock_.now());
  EXPECT_EQ(next.find(s)->state, NodeState::kSuspect);  // oss1 did not ping the new leader
  EXPECT_EQ(next.find(ids[0])->state, NodeState::kUp);
  // A new node gets a fresh id; a name or a chunk twice, or garbage: refused, table empty.
  EXPECT_EQ(
      next.on_register(RegisterReq{"new", kRoleClient, {nid("10.2.0.1@tcp")}, 9}, clock_.now()).id,
      mgs_.nodes().size());
  MgsCore bad(opts(), 3);
  chunks.push_back(chunks[0]);
  EXPECT_FALSE(bad.restore(chunks, clock_.now()).ok());
  EXPECT_FALSE(bad.restore({std::string("\x05\x00\x00\x00garbage")}, clock_.now()).ok());
  EXPECT_TRUE(bad.nodes().empty());
}

// A node that cannot reach a server tells the MGS; the MGS believes it only when its own
// ping of the server goes unanswered.
TEST_F(MgsTest, ReportedNodeIsSuspectAtOnceAndDeadWhenTheMgsCannotReachItEither) {
  uint32_t s = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t c1 = add("c1", kRoleClient, "10.0.0.5@tcp");
  add("c2", kRoleClient, "10.0.0.6@tcp");
  mgs_.take_changes();
  clock_.advance(2s);
  ReportReq r{c1, 7, {{nid("10.0.0.3@tcp"), HealthKind::kPeerNiConnectError}}};
  EXPECT_EQ(mgs_.on_report(r, clock_.now()).status, PingStatus::kOk);
  EXPECT_EQ(state(s), NodeState::kSuspect);
  // A second report while the first is being verified adds no second ping.
  mgs_.on_report(r, clock_.now());
  auto v = mgs_.take_verifications();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].id, s);
  EXPECT_EQ(v[0].nids, std::vector<Nid>{nid("10.0.0.3@tcp")});
  EXPECT_TRUE(mgs_.take_verifications().empty());
  mgs_.take_changes();
  clock_.advance(5s);
  mgs_.verification_done(v[0].token, false, clock_.now());
  EXPECT_EQ(state(s), NodeState::kDead);  // 7 s after the report, not 30 s after the last ping
  auto ch = mgs_.take_changes();
  ASSERT_EQ(ch.size(), 1u);
  EXPECT_EQ(ch[0].state, NodeState::kDead);
  EXPECT_EQ(mgs_.take_notifications(clock_.now()).size(), 2u);  // both clients are told
  EXPECT_EQ(mgs_.counters().unreachable_reports, 1u);
  EXPECT_EQ(mgs_.counters().verified_dead, 1u);
  // Dead: further reports change nothing until it registers again.
  mgs_.on_report(r, clock_.now());
  EXPECT_TRUE(mgs_.take_verifications().empty());
  back(s);
  EXPECT_EQ(state(s), NodeState::kUp);
}

// A server stopped (SIGSTOP) and resumed finds every deadline it had passed at once: its
// connects and sends "failed". Its report of the peers it could not reach is its stall's,
// not theirs: the MGS, which had lost the server itself, acts on none of it until the
// server has been back one period.
TEST_F(MgsTest, AReportFromANodeTheMgsHadLostIsNotActedOn) {
  uint32_t s1 = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t s2 = add("oss2", kRoleServer, "10.0.0.4@tcp");
  uint32_t c1 = add("c1", kRoleClient, "10.0.0.5@tcp");
  mgs_.take_changes();
  clock_.advance(10s);
  ping(s2);
  ping(c1);
  clock_.advance(1s);  // oss1 missed its ping: suspect
  mgs_.tick(clock_.now());
  ASSERT_EQ(state(s1), NodeState::kSuspect);
  ReportReq r{s1,
              7,
              {{nid("10.0.0.4@tcp"), HealthKind::kPeerNiConnectError},
               {nid("10.0.0.5@tcp"), HealthKind::kPeerNiUnreachable}}};
  EXPECT_EQ(mgs_.on_report(r, clock_.now()).status, PingStatus::kOk);
  EXPECT_EQ(state(s1), NodeState::kUp);  // the report is a sign of life
  EXPECT_EQ(state(s2), NodeState::kUp);
  EXPECT_EQ(state(c1), NodeState::kUp);
  EXPECT_TRUE(mgs_.take_verifications().empty());
  // Back for less than a period (10 s): its reports are still its stall's.
  clock_.advance(9s);
  ping(s2);
  ping(c1);
  mgs_.on_report(r, clock_.now());
  EXPECT_EQ(state(s2), NodeState::kUp);
  EXPECT_EQ(mgs_.counters().reports_of_the_lost, 2u);
  EXPECT_EQ(mgs_.counters().unreachable_reports, 0u);
  // Back a period: believed enough to verify, as from any node.
  clock_.advance(1s);
  ping(s1);
  mgs_.on_report(r, clock_.now());
  EXPECT_EQ(state(s2), NodeState::kSuspect);
  EXPECT_EQ(mgs_.take_verifications().size(), 2u);
}

TEST_F(MgsTest, ReportIsNotBelievedWhenTheNodeAnswersOrWasHeardSince) {
  uint32_t s = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t c1 = add("c1", kRoleClient, "10.0.0.5@tcp");
  ReportReq r{c1, 7, {{nid("10.0.0.3@tcp"), HealthKind::kPeerNiUnreachable}}};
  // It answers the MGS's ping: up again (a client cut off alone kills nobody).
  mgs_.on_report(r, clock_.now());
  auto v = mgs_.take_verifications();
  ASSERT_EQ(v.size(), 1u);
  mgs_.verification_done(v[0].token, true, clock_.now());
  EXPECT_EQ(state(s), NodeState::kUp);
  EXPECT_EQ(mgs_.counters().verified_alive, 1u);
  // The MGS's ping is lost, but the node pinged the MGS after the report: alive.
  clock_.advance(1s);
  mgs_.on_report(r, clock_.now());
  v = mgs_.take_verifications();
  ASSERT_EQ(v.size(), 1u);
  clock_.advance(1s);
  ping(s);
  mgs_.verification_done(v[0].token, false, clock_.now());
  EXPECT_EQ(state(s), NodeState::kUp);
  // A stale token, an unknown NID, the reporter itself: nothing.
  mgs_.verification_done(v[0].token, false, clock_.now());
  mgs_.on_report(ReportReq{c1,
                           7,
                           {{nid("10.0.0.99@tcp"), HealthKind::kPeerNiUnreachable},
                            {nid("10.0.0.5@tcp"), HealthKind::kPeerNiUnreachable}}},
                 clock_.now());
  EXPECT_TRUE(mgs_.take_verifications().empty());
  EXPECT_EQ(state(s), NodeState::kUp);
  EXPECT_EQ(state(c1), NodeState::kUp);
}

TEST_F(MgsTest, ReportFromAnUnknownNodeOrWhenReportsAreOffChangesNothing) {
  uint32_t s = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t c1 = add("c1", kRoleClient, "10.0.0.5@tcp");
  std::vector<Unreachable> peers{{nid("10.0.0.3@tcp"), HealthKind::kPeerNiConnectError}};
  EXPECT_EQ(mgs_.on_report(ReportReq{c1, 8, peers}, clock_.now()).status, PingStatus::kUnknown);
  EXPECT_EQ(mgs_.on_report(ReportReq{99, 7, peers}, clock_.now()).status, PingStatus::kUnknown);
  EXPECT_EQ(state(s), NodeState::kUp);
  MgsOptions o = opts();
  o.unreachable_reports = false;
  MgsCore off(o, 1);
  off.on_register(RegisterReq{"oss1", kRoleServer, {nid("10.0.0.3@tcp")}, 7}, clock_.now());
  uint32_t c =
      off.on_register(RegisterReq{"c1", kRoleClient, {nid("10.0.0.5@tcp")}, 7}, clock_.now()).id;
  EXPECT_EQ(off.on_report(ReportReq{c, 7, peers}, clock_.now()).status, PingStatus::kOk);
  EXPECT_TRUE(off.take_verifications().empty());
  EXPECT_EQ(off.nodes()[0].state, NodeState::kUp);
}

}  // namespace
}  // namespace pfsnet
