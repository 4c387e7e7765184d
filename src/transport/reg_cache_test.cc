// RegCache: a buffer sent again and again is registered once; a freed buffer's entry is
// never matched again (not even by a new buffer at its address) and is swept; eviction
// keeps registrations in use open; one-off registrations; failures.
#include "transport/reg_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "transport/fake_registrations.h"

namespace pfsnet {
namespace {

struct CacheFabric : FakeRegistrations {
  RegCache::Hooks hooks() { return FakeRegistrations::hooks<RegCache::Hooks>(); }
};

TEST(RegCacheTest, OneBufferSentAgainAndAgainIsRegisteredOnce) {
  CacheFabric f;
  RegCache c(f.hooks(), 8);
  BulkData b = make_bulk(Buffer(1 << 20));
  void* first = nullptr;
  for (int i = 0; i < 100; ++i) {
    RegCache::Ref r = c.get(b);
    ASSERT_TRUE(r);
    if (i == 0) first = r->handle;
    EXPECT_EQ(r->handle, first);
  }
  EXPECT_EQ(f.regs, 1);
  EXPECT_EQ(c.stats().hits, 99u);
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(f.unregs, 0);  // the cache keeps it while the buffer lives
}

TEST(RegCacheTest, AFreedBufferIsNeverMatchedAgainEvenAtTheSameAddress) {
  CacheFabric f;
  RegCache c(f.hooks(), 8);
  const Buffer* old_addr;
  {
    BulkData b = make_bulk(Buffer(4096));
    old_addr = b.get();
    ASSERT_TRUE(c.get(b));
  }
  // A new buffer: the allocator may well hand out the same address (tried a bounded
  // number of times); either way it gets a registration of its own.
  BulkData b2;
  std::vector<BulkData> others;
  for (int i = 0; i < 100 && (!b2 || b2.get() != old_addr); ++i) {
    if (b2) others.push_back(b2);
    b2 = make_bulk(Buffer(4096));
  }
  RegCache::Ref r = c.get(b2);
  ASSERT_TRUE(r);
  EXPECT_EQ(f.regs, 2);
  EXPECT_EQ(r->handle, reinterpret_cast<void*>(2));
  if (b2.get() == old_addr) {
    EXPECT_EQ(c.stats().stale, 1u);
    EXPECT_EQ(f.unregs, 1);  // the stale registration closed when it was found
  }
}

TEST(RegCacheTest, StaleEntriesAreSweptWithTheirRegistrations) {
  CacheFabric f;
  RegCache c(f.hooks(), 100);
  {
    std::vector<BulkData> gone;
    for (int i = 0; i < 10; ++i) {
      gone.push_back(make_bulk(Buffer(4096)));
      ASSERT_TRUE(c.get(gone.back()));
    }
  }
  BulkData keep = make_bulk(Buffer(4096));
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(c.get(keep));
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(f.unregs, 10);
  EXPECT_EQ(f.live.size(), 1u);
}

TEST(RegCacheTest, EvictionKeepsARegistrationInUseOpenUntilItsLastUser) {
  CacheFabric f;
  RegCache c(f.hooks(), 2);
  BulkData a = make_bulk(Buffer(10)), b = make_bulk(Buffer(10)), d = make_bulk(Buffer(10));
  RegCache::Ref in_flight = c.get(a);
  ASSERT_TRUE(c.get(b));
  ASSERT_TRUE(c.get(b));  // b is now the most recently used; a is the least
  ASSERT_TRUE(c.get(d));
  EXPECT_EQ(c.stats().evicted, 1u);
  EXPECT_EQ(c.stats().entries, 2u);
  EXPECT_EQ(f.unregs, 0);  // a's registration is still in use
  in_flight.reset();
  EXPECT_EQ(f.unregs, 1);
  EXPECT_EQ(f.live, (std::vector<int>{2, 3}));
  // a again: registered anew.
  ASSERT_TRUE(c.get(a));
  EXPECT_EQ(f.regs, 4);
}

TEST(RegCacheTest, OneOffRegistrationsCloseWithTheirLastUser) {
  CacheFabric f;
  RegCache c(f.hooks(), 2);
  uint8_t mem[64];
  RegCache::Ref r = c.register_once(mem, sizeof mem);
  ASSERT_TRUE(r);
  EXPECT_EQ(c.stats().entries, 0u);
  r.reset();
  EXPECT_EQ(f.unregs, 1);
}

TEST(RegCacheTest, AFailedRegistrationCachesNothing) {
  CacheFabric f;
  RegCache c(f.hooks(), 2);
  f.fail = true;
  BulkData b = make_bulk(Buffer(10));
  EXPECT_FALSE(c.get(b));
  EXPECT_FALSE(c.register_once(b->data(), 10));
  EXPECT_EQ(c.stats().entries, 0u);
  f.fail = false;
  EXPECT_TRUE(c.get(b));
  EXPECT_EQ(f.regs, 1);
}

}  // namespace
}  // namespace pfsnet
