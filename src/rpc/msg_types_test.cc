// The registry of message types: no id or name twice, all below the applications' range;
// an engine names every registered type, and each service serves its types under the
// registered names.
#include "rpc/msg_types.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "rpc/node_core.h"
#include "rpc/ping.h"
#include "transport/mem_transport.h"

namespace pfsnet {
namespace {

TEST(MsgTypesTest, NoIdOrNameTwice) {
  std::set<uint32_t> ids;
  std::set<std::string_view> names;
  for (const MsgType& t : kMsgTypes) {
    EXPECT_TRUE(ids.insert(t.id).second)
        << "duplicate message type id " << t.id << " (" << t.name << ")";
    EXPECT_TRUE(names.insert(t.name).second) << "duplicate message type name " << t.name;
    EXPECT_GT(t.id, 0u) << t.name;  // 0 is "any" in fault rules
    EXPECT_LT(t.id, kMsgFirstUser) << t.name;
    EXPECT_EQ(msg_type_name(t.id), t.name);
  }
  EXPECT_TRUE(msg_type_name(kMsgFirstUser).empty());
}

TEST(MsgTypesTest, AnEngineNamesEveryRegisteredType) {
  ManualClock clock;
  MemHub hub;
  Nid n = *Nid::parse("10.0.0.1@tcp");
  NodeCoreOptions o;
  o.cfg.nets.push_back(NetConfig{n});
  o.clock = &clock;
  o.timer_queue = &hub;  // on the manual clock
  o.make_transport = [&](TransportEvents& ev, NodeCore& core) {
    TransportOptions to;
    to.cluster_key = "0123456789abcdef";
    return std::make_unique<MemTransport>(hub, to, std::vector<Nid>{n}, core.clock(), ev);
  };
  NodeCore core(std::move(o));  // serves PING, as every node
  RpcEngine& rpc = core.rpc();
  for (const MsgType& t : kMsgTypes) {
    EXPECT_EQ(rpc.type_name(t.id), t.name);
    EXPECT_EQ(rpc.type_by_name(t.name), t.id);
  }
  EXPECT_EQ(rpc.type_name(kMsgFirstUser + 7), "type-1031");
}

// The pattern is filled and checked a period at a time: every byte must still be
// ping_pattern(i), across period boundaries, and one wrong byte anywhere must be caught.
TEST(PingPatternTest, FilledAndCheckedByteForByteAcrossPeriods) {
  const size_t n = (size_t{1} << 18) + 4099;  // two periods of 2^17 and a ragged tail
  Buffer b = make_ping_pattern(n);
  ASSERT_EQ(b.size(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(b.data()[i], ping_pattern(i)) << "byte " << i;
  EXPECT_TRUE(check_ping_pattern(b.span()));
  EXPECT_TRUE(check_ping_pattern(b.span().subspan(0, 0)));
  for (size_t at : {size_t{0}, size_t{511}, (size_t{1} << 17) - 1, size_t{1} << 17, n - 1}) {
    b.data()[at] ^= 0x40;
    EXPECT_FALSE(check_ping_pattern(b.span())) << "a flipped byte at " << at << " was not seen";
    b.data()[at] ^= 0x40;
  }
  // A prefix checks; the same bytes shifted by one do not.
  EXPECT_TRUE(check_ping_pattern(b.span().subspan(0, 1000)));
  EXPECT_FALSE(check_ping_pattern(b.span().subspan(1, 1000)));
}

}  // namespace
// SLOW_OPS leaves the cluster's own monitoring out of its p99 trigger: the services that
// send those messages report their lateness. Work -- an application's, the block service's,
// a ping an operator runs -- is in.
TEST(MsgTypesTest, MonitoringIsTheClustersWatchingOfItselfAndNothingElse) {
  for (uint32_t t : {kMsgMgsPing, kMsgMgsReport, kMsgMeshProbe, kMsgMeshSync, kMsgHealthReport,
                     kMsgNetverifyInfo, kMsgTuneProbe, kMsgRpcDone})
    EXPECT_TRUE(monitoring_msg(t)) << t;
  for (uint32_t t : {kMsgPing, kMsgBrwWrite, kMsgBrwRead, kMsgBlockWrite, kMsgBlockRead,
                     kMsgTokenAcquire, kMsgSelftestRun, kMsgIobench, kMsgFirstUser})
    EXPECT_FALSE(monitoring_msg(t)) << t;
}

}  // namespace pfsnet
