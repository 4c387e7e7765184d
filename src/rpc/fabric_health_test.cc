// Fabric errors into health (LNet health, docs/sources.md), over the real fabric transport
// (libfabric's tcp provider on loopback): each error of the table in transport/fabric_health.h is
// injected at the transport seam -- as a connection-manager error while connecting, or as a
// completion error of a data frame on an open connection -- and the test checks the
// health kind counted, the NI it lowers (peer NI, or the local NI taken out of
// selection), and that the RPC is resent and answered.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "rpc/node_core.h"
#include "rpc/ping.h"
#include "rpc/rpc_engine.h"
#include "transport/fabric_transport.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

// An address of this process's own on loopback: ctest runs the cases in parallel.
Nid nid(int host, const char* net) {
  int pid = static_cast<int>(getpid());
  return *Nid::parse("127." + std::to_string(20 + pid % 200) + "." +
                     std::to_string((pid / 200) % 250) + "." + std::to_string(host) + "@" + net);
}

// A node core with two @o2ib NIs on one fabric transport, on the real clock, without a
// driver: no recovery ping restores an NI while a case looks at it.
struct FabNode {
  explicit FabNode(std::vector<Nid> nids)
      : core(options(this, std::move(nids))), net(core.net()), rpc(core.rpc()) {
    EXPECT_TRUE(core.start(Duration::zero()).ok());
  }
  static NodeCoreOptions options(FabNode* self, std::vector<Nid> nids) {
    NodeCoreOptions c;
    for (const Nid& n : nids) c.cfg.nets.push_back(NetConfig{n});
    c.stats = false;
    c.health = false;
    c.net = NetOptions{};
    RpcOptions o;
    o.default_timeout = 10s;
    o.retry_count = 3;
    c.rpc = o;
    c.make_transport = [self, nids](TransportEvents& ev, NodeCore& core) {
      TransportOptions to;
      to.cluster_key = "fabric-health-test-key";
      FabricOptions fo;
      fo.provider = "tcp";
      auto t = std::make_unique<FabricTransport>(to, fo, nids, core.clock(), ev);
      self->fabric = t.get();
      return t;
    };
    return c;
  }
  FabricTransport* fabric = nullptr;  // set while `core` is built: declared before it
  NodeCore core;
  Net& net;
  RpcEngine& rpc;
};

uint64_t errors(const std::vector<NiInfo>& v, HealthKind k) {
  uint64_t n = 0;
  for (auto& i : v) n += i.errors[static_cast<size_t>(k)];
  return n;
}
uint64_t resends(const std::vector<NiInfo>& v) {
  uint64_t n = 0;
  for (auto& i : v) n += i.resends;
  return n;
}

