#include "base/free_list.h"

#include <gtest/gtest.h>
#include <pfsnet/buffer.h>

#include <memory>
#include <thread>
#include <vector>

namespace pfsnet {
namespace {

struct Pooled {
  PFSNET_THREAD_FREE_LIST(Pooled)
  char bytes[40] = {};
};

struct Bigger : Pooled {
  char more[64] = {};
};

constexpr bool kPools = !(PFSNET_UNDER_ASAN || PFSNET_UNDER_TSAN);

TEST(ThreadFreeListTest, ABlockFreedOnAThreadIsItsNextAllocationThere) {
  auto* a = new Pooled;
  void* where = a;
  size_t before = ThreadFreeList<Pooled>::cached();
  delete a;
  EXPECT_EQ(ThreadFreeList<Pooled>::cached(), kPools ? before + 1 : 0u);
  auto* b = new Pooled;
  if (kPools) {
    EXPECT_EQ(static_cast<void*>(b), where);
  }
  b->bytes[39] = 1;  // whole, usable
  delete b;
}

TEST(ThreadFreeListTest, AListHoldsAtMostItsBoundAndABurstComesBackWhole) {
  // A burst larger than the bound: every object is distinct and usable, and at most 256
  // of them come back from the list.
  std::vector<std::unique_ptr<Pooled>> v;
  for (int i = 0; i < 600; ++i) {
    v.push_back(std::make_unique<Pooled>());
    v.back()->bytes[0] = static_cast<char>(i);
  }
  std::vector<void*> freed;
  for (auto& p : v) freed.push_back(p.get());
  v.clear();
  EXPECT_EQ(ThreadFreeList<Pooled>::cached(), kPools ? 256u : 0u);
  std::vector<std::unique_ptr<Pooled>> again;
  for (int i = 0; i < 600; ++i) again.push_back(std::make_unique<Pooled>());
  size_t reused = 0;
  for (auto& p : again)
    for (void* f : freed) reused += p.get() == f;
  if (kPools) {
    EXPECT_GE(reused, 256u);
  }
  for (size_t i = 0; i < again.size(); ++i)
    for (size_t j = i + 1; j < std::min(again.size(), i + 8); ++j)
      EXPECT_NE(again[i].get(), again[j].get());
}

TEST(ThreadFreeListTest, AnotherSizeAndAnotherThreadAreServedToo) {
  // A derived class of another size goes to ::operator new and delete: its full size.
  size_t before = ThreadFreeList<Pooled>::cached();
  auto* big = new Bigger;
  big->more[63] = 7;
  delete big;
  EXPECT_EQ(ThreadFreeList<Pooled>::cached(), before);
  // Made on one thread, freed on another: the block joins the freeing thread's list,
  // and that thread ends with it (its list is drained at exit: LeakSanitizer would say).
  auto* p = new Pooled;
  std::thread t([p] {
    delete p;
    EXPECT_EQ(ThreadFreeList<Pooled>::cached(), kPools ? 1u : 0u);
    auto* q = new Pooled;
    if (kPools) {
      EXPECT_EQ(static_cast<void*>(q), static_cast<void*>(p));
    }
    delete q;
  });
  t.join();
}

TEST(ThreadFreeListTest, SmallBuffersTakeBlocksAndLargeOnesDoNot) {
  // A small Buffer's block goes back to the thread's list and is the next small Buffer's.
  void* first = nullptr;
  {
    Buffer b = Buffer::copy_of(std::string_view("sixty-four bytes or so"));
    EXPECT_EQ(b.view(), "sixty-four bytes or so");
    first = b.data();
  }
  Buffer again(detail::kSmallBuffer);
  again.data()[detail::kSmallBuffer - 1] = 1;  // the whole block is its own
  if (kPools) {
    EXPECT_EQ(static_cast<void*>(again.data()), first);
  }
  // One byte more is an ordinary allocation, never that block.
  Buffer large(detail::kSmallBuffer + 1);
  EXPECT_NE(static_cast<void*>(large.data()), first);
  large.data()[detail::kSmallBuffer] = 2;
}

TEST(ThreadFreeListTest, LargeBuffersComeBackFromTheCacheOfTheirSize) {
  const size_t mib = 1 << 20;
  const size_t limit = detail::large_block_cache_limit();
  // A block freed on another thread (a reply's, a cached block's) is the next one taken of
  // its whole pages here, not fresh memory.
  void* first = nullptr;
  std::thread([&] {
    Buffer b = Buffer::page_aligned(mib);
    b.data()[mib - 1] = 1;
    first = b.data();
  }).join();
  Buffer again = Buffer::page_aligned(mib - 100);
  EXPECT_EQ(again.size(), mib - 100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(again.data()) % 4096, 0u);
  again.data()[mib - 101] = 2;
  if (kPools) {
    EXPECT_EQ(static_cast<void*>(again.data()), first);
  }
  Buffer other = Buffer::page_aligned(2 * mib);  // another size: never that block
  EXPECT_NE(static_cast<void*>(other.data()), first);
  other.data()[2 * mib - 1] = 3;

  // Bounded: what is freed beyond the limit goes back to the heap.
  detail::set_large_block_cache_limit(8 * mib);
  EXPECT_LE(detail::large_block_cache_bytes(), 8 * mib);
  {
    std::vector<Buffer> many;
    for (int i = 0; i < 12; ++i) many.push_back(Buffer::page_aligned(mib));
  }
  EXPECT_LE(detail::large_block_cache_bytes(), 8 * mib);
  if (kPools) {
    EXPECT_GT(detail::large_block_cache_bytes(), 7 * mib);
  } else {
    EXPECT_EQ(detail::large_block_cache_bytes(), 0u);
  }
  detail::set_large_block_cache_limit(0);  // lowered: what it kept is freed at once
  EXPECT_EQ(detail::large_block_cache_bytes(), 0u);
  detail::set_large_block_cache_limit(limit);
}

}  // namespace
}  // namespace pfsnet
