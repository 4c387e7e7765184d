// The server's job statistics (stats/job_stats.h) fed by the RPC engine: two jobs on one
// client and one on another, known loads, counted exactly per job and per client -- over the
// in-memory transport on the manual clock (rpc/rpc_test_fixture.h).
#include <gtest/gtest.h>

#include <memory>

#include "rpc/rpc_test_fixture.h"
#include "stats/rpc_stats.h"

namespace pfsnet::rpc_test {
namespace {

const JobEntry* entry(const JobStats::View& v, const std::string& key) {
  for (const JobEntry& e : v.top)
    if (e.key == key) return &e;
  return nullptr;
}

TEST_F(RpcTest, TheServerCountsEachJobAndEachClientExactly) {
  RpcStats stats(StatsConfig{}, clock_, false);
  server_.rpc.set_stats(&stats);
  // Its own calls name no job: they carry its process's (RpcOptions::default_job_id).
  Node other(hub_, clock_, nid("10.0.0.3@tcp"), 8, 8, 0, kWireVersionMax, "pbs.77");
  auto r = std::make_shared<Replies>();
  auto call = [&](Node& from, const char* job, size_t size, int n) {
    CallOptions co;
    co.job_id = job;
    for (int i = 0; i < n; ++i)
      from.rpc.call_async(
          b_, kEcho, Buffer::copy_of(std::string(size, 'x')), nullptr,
          [r](RpcReply&& x) { r->got.push_back(std::move(x)); }, co);
  };
  call(client_, "A", 1000, 5);
  call(client_, "B", 10, 3);
  call(other, "C", 100, 4);
  call(other, "", 7, 2);
  // And one without a job id: counted under "".
  client_.rpc.call_async(b_, kEcho, Buffer::copy_of(std::string_view("yy")), nullptr,
                         [r](RpcReply&& x) { r->got.push_back(std::move(x)); });
  pump_until([&] { return r->got.size() == 15; });
  ASSERT_EQ(r->got.size(), 15u);
  for (const RpcReply& x : r->got) EXPECT_TRUE(x.status.ok()) << x.status.to_string();

  JobStats::View jobs = stats.jobs().top_jobs(10, JobStats::By::kBytes);
  ASSERT_EQ(jobs.top.size(), 5u);
  EXPECT_EQ(jobs.top[0].key, "A");
  const JobEntry *a = entry(jobs, "A"), *b = entry(jobs, "B"), *c = entry(jobs, "C"),
                 *none = entry(jobs, "");
  ASSERT_TRUE(a && b && c && none);
  EXPECT_EQ(a->rpcs, 5u);
  EXPECT_EQ(a->bytes_in, 5u * 1000);
  EXPECT_EQ(a->bytes_out, 5u * 1000) << "echoed";
  EXPECT_NE(a->type(kEcho), nullptr);
  EXPECT_EQ(b->rpcs, 3u);
  EXPECT_EQ(b->bytes_in, 30u);
  EXPECT_EQ(c->rpcs, 4u);
  EXPECT_EQ(c->bytes_in, 400u);
  EXPECT_EQ(none->rpcs, 1u);
  const JobEntry* own = entry(jobs, "pbs.77");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->rpcs, 2u);
  EXPECT_EQ(own->bytes_in, 14u);
  EXPECT_EQ(jobs.other.rpcs, 0u);

  JobStats::View clients = stats.jobs().top_clients(10, JobStats::By::kRpcs);
  ASSERT_EQ(clients.top.size(), 2u);
  EXPECT_EQ(clients.top[0].key, a_.to_string());
  EXPECT_EQ(clients.top[0].rpcs, 9u);
  EXPECT_EQ(clients.top[0].bytes_in, 5u * 1000 + 30 + 2);
  EXPECT_EQ(clients.top[1].key, "10.0.0.3@tcp");
  EXPECT_EQ(clients.top[1].rpcs, 6u);
  // The client keeps none: it answered nothing.
  server_.rpc.set_stats(nullptr);
}

}  // namespace
}  // namespace pfsnet::rpc_test
