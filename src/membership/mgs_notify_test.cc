// The MGS's notifications on a manual clock: to those who care, coalesced, rate-bounded,
// windowed and retried; told again to a subscriber that missed them; through servers when
// many clients wait for the same news; and a dead client's fence once every server knows.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/test_nid.h"
#include "membership/mgs.h"
#include "membership/mgs_test_fixture.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

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
  std::vector<Nid> told;
  for (const auto& m : out) {
    EXPECT_EQ(m.to, s2);  // the only server up that the news is not of
    EXPECT_EQ(m.nids, mgs.find(s2)->nids);
    ASSERT_EQ(m.req.events.size(), 1u);
    EXPECT_EQ(m.req.events[0].name, "oss1");
    EXPECT_LE(m.targets.size(), 3u);
    told.insert(told.end(), m.targets.begin(), m.targets.end());
  }
  std::sort(told.begin(), told.end());
  std::vector<Nid> want;
  for (uint32_t id : clients) want.push_back(mgs.find(id)->nids[0]);
  EXPECT_EQ(told, want);
  EXPECT_EQ(mgs.counters().relays, 4u);
  EXPECT_EQ(mgs.counters().relayed, 10u);
  // The first relay missed its second target; the second relay failed whole.
  const Nid missed = out[0].targets[1];
  mgs.notification_done(out[0].token, true, clock.now(), {1});
  mgs.notification_done(out[1].token, false, clock.now());
  mgs.notification_done(out[2].token, true, clock.now());
  mgs.notification_done(out[3].token, true, clock.now());
  EXPECT_EQ(mgs.counters().events_delivered, 6u);
  EXPECT_TRUE(mgs.take_notifications(clock.now()).empty());  // retries wait their back-off
  clock.advance(1s);
  auto again = mgs.take_notifications(clock.now());  // 4 wait: not more than relay_above
  ASSERT_EQ(again.size(), 4u);
  std::vector<Nid> retried;
  for (const auto& m : again) {
    EXPECT_TRUE(m.targets.empty());  // directly
    retried.push_back(m.nids[0]);
    mgs.notification_done(m.token, true, clock.now());
  }
  EXPECT_NE(std::find(retried.begin(), retried.end(), missed), retried.end());
  for (const Nid& t : out[1].targets)
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
  ReportReq r{s2, 7, {{nid("10.0.0.3@tcp"), HealthKind::kPeerNiConnectError}}};
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

}  // namespace
}  // namespace pfsnet
