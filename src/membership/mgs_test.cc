// The MGS on a manual clock: its states (up, suspect, dead, evicted, back), notifications
// to those who care (coalesced, rate-bounded, retried), heard-from reports, and its table
// handed to the next leader. The messages themselves: protocol_test.cc.
#include "membership/mgs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "base/test_nid.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

class MgsTest : public ::testing::Test {
 protected:
  MgsTest() : mgs_(opts(), 1) {}
  static MgsOptions opts() {
    MgsOptions o;
    o.client_interval = 50s;
    o.server_interval = 10s;
    o.miss_limit = 3;
    o.notify_rate = 1000;
    o.notify_window = 8;
    return o;
  }
  uint32_t add(const std::string& name, uint8_t roles, const char* n) {
    return mgs_.on_register(RegisterReq{name, roles, {nid(n)}, 7}, clock_.now()).id;
  }
  void ping(uint32_t id, std::vector<uint64_t> heard = {}) {
    EXPECT_EQ(mgs_.on_ping(PingReq{id, 7, std::move(heard)}, clock_.now()).status, PingStatus::kOk);
  }
  NodeState state(uint32_t id) { return mgs_.find(id)->state; }
  // Node `id` registers again, having dropped what it held after its eviction.
  void back(uint32_t id) {
    const NodeRecord& n = *mgs_.find(id);
    EXPECT_FALSE(
        mgs_.on_register(RegisterReq{n.name, n.roles, n.nids, 7, true}, clock_.now()).evicted);
  }

  ManualClock clock_;
  MgsCore mgs_;
};

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
    ping(s, {nid("10.0.0.5@tcp").pack(), nid("10.9.9.9@tcp").pack()});
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
    p.ask.push_back(nid(n).pack());
  PingRep r = mgs_.on_ping(p, clock_.now());
  EXPECT_EQ(r.status, PingStatus::kOk);
  EXPECT_EQ(r.servers,
            (std::vector<uint64_t>{nid("10.0.0.3@tcp").pack(), nid("10.0.0.4@tcp").pack()}));
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
  ping(s, {nid("10.0.0.5@tcp").pack()});  // oss1 heard from it (its refused I/O)
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

// A dead client is fenced -- its tokens may go to others -- only once every live server has
// acknowledged its death: not while one server's notification is being retried (it could
// still take the client's write under a token re-granted elsewhere); a server given up on
// or dead does not hold it up forever.
TEST_F(MgsTest, ADeadClientIsFencedOnlyOnceEveryServerAcknowledgedItsDeath) {
  uint32_t s1 = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t s2 = add("oss2", kRoleServer, "10.0.0.4@tcp");
  uint32_t c = add("c1", kRoleClient, "10.0.0.5@tcp");
  uint32_t c2 = add("c2", kRoleClient, "10.0.0.6@tcp");
  for (int i = 0; i < 16; ++i) {
    clock_.advance(10s);
    ping(s1);
    ping(s2);
    ping(c2);
    mgs_.tick(clock_.now());
  }
  ASSERT_EQ(state(c), NodeState::kDead);
  auto fenced_in = [](const std::vector<MgsCore::Outgoing>& v) {
    size_t n = 0;
    for (const auto& o : v) n += o.req.fenced.size();
    return n;
  };
  auto out = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(out.size(), 2u);
  for (auto& o : out) mgs_.notification_done(o.token, o.to == s1, clock_.now());  // s2's fails
  EXPECT_EQ(mgs_.counters().fenced, 0u);
  EXPECT_TRUE(mgs_.take_notifications(clock_.now()).empty());  // s2's retry waits 1 s
  clock_.advance(1s);
  out = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to, s2);
  EXPECT_EQ(fenced_in(out), 0u);
  mgs_.notification_done(out[0].token, true, clock_.now());
  EXPECT_EQ(mgs_.counters().fenced, 1u);
  out = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(out.size(), 2u);  // both servers: c1 is fenced
  for (auto& o : out) {
    EXPECT_TRUE(o.to == s1 || o.to == s2);
    ASSERT_EQ(o.req.fenced.size(), 1u);
    EXPECT_EQ(o.req.fenced[0].name, "c1");
    mgs_.notification_done(o.token, true, clock_.now());
  }
  // c2 dies while s2 does not answer at all: fenced once the MGS gives up on s2 (1 + 2 + 4 s
  // of back-off), never before.
  for (int i = 0; i < 16; ++i) {
    clock_.advance(10s);
    ping(s1);
    ping(s2);
    mgs_.tick(clock_.now());
  }
  ASSERT_EQ(state(c2), NodeState::kDead);
  for (int round = 0; round < 80; ++round) {
    out = mgs_.take_notifications(clock_.now());
    for (auto& o : out) mgs_.notification_done(o.token, o.to == s1, clock_.now());
    if (mgs_.counters().fenced == 2) break;
    clock_.advance(100ms);
  }
  EXPECT_EQ(mgs_.counters().fenced, 2u);
  EXPECT_GE(mgs_.counters().notifications_dropped, 1u);  // s2 given up on first
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

