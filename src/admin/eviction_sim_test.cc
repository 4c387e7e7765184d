// Dead means freed (issue 36, item 4), on the in-process cluster (rpc/sim_cluster.h) with
// the real MembershipService, TokenService, BlockService and StripedFile on every node, on
// manual time: n2 the MGS, n3 and n4 block servers (n3 the token manager as the layout's
// first server), n5 and n6 clients; clients ping every 2 s, dead after 2 missed periods.
// A client cut off from everyone holds a write token another client needs: the manager
// drops it at the MGS's verdict (not after the 10 s revocation timeout); when the cut heals
// the returning client's write under the token it lost is refused; it learns it was
// evicted, drops its tokens, registers again, and writes again under a new token.
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "membership/service.h"
#include "membership/sim_members.h"
#include "net/fault_injector.h"
#include "rpc/msg_types.h"
#include "rpc/sim_cluster.h"
#include "storage/block_service.h"
#include "storage/striped_file.h"
#include "storage/test_pattern.h"
#include "storage/tokens.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kBlock = 64 << 10;
constexpr Duration kTimeout = 10s;  // RPC and revocation timeout

class EvictionSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int h : {2, 3, 4, 5, 6})
      ASSERT_NE(m_.start(h, [this, h](SimNode& n, const Config&,
                                      MembershipService& m) { attach(h, n, m); }),
                nullptr);
    ASSERT_TRUE(c_.run_until([&] { return m_.up_in_table(2) == 5; }, 5s));
  }
  // Servers serve blocks (one in-memory target each), refusing evicted clients' I/O; every
  // node but the MGS runs a token service that follows the MGS's verdicts.
  void attach(int h, SimNode& n, MembershipService& m) {
    if (h == 3 || h == 4) {
      BlockServiceOptions o;
      o.block_size = kBlock;
      o.buffers = 4;
      o.threads = 0;
      o.targets = {"mem"};
      o.capacity = 16 << 20;
      o.fence = &m.fence();
      blocks_[h] = &n.attach<BlockService>(o, n.rpc, nullptr, c_.clock(), n.core.timer_queue());
      EXPECT_TRUE(blocks_[h]->open().ok());
    }
    if (h != 2) {
      tokens_[h] = &n.attach<TokenService>(n.rpc, kTimeout);
      tokens_[h]->follow(m.fence());
    }
  }
  std::unique_ptr<StripedFile> open(int client, const std::string& file, bool tokens = true) {
    StripedFileOptions o;
    o.pagepool = 1 << 20;
    o.timeout = kTimeout;
    o.tokens = tokens ? tokens_.at(client) : nullptr;
    auto f = StripedFile::open(c_.find(SimMembers::name(client))->rpc, file,
                               {SimMembers::nid(3), SimMembers::nid(4)}, o);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    return f.ok() ? std::move(*f) : nullptr;
  }
  // Block 0 of `file` as a fresh open on n6 reads it.
  std::vector<uint8_t> block0(const std::string& file) {
    auto f = open(6, file, false);
    std::vector<uint8_t> got(kBlock);
    EXPECT_TRUE(f && f->read(0, got).ok());
    return got;
  }
  void cut_off(int host, bool cut) {
    for (int o : {2, 3, 4, 5, 6})
      if (o != host) c_.cut(SimMembers::name(host), SimMembers::name(o), cut);
  }

  SimCluster c_;
  SimMembers m_{c_};
  std::map<int, TokenService*> tokens_;
  std::map<int, BlockService*> blocks_;
};

