// The registry of message types: no id or name twice, all below the applications' range;
// an engine names every registered type, and each service serves its types under the
// registered names.
#include <gtest/gtest.h>
#include <pfsnet/msg_types.h>

#include <set>
#include <string>

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
  Net net(NetOptions{}, {n}, clock, [&](TransportEvents& ev) {
    TransportOptions to;
    to.cluster_key = "0123456789abcdef";
    return std::make_unique<MemTransport>(hub, to, std::vector<Nid>{n}, clock, ev);
  });
  RpcEngine rpc(net, RpcOptions{});
  serve_ping(rpc, 1 << 20);
  for (const MsgType& t : kMsgTypes) {
    EXPECT_EQ(rpc.type_name(t.id), t.name);
    EXPECT_EQ(rpc.type_by_name(t.name), t.id);
  }
  EXPECT_EQ(rpc.type_name(kMsgFirstUser + 7), "type-1031");
}

}  // namespace
}  // namespace pfsnet
