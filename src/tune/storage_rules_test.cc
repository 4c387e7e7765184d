// The GPFS paper's rules with the paper's own numbers.
#include "tune/storage_rules.h"

#include <gtest/gtest.h>

#include "rpc/msg_types.h"

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

namespace pfsnet {
namespace {

MessageReport message(uint32_t type, std::vector<IntervalView> seconds) {
  MessageReport m;
  m.type = type;
  m.execution.seconds = std::move(seconds);
  return m;
}

// A server's own statistics give the rules their figures: the busiest second's requests x
// the block size, and a request's hold of a buffer (execution less the wait for it).
TEST(StorageRulesTest, AServersStatisticsGiveThroughputAndTheBufferHold) {
  StatsReport r;
  r.messages.push_back(message(kMsgBlockWrite, {{100, 10, 20, 1, 30}, {101, 30, 20, 1, 30}}));
  r.messages.push_back(message(kMsgBlockRead, {{101, 10, 40, 1, 60}, {102, 0, 0, 0, 0}}));
  r.messages.push_back(message(kMsgBlockBufferWait, {{100, 10, 5, 0, 9}, {101, 40, 5, 0, 9}}));
  r.messages.push_back(message(kMsgPing, {{101, 1000, 0.1, 0.1, 0.1}}));  // not a block request
  StorageMeasured m = measure_block_service(r, 256 << 10);
  EXPECT_EQ(m.requests, 50);
  EXPECT_EQ(m.peak_requests, 40);  // second 101: 30 writes and 10 reads
  EXPECT_DOUBLE_EQ(m.throughput, 40.0 * (256 << 10));
  EXPECT_NEAR(m.turnaround_s, 0.019, 1e-12);  // (10x20 + 30x20 + 10x40) / 50 = 24 ms, less 5
  EXPECT_NE(m.source.find("50 block requests"), std::string::npos) << m.source;
  // Fed to the rules: 10 MB/s x 19 ms = 0.19 MB: one buffer, three with the margin.
  StorageMeasure sm;
  sm.throughput = m.throughput;
  sm.turnaround_s = m.turnaround_s;
  StorageAdvice a = advise_storage(sm);
  EXPECT_EQ(a.buffers_needed, 1);
  EXPECT_EQ(a.buffers, 3);
  // Waits longer than the executions (they cannot be, but figures are rounded): no hold.
  StatsReport w;
  w.messages.push_back(message(kMsgBlockWrite, {{100, 2, 1, 1, 1}}));
  w.messages.push_back(message(kMsgBlockBufferWait, {{100, 2, 3, 3, 3}}));
  EXPECT_EQ(measure_block_service(w, 65536).turnaround_s, 0);
  // Nothing served: nothing measured.
  StorageMeasured none = measure_block_service(StatsReport{}, 65536);
  EXPECT_EQ(none.requests, 0);
  EXPECT_EQ(none.throughput, 0);
  EXPECT_TRUE(none.source.empty());
}

}  // namespace
}  // namespace pfsnet
