// MGS leadership's decisions (LeaderLease) on a manual clock, against a model of etcd's
// leases and leader key: one MGS leads with an epoch, a leader cut off from etcd stops
// serving before its lease can expire there, and across cuts, late answers and restarts
// there is never a millisecond with two leaders. The real etcd is etcd_leadership_test's.
#include "membership/leader_lease.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>

namespace pfsnet {
namespace {

using namespace std::chrono_literals;
using Role = LeaderLease::Role;
using Call = LeaderLease::Call;

const TimePoint kT0 = TimePoint(std::chrono::hours(1));

// etcd as the recipe sees it: leases that expire `ttl` after the grant or keep-alive that
// reached it, and one key that goes with its lease.
struct ModelEtcd {
  struct Lease {
    TimePoint expires;
    Duration ttl;
  };
  std::map<int64_t, Lease> leases;
  int64_t next_lease = 100;
  uint64_t revision = 1;
  struct Key {
    std::string value;
    uint64_t create_revision = 0;
    int64_t lease = 0;
  };
  std::optional<Key> key;

  void expire(TimePoint now) {
    for (auto it = leases.begin(); it != leases.end();) {
      if (it->second.expires <= now) {
        if (key && key->lease == it->first) key.reset();
        it = leases.erase(it);
      } else {
        ++it;
      }
    }
  }
  int64_t grant(TimePoint now, Duration ttl) {
    expire(now);
    leases[next_lease] = {now + ttl, ttl};
    return next_lease++;
  }
  Duration keepalive(TimePoint now, int64_t id) {
    expire(now);
    auto it = leases.find(id);
    if (it == leases.end()) return Duration::zero();
    it->second.expires = now + it->second.ttl;
    return it->second.ttl;
  }
  // nullopt: the put failed (the lease is gone), as etcd answers an error.
  std::optional<LeaderLease::Campaign> campaign(TimePoint now, const std::string& v, int64_t id) {
    expire(now);
    LeaderLease::Campaign c;
    if (!key) {
      if (!leases.count(id)) return std::nullopt;
      key = Key{v, ++revision, id};
      c.won = true;
    }
    c.leader = key->value;
    c.epoch = key->create_revision;
    c.leader_lease = key->lease;
    return c;
  }
};

// One MGS: its LeaderLease and the call it has in flight (sent, reaching etcd at `arrive`,
// answered at `answer`).
struct Mgs {
  LeaderLease core;
  Call call = Call::kNone;
  TimePoint sent, arrive, answer;
  // The outcome, computed when the call reaches etcd.
  std::optional<int64_t> granted;
  Duration ttl_left{};
  std::optional<LeaderLease::Campaign> campaign;
  bool lost = false;     // no answer comes back
  bool reaches = false;  // the call reaches etcd (and acts there)
};

LeaseOptions options() {
  LeaseOptions o;
  o.ttl = 5s;
  o.keepalive = 1500ms;
  o.margin = 500ms;
  o.retry = 500ms;
  return o;
}

// Drives one MGS's call at `now` through the model: a call started now takes `up` to
// reach etcd and `down` back.
// A lost call either never reaches etcd or reaches it and loses its answer (`reaches`).
void step(ModelEtcd& etcd, std::vector<Mgs>& ms, size_t i, TimePoint now, Duration up,
          Duration down, bool lost, bool reaches = false) {
  Mgs& m = ms[i];
  if (m.call == Call::kNone) {
    m.call = m.core.next(now);
    if (m.call == Call::kNone) return;
    m.sent = now;
    m.arrive = now + up;
    m.answer = m.arrive + down;
    m.lost = lost;
    m.reaches = !lost || reaches;
    m.granted.reset();
    m.campaign.reset();
    m.ttl_left = Duration::zero();
  }
  if (m.reaches && now == m.arrive) {
    switch (m.call) {
      case Call::kGrant:
        m.granted = etcd.grant(now, 5s);
        break;
      case Call::kKeepAlive:
        m.ttl_left = etcd.keepalive(now, m.core.lease());
        break;
      case Call::kCampaign:
        m.campaign = etcd.campaign(now, "mgs" + std::to_string(i), m.core.lease());
        break;
      case Call::kNone:
        break;
    }
  }
  if (now < m.answer) return;
  if (m.lost) {
    // The client's timeout: 1 s after sending.
    if (now < m.sent + 1s) return;
    m.core.failed(m.call, now);
  } else if (m.call == Call::kGrant) {
    m.core.granted(*m.granted, 5s, m.sent);
  } else if (m.call == Call::kKeepAlive) {
    m.core.kept_alive(m.ttl_left, m.sent);
  } else if (m.campaign) {
    m.core.campaigned(*m.campaign, m.sent);
  } else {
    m.core.failed(m.call, now);  // the lease was gone: an error answer
  }
  m.call = Call::kNone;
}

TEST(LeaderLeaseTest, TheFirstCampaignLeadsWithTheKeysRevisionAndTheOtherFollowsIt) {
  ModelEtcd etcd;
  std::vector<Mgs> ms;
  ms.push_back({LeaderLease(options(), "mgs0")});
  ms.push_back({LeaderLease(options(), "mgs1")});
  for (TimePoint t = kT0; t < kT0 + 3s; t += 1ms)
    for (size_t i = 0; i < ms.size(); ++i) step(etcd, ms, i, t, 1ms, 1ms, false);
  auto a = ms[0].core.view(kT0 + 3s), b = ms[1].core.view(kT0 + 3s);
  EXPECT_EQ(a.role, Role::kLeader);
  EXPECT_EQ(a.leader, "mgs0");
  EXPECT_EQ(b.role, Role::kFollower);
  EXPECT_EQ(b.leader, "mgs0");
  EXPECT_EQ(a.epoch, etcd.key->create_revision);
  EXPECT_EQ(b.epoch, a.epoch);
  // The leader keeps its lease alive: at 3 s it was renewed (5 s TTL).
  EXPECT_GT(a.serve_until, kT0 + 3s);
  EXPECT_GE(ms[0].core.counters().keepalives, 1u);
}

TEST(LeaderLeaseTest, ALeaderCutOffFromEtcdServesUntilItsLeasesSafeEndAndNotAMomentLonger) {
  LeaderLease l(options(), "mgs0");
  ASSERT_EQ(l.next(kT0), Call::kGrant);
  l.granted(7, 5s, kT0);
  ASSERT_EQ(l.next(kT0 + 2ms), Call::kCampaign);
  l.campaigned({true, "mgs0", 42, 7}, kT0 + 2ms);
  EXPECT_TRUE(l.leading(kT0 + 3ms));
  EXPECT_EQ(l.view(kT0 + 3ms).epoch, 42u);
  // A keep-alive sent a keep-alive period after the campaign is answered: the lease is
  // safe until then + 5 s - 0.5 s.
  const TimePoint ka = kT0 + 2ms + 1500ms;
  EXPECT_EQ(l.next(ka - 1ms), Call::kNone);
  ASSERT_EQ(l.next(ka), Call::kKeepAlive);
  l.kept_alive(5s, ka);
  // From then on every call fails.
  TimePoint t = kT0 + 3000ms;
  for (int i = 0; i < 100 && t < kT0 + 6s; ++i, t += 100ms)
    if (l.next(t) != Call::kNone) l.failed(Call::kKeepAlive, t);
  const TimePoint end = ka + 5s - 500ms;
  EXPECT_TRUE(l.leading(end - 1ns));
  EXPECT_FALSE(l.leading(end));
  EXPECT_EQ(l.view(end).role, Role::kNone);
  EXPECT_EQ(l.view(end).epoch, 42u);  // the last epoch it knew
  // Its next call is a new lease, and its old one counts as lost.
  EXPECT_EQ(l.next(end + 1s), Call::kGrant);
  EXPECT_EQ(l.counters().lease_lost, 1u);
}

TEST(LeaderLeaseTest, ALostAnswerToAWonCampaignIsFoundOnTheNextAsItsOwnLease) {
  LeaderLease l(options(), "mgs0");
  ASSERT_EQ(l.next(kT0), Call::kGrant);
  l.granted(7, 5s, kT0);
  ASSERT_EQ(l.next(kT0), Call::kCampaign);
  l.failed(Call::kCampaign, kT0 + 1s);  // it won in etcd, but the answer was lost
  EXPECT_FALSE(l.leading(kT0 + 1s));
  ASSERT_EQ(l.next(kT0 + 1500ms), Call::kCampaign);
  l.campaigned({false, "mgs0", 9, 7}, kT0 + 1500ms);
  EXPECT_TRUE(l.leading(kT0 + 1501ms));
  EXPECT_EQ(l.view(kT0 + 1501ms).epoch, 9u);
}

TEST(LeaderLeaseTest, AFollowerWhoseLeaderKeyIsStillHeldByItsOwnOldSelfWaitsForIt) {
  // Restarted: the key still holds its value on the old run's lease.
  LeaderLease l(options(), "mgs0");
  ASSERT_EQ(l.next(kT0), Call::kGrant);
  l.granted(8, 5s, kT0);
  ASSERT_EQ(l.next(kT0), Call::kCampaign);
  l.campaigned({false, "mgs0", 9, 7}, kT0);
  auto v = l.view(kT0 + 1ms);
  EXPECT_EQ(v.role, Role::kFollower);
  EXPECT_EQ(v.leader, "mgs0");
  // What it heard ages out after a TTL without news.
  EXPECT_EQ(l.view(kT0 + 5s).role, Role::kNone);
}

// Three MGSs for ten simulated minutes: messages take 0-400 ms each way, one in eight is
// lost, and every so often one MGS is cut off from etcd for a while. At every
// millisecond at most one of them leads, and leaders come with ever higher epochs.
TEST(LeaderLeaseTest, CutsLateAnswersAndLostMessagesNeverMakeTwoLeaders) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    ModelEtcd etcd;
    std::vector<Mgs> ms;
    for (int i = 0; i < 3; ++i) ms.push_back({LeaderLease(options(), "mgs" + std::to_string(i))});
    std::vector<TimePoint> cut_until(3, TimePoint::min());
    std::uniform_int_distribution<int> delay(0, 400), pct(0, 99), who(0, 2), cut_len(1, 12);
    uint64_t last_epoch = 0;
    int changes = 0;
    Duration led{};
    std::string leader;
    for (TimePoint t = kT0; t < kT0 + 10min; t += 1ms) {
      if ((t - kT0) % 20s == Duration::zero()) {  // a cut of 1-12 s
        int i = who(rng);
        cut_until[static_cast<size_t>(i)] = t + std::chrono::seconds(cut_len(rng));
      }
      for (size_t i = 0; i < ms.size(); ++i) {
        bool cut = t < cut_until[i];
        bool lost = cut || pct(rng) < 12;
        step(etcd, ms, i, t, std::chrono::milliseconds(delay(rng)),
             std::chrono::milliseconds(delay(rng)), lost, !cut && pct(rng) < 50);
      }
      int leaders = 0;
      for (size_t i = 0; i < ms.size(); ++i) {
        auto v = ms[i].core.view(t);
        if (v.role != Role::kLeader) continue;
        ++leaders;
        if (v.leader != leader || v.epoch != last_epoch) {
          ASSERT_GT(v.epoch, last_epoch) << "seed " << seed << ": a leader with an old epoch";
          last_epoch = v.epoch;
          leader = v.leader;
          ++changes;
        }
      }
      ASSERT_LE(leaders, 1) << "seed " << seed << " at " << (t - kT0).count() / 1000000 << " ms";
      if (leaders == 1) led += 1ms;
    }
    // Not a run without leaders: someone led most of the time, and the cuts moved it.
    EXPECT_GT(led, 5min) << "seed " << seed;
    EXPECT_GE(changes, 3) << "seed " << seed;
    std::printf("seed %u: led %.1f s of 600, %d leaders in turn, last epoch %llu\n", seed,
                std::chrono::duration<double>(led).count(), changes,
                static_cast<unsigned long long>(last_epoch));
  }
}

}  // namespace
}  // namespace pfsnet