TEST_F(EvictionSimTest, ADeadClientsTokensAreFreeAtTheVerdictAndItCannotWriteUnderThemAgain) {
  auto f5 = open(5, "shared");
  ASSERT_TRUE(f5);
  ASSERT_TRUE(f5->write(0, test_pattern(2 * kBlock, 1)).ok());  // a token on [0, end)
  ASSERT_TRUE(f5->flush().ok());

  // n5 cut off; n6 asks for block 0: the manager revokes from n5, which does not answer.
  cut_off(5, true);
  const TimePoint cut = c_.clock().now();
  std::optional<TimePoint> granted;
  Status grant_status;
  uint64_t evicted_at_grant = 0;
  tokens_.at(6)->acquire_async(SimMembers::nid(3), "shared", 0, kBlock, 0,
                               [&](Result<TokenRange> r) {
                                 granted = c_.clock().now();
                                 grant_status = r.status();
                                 evicted_at_grant = tokens_.at(3)->stats().holders_evicted;
                               });
  auto verdict = c_.run_until([&] { return m_.state_in(2, "n5") == "dead"; }, 20s);
  ASSERT_TRUE(verdict.has_value());
  const TimePoint dead_at = c_.clock().now();  // the verdict came in the step before
  ASSERT_TRUE(c_.run_until([&] { return granted.has_value(); }, kTimeout));
  ASSERT_TRUE(grant_status.ok()) << grant_status.to_string();
  EXPECT_EQ(evicted_at_grant, 1u) << "granted while n5 still held the range";
  EXPECT_LE(*granted - dead_at, 1s) << "not freed at the verdict";
  EXPECT_LT(*granted - cut, kTimeout) << "freed by the revocation's timeout, not the verdict";
  EXPECT_EQ(tokens_.at(3)->stats().holders_evicted, 1u);
  // Its requests' records went from the server's reply cache with the eviction (a late
  // copy of one is answered OUTCOME_UNKNOWN, never run again).
  EXPECT_GE(c_.find(SimMembers::name(3))->rpc.replay_stats().evicted_clients, 1u);
  auto f6 = open(6, "shared");
  ASSERT_TRUE(f6);
  const auto theirs = test_pattern(kBlock, 2);
  ASSERT_TRUE(f6->write(0, theirs).ok());
  ASSERT_TRUE(f6->flush().ok());
  ASSERT_TRUE(f6->close().ok());

  // Its links to the servers heal, not yet the one to the MGS: n5 still thinks it holds
  // [0, end), and its write goes out -- and is refused, the error at its flush.
  c_.heal("n5", "n3");
  c_.heal("n5", "n4");
  (void)f5->write(0, test_pattern(kBlock, 3));
  Status flushed = f5->flush();
  EXPECT_EQ(flushed.code(), Code::kPeerDead) << flushed.to_string();
  EXPECT_EQ(block0("shared"), theirs) << "written under a token it had lost";
  EXPECT_GE(blocks_.at(3)->stats().evicted_refused, 1u);

  // The rest heals: it learns it was evicted, drops its tokens, registers again; the
  // servers readmit it.
  cut_off(5, false);
  auto back = c_.run_until(
      [&] {
        auto a = m_.at(5).counters().agent;
        return m_.state_in(2, "n5") == "up" && a && a->registered;
      },
      10s);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(m_.at(5).counters().agent->counters.evictions, 1u);
  EXPECT_EQ(f5->stats().tokens_lost, 1u);
  EXPECT_EQ(tokens_.at(5)->stats().evictions, 1u);
  ASSERT_TRUE(c_.run_until([&] { return m_.at(3).fence().evicted_count() == 0; }, 2s));
  // Its next write asks for a token again (n6 gives it back) and lands.
  const uint64_t acquired = f5->stats().tokens_acquired;
  const auto again = test_pattern(kBlock, 4);
  ASSERT_TRUE(f5->write(0, again).ok());
  ASSERT_TRUE(f5->flush().ok());
  EXPECT_EQ(f5->stats().tokens_acquired, acquired + 1);
  EXPECT_EQ(block0("shared"), again);
  EXPECT_TRUE(f5->close().ok());
  std::printf(
      "dead client's token granted to another %.1f s after the verdict (%.1f s after the "
      "cut; the revocation timeout is %.0f s); back %.1f s after the cut healed\n",
      std::chrono::duration<double>(*granted - dead_at).count(),
      std::chrono::duration<double>(*granted - cut).count(),
      std::chrono::duration<double>(kTimeout).count(),
      std::chrono::duration<double>(*back).count());
}

