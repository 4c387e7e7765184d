// pfsnet::Node, the public API, with two nodes in this process over real loopback sockets.
#include <gtest/gtest.h>
#include <pfsnet/node.h>
#include <unistd.h>

#include <string>

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

Config config(const std::string& addr) {
  Config c;
  c.node.name = addr;
  c.nets.push_back({*Nid::parse(addr + "@tcp"), static_cast<uint16_t>(22000 + getpid() % 20000)});
  return c;
}

constexpr char kKey[] = "node-test-cluster-key-0123456789";

TEST(NodeTest, CallsServesAndKeepsStatistics) {
  auto a = Node::start(config("127.0.5.1"), kKey);
  auto b = Node::start(config("127.0.5.2"), kKey);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  Nid bn = (*b)->nids()[0];
  // PING is served by every node.
  RpcReply r = (*a)->call(bn, kMsgPing, Buffer(), make_bulk(Buffer::copy_of("hello")));
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(std::string(r.bulk.view()), "hello");
  // An application's own message type.
  constexpr uint32_t kUpper = kMsgFirstUser + 1;
  (*b)->handle(
      kUpper, "UPPER",
      [](RpcRequest& req) {
        std::string s(req.payload.view());
        for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        RpcResponse resp;
        resp.payload = Buffer::copy_of(s);
        return resp;
      },
      HandlerMode::kWorker);
  r = (*a)->call(bn, kUpper, Buffer::copy_of("pfsnet"), nullptr, CallOptions{5s});
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(std::string(r.payload.view()), "PFSNET");
  // An unserved type is a clear error.
  r = (*a)->call(bn, kMsgFirstUser + 2, Buffer(), nullptr, CallOptions{5s});
  EXPECT_EQ(r.status.code(), Code::kNotFound);
  // NIs, peers and statistics.
  ASSERT_EQ((*a)->nis().size(), 1u);
  EXPECT_EQ((*a)->nis()[0].send_count, 3u);
  ASSERT_EQ((*a)->peers().size(), 1u);
  EXPECT_EQ((*a)->peers()[0].nid, bn);
  (*a)->stop();
  (*b)->stop();
  r = (*a)->call(bn, kMsgPing, Buffer());
  EXPECT_EQ(r.status.code(), Code::kCancelled);
}

TEST(NodeTest, BadStartsAreClearErrors) {
  Config none;
  EXPECT_EQ(Node::start(none, kKey).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Node::start(config("127.0.5.3"), "short").status().code(), Code::kInvalidArgument);
  Config elsewhere = config("127.0.5.4");
  elsewhere.nets[0].nid = *Nid::parse(
      "198.18.255.254@tcp");  // not an address of this host (a netns range nothing here holds)
  auto n = Node::start(elsewhere, kKey);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().health_kind(), HealthKind::kPeerNiAddrError) << n.status().to_string();
}

}  // namespace
}  // namespace pfsnet