TEST_F(MgsTest, NotificationsAreRateBoundedWindowedAndRetried) {
  uint32_t s = add("oss1", kRoleServer, "10.0.0.3@tcp");
  for (int i = 0; i < 50; ++i) {
    std::string n = "10.0.1." + std::to_string(i + 1) + "@tcp";
    add("c" + std::to_string(i), kRoleClient, n.c_str());
  }
  clock_.advance(31s);
  for (uint32_t id = 1; id <= 50; ++id) ping(id);
  mgs_.tick(clock_.now());
  ASSERT_EQ(state(s), NodeState::kDead);
  // Window 8: no more than 8 in flight, whatever the rate allows.
  auto first = mgs_.take_notifications(clock_.now());
  EXPECT_EQ(first.size(), 8u);
  EXPECT_TRUE(mgs_.take_notifications(clock_.now()).empty());
  // One fails: retried after the back-off (1 s), not before.
  mgs_.notification_done(first[0].token, false, clock_.now());
  for (size_t i = 1; i < first.size(); ++i)
    mgs_.notification_done(first[i].token, true, clock_.now());
  // Rate 1000/s with bursts of 100: the remaining 42 go at once, the retry does not.
  auto second = mgs_.take_notifications(clock_.now());
  EXPECT_EQ(second.size(), 8u);
  for (auto& o : second) EXPECT_NE(o.to, first[0].to);
  size_t sent = first.size() + second.size();
  for (auto& o : second) mgs_.notification_done(o.token, true, clock_.now());
  for (int round = 0; round < 10; ++round) {
    auto more = mgs_.take_notifications(clock_.now());
    sent += more.size();
    for (auto& o : more) mgs_.notification_done(o.token, true, clock_.now());
  }
  EXPECT_EQ(sent, 50u);
  clock_.advance(1s);
  auto retry = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_EQ(retry[0].to, first[0].to);
  EXPECT_EQ(mgs_.counters().notification_retries, 1u);
}

// Many clients to tell of the same news (more than relay_above wait): through servers, up to
// relay_fanout clients a message, never through the server the news is of. A target the
// relaying server did not reach is retried alone (directly, once few wait); a relay that
// fails fails all of its targets, each retried.
TEST(MgsRelayTest, ManyClientsAreToldThroughServersAndWhatARelayMissedIsRetried) {
  MgsOptions o;
  o.server_interval = 10s;
  o.relay_above = 4;
  o.relay_fanout = 3;
  MgsCore mgs(o, 1);
  ManualClock clock;
  auto add = [&](const std::string& name, uint8_t roles, const std::string& n) {
    return mgs.on_register(RegisterReq{name, roles, {nid(n.c_str())}, 7}, clock.now()).id;
  };
  uint32_t s1 = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t s2 = add("oss2", kRoleServer, "10.0.0.4@tcp");
  std::vector<uint32_t> clients;
  for (int i = 0; i < 10; ++i)
    clients.push_back(
        add("c" + std::to_string(i), kRoleClient, "10.0.1." + std::to_string(i + 1) + "@tcp"));
  clock.advance(31s);
  for (uint32_t id : clients) mgs.on_ping(PingReq{id, 7, {}}, clock.now());
  mgs.on_ping(PingReq{s2, 7, {}}, clock.now());
  mgs.tick(clock.now());
  ASSERT_EQ(mgs.find(s1)->state, NodeState::kDead);
  auto out = mgs.take_notifications(clock.now());
  ASSERT_EQ(out.size(), 4u);  // 3 + 3 + 3 + 1
  std::vector<uint64_t> told;
  for (const auto& m : out) {
    EXPECT_EQ(m.to, s2);  // the only server up that the news is not of
    EXPECT_EQ(m.nids, mgs.find(s2)->nids);
    ASSERT_EQ(m.req.events.size(), 1u);
    EXPECT_EQ(m.req.events[0].name, "oss1");
    EXPECT_LE(m.targets.size(), 3u);
    told.insert(told.end(), m.targets.begin(), m.targets.end());
  }
  std::sort(told.begin(), told.end());
  std::vector<uint64_t> want;
  for (uint32_t id : clients) want.push_back(mgs.find(id)->nids[0].pack());
  EXPECT_EQ(told, want);
  EXPECT_EQ(mgs.counters().relays, 4u);
  EXPECT_EQ(mgs.counters().relayed, 10u);
  // The first relay missed its second target; the second relay failed whole.
  const uint64_t missed = out[0].targets[1];
  mgs.notification_done(out[0].token, true, clock.now(), {1});
  mgs.notification_done(out[1].token, false, clock.now());
  mgs.notification_done(out[2].token, true, clock.now());
  mgs.notification_done(out[3].token, true, clock.now());
  EXPECT_EQ(mgs.counters().events_delivered, 6u);
  EXPECT_TRUE(mgs.take_notifications(clock.now()).empty());  // retries wait their back-off
  clock.advance(1s);
  auto again = mgs.take_notifications(clock.now());  // 4 wait: not more than relay_above
  ASSERT_EQ(again.size(), 4u);
  std::vector<uint64_t> retried;
  for (const auto& m : again) {
    EXPECT_TRUE(m.targets.empty());  // directly
    retried.push_back(m.nids[0].pack());
    mgs.notification_done(m.token, true, clock.now());
  }
  EXPECT_NE(std::find(retried.begin(), retried.end(), missed), retried.end());
  for (uint64_t t : out[1].targets)
    EXPECT_NE(std::find(retried.begin(), retried.end(), t), retried.end());
  EXPECT_EQ(mgs.counters().events_delivered, 10u);
  EXPECT_EQ(mgs.counters().notification_retries, 4u);
}