// The window between the token manager's word and a data server's: the MGS's news of n5's
// death reaches the block server n4 late (a drop rule on the MGS's MGS_NOTIFY to n4, taken
// away 1.5 s after the verdict: the MGS's retry after 1 s fails, the next, 2 s later, lands).
// n5, cut off from the MGS and the manager n3 but not from n4, writes block 1 (on n4) under
// the token it lost in that window: n4 has not heard, so the write lands. n6 must not be
// granted block 1 before n4 refuses n5 -- else n5's stale write could land after n6's.
// The manager keeps n5's tokens from others until the MGS says n5 is fenced (n4 acknowledged
// its death), so n6's write is the last one and block 1 holds n6's bytes.
TEST_F(EvictionSimTest, ADeadClientsTokensGoToOthersOnlyOnceEveryServerRefusesIt) {
  auto f5 = open(5, "window");
  ASSERT_TRUE(f5);
  ASSERT_TRUE(f5->write(0, test_pattern(2 * kBlock, 1)).ok());  // a token on [0, end)
  ASSERT_TRUE(f5->flush().ok());
  FaultRule lost;
  lost.action = FaultRule::Action::kDrop;
  lost.dst = SimMembers::nid(4);
  lost.msg_type = kMsgMgsNotify;
  lost.rate = 1;
  lost.health = HealthKind::kPeerNiUnreachable;
  const uint64_t rule = c_.find("n2")->net.add_fault(lost);
  for (int o : {2, 3, 6}) c_.cut("n5", SimMembers::name(o));
  std::optional<TimePoint> granted;
  tokens_.at(6)->acquire_async(SimMembers::nid(3), "window", kBlock, 2 * kBlock, 0,
                               [&](Result<TokenRange> r) {
                                 EXPECT_TRUE(r.ok()) << r.status().to_string();
                                 granted = c_.clock().now();
                               });
  ASSERT_TRUE(c_.run_until([&] { return m_.state_in(2, "n5") == "dead"; }, 20s));
  const TimePoint dead_at = c_.clock().now();
  // n3 knows (n5's tokens are lost to it), n4 not yet: n5's write of block 1 lands on n4.
  ASSERT_TRUE(c_.run_until([&] { return m_.at(3).fence().evicted_count() == 1; }, 1s));
  EXPECT_EQ(m_.at(4).fence().evicted_count(), 0u);
  EXPECT_FALSE(granted.has_value()) << "granted while a data server would still take n5's write";
  std::vector<uint8_t> stale = test_pattern(2 * kBlock, 3);
  stale.erase(stale.begin(), stale.begin() + kBlock);
  ASSERT_TRUE(f5->write(kBlock, stale).ok());
  ASSERT_TRUE(f5->flush().ok());  // n4 took it: it has not heard
  ASSERT_FALSE(
      c_.run_until([&] { return granted.has_value(); }, 1500ms - (c_.clock().now() - dead_at)));
  EXPECT_EQ(m_.at(4).fence().evicted_count(), 0u);
  ASSERT_TRUE(c_.find("n2")->net.del_fault(rule));
  ASSERT_TRUE(c_.run_until([&] { return granted.has_value(); }, kTimeout));
  EXPECT_GE(*granted - dead_at, 2900ms) << "granted before n4 heard of n5's death";
  EXPECT_LE(*granted - dead_at, 3200ms) << "not granted once n4 acknowledged it";
  EXPECT_EQ(m_.at(4).fence().evicted_count(), 1u);
  EXPECT_EQ(tokens_.at(3)->stats().fence_waits, 1u);
  auto f6 = open(6, "window");
  ASSERT_TRUE(f6);
  std::vector<uint8_t> theirs = test_pattern(2 * kBlock, 2);
  theirs.erase(theirs.begin(), theirs.begin() + kBlock);
  ASSERT_TRUE(f6->write(kBlock, theirs).ok());
  ASSERT_TRUE(f6->flush().ok());
  ASSERT_TRUE(f6->close().ok());
  // n5 writes block 1 again, still unaware: refused now, and n6's bytes stay.
  (void)f5->write(kBlock, stale);
  EXPECT_EQ(f5->flush().code(), Code::kPeerDead);
  auto r = open(6, "window", false);
  std::vector<uint8_t> got(kBlock);
  ASSERT_TRUE(r && r->read(kBlock, got).ok());
  EXPECT_EQ(got, theirs);
  // The cut heals: n5 learns it was evicted and comes back (nothing left in flight).
  for (int o : {2, 3, 6}) c_.heal("n5", SimMembers::name(o));
  EXPECT_TRUE(c_.run_until(
      [&] {
        auto a = m_.at(5).counters().agent;
        return m_.state_in(2, "n5") == "up" && a && a->registered;
      },
      10s));
  (void)f5->close();  // its last writes failed with its eviction: its close may say so
  std::printf("dead client's token granted %.1f s after the verdict, once every server knew\n",
              std::chrono::duration<double>(*granted - dead_at).count());
}

}  // namespace
}  // namespace pfsnet
