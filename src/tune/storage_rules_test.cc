// The GPFS paper's rules with the paper's own numbers.
#include "tune/storage_rules.h"

#include <gtest/gtest.h>

namespace pfsnet {
namespace {

constexpr double kMB = 1024.0 * 1024.0;

bool has(const StorageAdvice& a, const std::string& code) {
  for (const TuneProblem& p : a.problems)
    if (p.code == code) return true;
  return false;
}

TEST(StorageRulesTest, SmallRandomRequestsGetTheirShareOfTheBlockRate) {
  StorageMeasure m;
  m.block_size = 256 << 10;
  m.request_bytes = 32 << 10;
  m.throughput = 128 * kMB;
  StorageAdvice a = advise_storage(m);
  EXPECT_DOUBLE_EQ(a.request_share, 0.125);
  EXPECT_DOUBLE_EQ(a.request_rate, 16 * kMB);  // the paper: 16 MB/s of 128
  EXPECT_EQ(a.block_size, 32u << 10);
  EXPECT_NE(a.why_block_size.find("16.0 of 128.0 MB/s"), std::string::npos) << a.why_block_size;
  ASSERT_EQ(a.problems.size(), 1u);
  EXPECT_EQ(a.problems[0].code, "block_above_requests");
  // Requests of a whole block: nothing to say.
  m.request_bytes = 256 << 10;
  a = advise_storage(m);
  EXPECT_EQ(a.block_size, 256u << 10);
  EXPECT_TRUE(a.problems.empty());
}

TEST(StorageRulesTest, BuffersAreThroughputTimesTurnaroundTripled) {
  StorageMeasure m;
  m.block_size = 256 << 10;
  m.throughput = 130 * kMB;
  m.turnaround_s = 0.040;
  m.buffers = 80;
  StorageAdvice a = advise_storage(m);
  EXPECT_EQ(a.buffers_needed, 21);  // 5.2 MB / 256 KiB, as the paper says
  EXPECT_EQ(a.buffers, 63);
  EXPECT_NE(a.why_buffers.find("5.2 MB"), std::string::npos) << a.why_buffers;
  EXPECT_FALSE(has(a, "buffers_below_need"));  // the paper's 80 are enough
  m.buffers = 16;
  a = advise_storage(m);
  EXPECT_TRUE(has(a, "buffers_below_need"));
}

TEST(StorageRulesTest, PrefetchCoversTheReaderRateTimesTurnaroundWithinThePagepool) {
  StorageMeasure m;
  m.block_size = 256 << 10;
  m.throughput = 130 * kMB;
  m.turnaround_s = 0.040;
  m.prefetch_depth = 4;
  m.pagepool = 100 << 20;
  StorageAdvice a = advise_storage(m);
  EXPECT_EQ(a.prefetch_depth, 22);   // 21 blocks in flight + the one being copied
  ASSERT_EQ(a.problems.size(), 1u);  // the default 64 buffers are enough; 4 ahead are not
  EXPECT_EQ(a.problems[0].code, "prefetch_below_need");
  m.pagepool = 2 << 20;  // 8 blocks: the pagepool is the limit
  a = advise_storage(m);
  EXPECT_EQ(a.prefetch_depth, 8);
  EXPECT_NE(a.why_prefetch.find("the pagepool holds 8"), std::string::npos);
  // Unknown figures: the settings stay, no problem invented.
  StorageMeasure unknown;
  a = advise_storage(unknown);
  EXPECT_EQ(a.prefetch_depth, unknown.prefetch_depth);
  EXPECT_EQ(a.buffers, unknown.buffers);
  EXPECT_TRUE(a.problems.empty());
}

}  // namespace
}  // namespace pfsnet