// A subscriber that misses news -- the MGS thought it dead, or gave up notifying it --
// is told, once heard again, of every node it cares about that changed meanwhile: else a
// client would keep a returned server dead (CI's TSan run: "server n3 is up" never came).
TEST_F(MgsTest, ASubscriberThatMissedNewsIsToldWhenItIsHeardAgain) {
  uint32_t s1 = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t s2 = add("oss2", kRoleServer, "10.0.0.4@tcp");
  uint32_t c1 = add("c1", kRoleClient, "10.0.0.5@tcp");
  mgs_.take_changes();
  auto deliver_all = [&] {  // what c1 is told (the servers hear of c1's own changes)
    std::vector<NodeEvent> got;
    for (int round = 0; round < 10; ++round) {
      auto out = mgs_.take_notifications(clock_.now());
      for (auto& o : out) {
        if (o.to == c1) got.insert(got.end(), o.req.events.begin(), o.req.events.end());
        mgs_.notification_done(o.token, true, clock_.now());
      }
    }
    return got;
  };
  // c1 goes silent past its dead time (50 s periods: 150.5 s) while the servers ping.
  for (int i = 0; i < 16; ++i) {
    clock_.advance(10s);
    ping(s1);
    ping(s2);
    mgs_.tick(clock_.now());
  }
  ASSERT_EQ(state(c1), NodeState::kDead);
  // While it is dead, oss1 dies and comes back: c1 is not told (it is dead).
  clock_.advance(31s);
  ping(s2);
  mgs_.tick(clock_.now());
  ASSERT_EQ(state(s1), NodeState::kDead);
  EXPECT_TRUE(deliver_all().empty());
  back(s1);
  ASSERT_EQ(state(s1), NodeState::kUp);
  EXPECT_TRUE(deliver_all().empty());
  // c1 is back: it is told oss1 is up (changed while it was away), not oss2.
  back(c1);
  auto got = deliver_all();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "oss1");
  EXPECT_EQ(got[0].state, NodeState::kUp);
  EXPECT_EQ(mgs_.counters().resyncs, 1u);
  ping(c1);  // once
  EXPECT_TRUE(deliver_all().empty());

  // Notifications given up after the retries: told on its next ping, in the state then.
  clock_.advance(31s);
  ping(c1);
  ping(s1);
  mgs_.tick(clock_.now());
  ASSERT_EQ(state(s2), NodeState::kDead);
  const uint64_t dropped = mgs_.counters().notifications_dropped;
  for (int attempt = 0; attempt <= 3; ++attempt) {
    clock_.advance(10s);
    auto out = mgs_.take_notifications(clock_.now());
    ASSERT_EQ(out.size(), 1u) << attempt;
    ASSERT_EQ(out[0].to, c1);
    mgs_.notification_done(out[0].token, false, clock_.now());
  }
  EXPECT_EQ(mgs_.counters().notifications_dropped, dropped + 1);
  clock_.advance(10s);
  EXPECT_TRUE(mgs_.take_notifications(clock_.now()).empty());
  ping(c1);
  got = deliver_all();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "oss2");
  EXPECT_EQ(got[0].state, NodeState::kDead);
  EXPECT_EQ(mgs_.counters().resyncs, 2u);
}