struct Case {
  const char* name;
  FabricSite site;
  int err;
  HealthKind kind;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class FabricHealthTest : public ::testing::TestWithParam<Case> {
 protected:
  FabricHealthTest() : client_({a1_, a2_}), server_({b1_, b2_}) {}

  // Closes every connection to the server and waits (bounded) until none is left.
  bool drop_all() {
    client_.net.drop_peer(b1_, "test: new connections wanted");
    for (int i = 0; i < 500; ++i) {
      int conns = 0;
      for (const NiInfo& p : client_.net.peers()) conns += p.connections;
      if (conns == 0) return true;
      std::this_thread::sleep_for(10ms);  // bounded wait for the transport's close
    }
    return false;
  }

  const Nid a1_ = nid(1, "o2ib"), a2_ = nid(2, "o2ib1");
  const Nid b1_ = nid(11, "o2ib"), b2_ = nid(12, "o2ib1");
  FabNode client_, server_;
};

TEST_P(FabricHealthTest, TheErrorLowersTheRightNiAndTheRpcIsResent) {
  const Case& c = GetParam();
  // Discovery first: the client learns both of the server's NIDs.
  ASSERT_TRUE(client_.rpc.call(b1_, kMsgPing, Buffer()).status.ok());
  if (c.site == FabricSite::kConnect) {
    ASSERT_TRUE(drop_all());
  }
  uint64_t resends_before = resends(client_.net.peers());
  client_.fabric->inject_fault(c.site, c.err);
  RpcReply r = client_.rpc.call(b1_, kMsgPing, Buffer());
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();

  std::vector<NiInfo> nis = client_.net.nis(), peers = client_.net.peers();
  EXPECT_GT(resends(peers), resends_before);
  if (c.kind == HealthKind::kLocalNiDown) {
    // The local NI is out of selection until its link comes back; the other carried it.
    EXPECT_EQ(errors(nis, HealthKind::kLocalNiDown), 1u);
    int down = 0;
    for (const NiInfo& n : nis) down += !n.up;
    EXPECT_EQ(down, 1);
    for (const NiInfo& p : peers) EXPECT_EQ(p.health, kMaxHealth) << p.nid.to_string();
  } else {
    // One peer NI demerited with exactly this kind; both local NIs still up.
    EXPECT_EQ(errors(peers, c.kind), 1u);
    int lowered = 0;
    for (const NiInfo& p : peers) lowered += p.health < kMaxHealth;
    EXPECT_EQ(lowered, 1);
    for (int k = 1; k < kNumHealthKinds; ++k)
      if (static_cast<HealthKind>(k) != c.kind) {
        EXPECT_EQ(errors(peers, static_cast<HealthKind>(k)), 0u) << k;
      }
    for (const NiInfo& n : nis) EXPECT_TRUE(n.up) << n.nid.to_string();
  }
  // The node still works: more RPCs are answered.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(client_.rpc.call(b1_, kMsgPing, Buffer()).status.ok());
}

INSTANTIATE_TEST_SUITE_P(
    SeedTable, FabricHealthTest,
    ::testing::Values(
        Case{"AddrError", FabricSite::kConnect, ENODATA, HealthKind::kPeerNiAddrError},
        Case{"RouteError", FabricSite::kConnect, EHOSTUNREACH, HealthKind::kPeerNiUnreachable},
        Case{"Unreachable", FabricSite::kConnect, ETIMEDOUT, HealthKind::kPeerNiUnreachable},
        Case{"Rejected", FabricSite::kConnect, ECONNREFUSED, HealthKind::kPeerNiConnectionRejected},
        Case{"ConnectError", FabricSite::kConnect, ECONNABORTED, HealthKind::kPeerNiConnectError},
        Case{"DeviceRemovalWhileConnecting", FabricSite::kConnect, ENODEV,
             HealthKind::kLocalNiDown},
        Case{"ConnectionReset", FabricSite::kCompletion, ECONNRESET,
             HealthKind::kPeerNiConnectError},
        Case{"RetryExceeded", FabricSite::kCompletion, ETIMEDOUT, HealthKind::kPeerNiUnreachable},
        Case{"DeviceRemoval", FabricSite::kCompletion, ENODEV, HealthKind::kLocalNiDown}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// The table itself, including what is not an error of the peer.
TEST(FabricHealthTable, KindsBySiteAndError) {
  EXPECT_EQ(fabric_health_kind(FabricSite::kConnect, ECONNREFUSED),
            HealthKind::kPeerNiConnectionRejected);
  EXPECT_EQ(fabric_health_kind(FabricSite::kCompletion, ECONNREFUSED),
            HealthKind::kPeerNiConnectError);
  EXPECT_EQ(fabric_health_kind(FabricSite::kConnect, -EADDRNOTAVAIL), HealthKind::kPeerNiAddrError);
  EXPECT_EQ(fabric_health_kind(FabricSite::kCompletion, ENETDOWN), HealthKind::kLocalNiDown);
  EXPECT_EQ(fabric_health_kind(FabricSite::kCompletion, ECANCELED), HealthKind::kNone);
  EXPECT_EQ(fabric_health_kind(FabricSite::kCompletion, EIO), HealthKind::kPeerNiConnectError);
}

}  // namespace
}  // namespace pfsnet
