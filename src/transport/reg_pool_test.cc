// RegPool: steady traffic registers nothing new; size classes; the idle cap; close() with
// sinks still out; a retired sink; a sink that outlives every other owner of the pool;
// failures.
#include "transport/reg_pool.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "transport/fake_registrations.h"

namespace pfsnet {
namespace {

struct PoolFabric : FakeRegistrations {
  RegPool::Hooks hooks() { return FakeRegistrations::hooks<RegPool::Hooks>(); }
};

constexpr size_t kMiB = 1 << 20;

TEST(RegPoolTest, SteadyTrafficReusesOneRegisteredChunk) {
  PoolFabric f;
  auto pool = RegPool::make(f.hooks(), 4 * kMiB, 8 * kMiB);
  uint8_t* first = nullptr;
  void* handle = nullptr;
  for (int i = 0; i < 100; ++i) {
    auto s = pool->take(kMiB);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->buf.size(), kMiB);
    if (i == 0) {
      first = s->buf.data();
      handle = s->handle;
    }
    EXPECT_EQ(s->buf.data(), first);  // the same chunk, its pages already touched
    EXPECT_EQ(s->handle, handle);
    s->buf.data()[kMiB - 1] = 7;  // writable to its end
  }
  EXPECT_EQ(f.regs, 1);
  RegPool::Stats st = pool->stats();
  EXPECT_EQ(st.taken, 100u);
  EXPECT_EQ(st.registrations, 1u);
  EXPECT_EQ(st.out, 0u);
  EXPECT_EQ(st.idle_bytes, kMiB);
  pool.reset();
  EXPECT_EQ(f.unregs, 1);  // the idle chunk goes with the pool
}

TEST(RegPoolTest, SizeClassesArePowersOfTwoFromTheMinimum) {
  PoolFabric f;
  auto pool = RegPool::make(f.hooks(), 4 * kMiB, 64 * kMiB);
  auto a = pool->take(100);                 // 64 KiB class
  auto b = pool->take(RegPool::kMinChunk);  // 64 KiB class: a second chunk (a is out)
  auto c = pool->take(kMiB + 1);            // 2 MiB class
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->buf.size(), 100u);
  EXPECT_EQ(c->buf.size(), kMiB + 1);
  EXPECT_EQ(f.regs, 3);
  EXPECT_FALSE(pool->take(4 * kMiB + 1));  // over max_chunk: not pooled
  EXPECT_FALSE(pool->take(0));
  a.reset();
  auto d = pool->take(RegPool::kMinChunk / 2);  // a's chunk again
  ASSERT_TRUE(d);
  EXPECT_EQ(f.regs, 3);
  EXPECT_EQ(pool->stats().out, 3u);
}

TEST(RegPoolTest, IdleMemoryBeyondTheCapIsUnregisteredAndFreed) {
  PoolFabric f;
  auto pool = RegPool::make(f.hooks(), 4 * kMiB, 2 * kMiB);
  {
    std::vector<RegPool::Sink> held;
    for (int i = 0; i < 3; ++i) held.push_back(*pool->take(kMiB));
    EXPECT_EQ(pool->stats().out, 3u);
  }
  RegPool::Stats st = pool->stats();
  EXPECT_EQ(st.idle_bytes, 2 * kMiB);
  EXPECT_EQ(st.freed, 1u);
  EXPECT_EQ(f.unregs, 1);
  EXPECT_EQ(f.live.size(), 2u);
}

TEST(RegPoolTest, ARetiredSinkIsUnregisteredWhenItComesBackNotReused) {
  PoolFabric f;
  auto pool = RegPool::make(f.hooks(), 4 * kMiB, 8 * kMiB);
  void* first;
  {
    RegPool::Sink s = *pool->take(kMiB);
    first = s.handle;
    pool->retire(s.buf.data());
    EXPECT_EQ(f.unregs, 0);  // still out: its registration stays until it comes back
  }
  EXPECT_EQ(f.unregs, 1);
  EXPECT_EQ(pool->stats().idle_bytes, 0u);
  RegPool::Sink next = *pool->take(kMiB);
  EXPECT_NE(next.handle, first);
  EXPECT_EQ(f.regs, 2);
}

TEST(RegPoolTest, CloseFreesIdleChunksNowAndHeldOnesWhenTheyComeBack) {
  PoolFabric f;
  auto pool = RegPool::make(f.hooks(), 4 * kMiB, 64 * kMiB);
  auto held = pool->take(kMiB);
  {
    auto idle = pool->take(kMiB);  // a second chunk, idle once dropped (held's is out)
    ASSERT_TRUE(idle);
  }
  ASSERT_TRUE(held);
  EXPECT_EQ(f.regs, 2);
  pool->close();
  EXPECT_EQ(f.unregs, 1);
  EXPECT_FALSE(pool->take(kMiB));  // closed
  held.reset();
  EXPECT_EQ(f.unregs, 2);
  EXPECT_TRUE(f.live.empty());
  EXPECT_EQ(pool->stats().out, 0u);
}

TEST(RegPoolTest, ASinkOutlivesEveryOtherOwnerOfThePool) {
  PoolFabric f;
  auto domain = std::make_shared<int>(1);  // what the hooks capture (the fabric domain)
  std::weak_ptr<int> alive = domain;
  RegPool::Hooks h = f.hooks();
  h.unreg = [base = h.unreg, domain](void* x) { base(x); };
  domain.reset();
  auto pool = RegPool::make(std::move(h), 4 * kMiB, 64 * kMiB);
  Buffer b = std::move(pool->take(1000)->buf);
  pool.reset();
  EXPECT_FALSE(alive.expired());  // the sink keeps the pool, the pool keeps the domain
  b.data()[999] = 1;
  b = Buffer();
  EXPECT_TRUE(alive.expired());
  EXPECT_EQ(f.unregs, 1);
}

TEST(RegPoolTest, AFailedRegistrationTakesNothing) {
  PoolFabric f;
  f.fail = true;
  auto pool = RegPool::make(f.hooks(), 4 * kMiB, 64 * kMiB);
  EXPECT_FALSE(pool->take(kMiB));
  f.fail = false;
  EXPECT_TRUE(pool->take(kMiB));
  RegPool::Stats st = pool->stats();
  EXPECT_EQ(st.registrations, 1u);
  EXPECT_EQ(st.taken, 1u);
}

TEST(RegPoolTest, SinksComeBackFromOtherThreads) {
  auto pool = RegPool::make({}, 4 * kMiB, 64 * kMiB);  // no registration needed
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&pool] {
      for (int i = 0; i < 200; ++i) {
        auto s = pool->take(RegPool::kMinChunk * (1 + i % 3));
        ASSERT_TRUE(s);
        EXPECT_EQ(s->handle, nullptr);
      }
    });
  for (auto& t : ts) t.join();
  RegPool::Stats st = pool->stats();
  EXPECT_EQ(st.taken, 800u);
  EXPECT_EQ(st.out, 0u);
  EXPECT_LE(st.registrations, 4u * 3u);  // at most one chunk per thread and class
}

}  // namespace
}  // namespace pfsnet