TEST_F(MgsTest, TheRateBoundsABurst) {
  MgsOptions o = opts();
  o.notify_rate = 100;  // bursts of 10
  o.notify_window = 1000;
  MgsCore mgs(o, 1);
  mgs.on_register(RegisterReq{"oss1", kRoleServer, {nid("10.0.0.3@tcp")}, 1}, clock_.now());
  for (int i = 0; i < 40; ++i) {
    std::string n = "10.0.1." + std::to_string(i + 1) + "@tcp";
    mgs.on_register(RegisterReq{"c" + std::to_string(i), kRoleClient, {nid(n.c_str())}, 1},
                    clock_.now());
  }
  clock_.advance(31s);
  for (uint32_t id = 1; id <= 40; ++id) mgs.on_ping(PingReq{id, 1, {}}, clock_.now());
  mgs.tick(clock_.now());
  EXPECT_EQ(mgs.take_notifications(clock_.now()).size(), 10u);
  clock_.advance(100ms);
  EXPECT_EQ(mgs.take_notifications(clock_.now()).size(), 10u);
  clock_.advance(50ms);
  EXPECT_EQ(mgs.take_notifications(clock_.now()).size(), 5u);
}

// A node that cannot reach a server tells the MGS; the MGS believes it only when its own
// ping of the server goes unanswered.
TEST_F(MgsTest, ReportedNodeIsSuspectAtOnceAndDeadWhenTheMgsCannotReachItEither) {
  uint32_t s = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t c1 = add("c1", kRoleClient, "10.0.0.5@tcp");
  add("c2", kRoleClient, "10.0.0.6@tcp");
  mgs_.take_changes();
  clock_.advance(2s);
  ReportReq r{c1, 7, {{nid("10.0.0.3@tcp").pack(), HealthKind::kPeerNiConnectError}}};
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

// CI's sequence: a dead server registers again, and before the MGS sends the news another
// server reports it unreachable (its old connection's error), which makes it suspect until
// the MGS's own ping answers. The clients must still be told it is up: a suspect is up
// until verified, and its return to up is no news of its own.
TEST_F(MgsTest, AServerBackButSuspectWhenTheNewsGoesOutIsAnnouncedUp) {
  uint32_t s = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t s2 = add("oss2", kRoleServer, "10.0.0.4@tcp");
  uint32_t c1 = add("c1", kRoleClient, "10.0.0.5@tcp");
  mgs_.take_changes();
  for (int i = 0; i < 4; ++i) {  // oss1 falls silent: dead after 3 periods and the grace
    clock_.advance(10s);
    ping(s2);
    ping(c1);
    mgs_.tick(clock_.now());
  }
  ASSERT_EQ(state(s), NodeState::kDead);
  auto out = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].req.events.at(0).state, NodeState::kDead);
  mgs_.notification_done(out[0].token, true, clock_.now());
  clock_.advance(1s);
  mgs_.on_register(RegisterReq{"oss1", kRoleServer, {nid("10.0.0.3@tcp")}, 8}, clock_.now());
  ASSERT_EQ(state(s), NodeState::kUp);
  ReportReq r{s2, 7, {{nid("10.0.0.3@tcp").pack(), HealthKind::kPeerNiConnectError}}};
  mgs_.on_report(r, clock_.now());
  ASSERT_EQ(state(s), NodeState::kSuspect);
  out = mgs_.take_notifications(clock_.now());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to, c1);
  ASSERT_EQ(out[0].req.events.size(), 1u);
  EXPECT_EQ(out[0].req.events[0].name, "oss1");
  EXPECT_EQ(out[0].req.events[0].state, NodeState::kUp);
  mgs_.notification_done(out[0].token, true, clock_.now());
  // The MGS's ping answers: up again, and nothing more to send.
  auto v = mgs_.take_verifications();
  ASSERT_EQ(v.size(), 1u);
  mgs_.verification_done(v[0].token, true, clock_.now());
  EXPECT_EQ(state(s), NodeState::kUp);
  EXPECT_TRUE(mgs_.take_notifications(clock_.now()).empty());
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
              {{nid("10.0.0.4@tcp").pack(), HealthKind::kPeerNiConnectError},
               {nid("10.0.0.5@tcp").pack(), HealthKind::kPeerNiUnreachable}}};
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
  ReportReq r{c1, 7, {{nid("10.0.0.3@tcp").pack(), HealthKind::kPeerNiUnreachable}}};
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
                           {{nid("10.0.0.99@tcp").pack(), HealthKind::kPeerNiUnreachable},
                            {nid("10.0.0.5@tcp").pack(), HealthKind::kPeerNiUnreachable}}},
                 clock_.now());
  EXPECT_TRUE(mgs_.take_verifications().empty());
  EXPECT_EQ(state(s), NodeState::kUp);
  EXPECT_EQ(state(c1), NodeState::kUp);
}

TEST_F(MgsTest, ReportFromAnUnknownNodeOrWhenReportsAreOffChangesNothing) {
  uint32_t s = add("oss1", kRoleServer, "10.0.0.3@tcp");
  uint32_t c1 = add("c1", kRoleClient, "10.0.0.5@tcp");
  std::vector<Unreachable> peers{{nid("10.0.0.3@tcp").pack(), HealthKind::kPeerNiConnectError}};
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
