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

// Issue 38: an application registers its handlers before its node listens, so a peer is
// never told "no handler" (NOT_FOUND, permanent) for a type the node serves: before
// listen() its connects are refused (retryable), after it every handler serves.
TEST(NodeTest, HandlersRegisteredBeforeListeningServeFromTheFirstConnection) {
  auto a = Node::start(config("127.0.5.5"), kKey);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = Node::create(config("127.0.5.6"), kKey);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  Nid bn = (*b)->nids()[0];
  constexpr uint32_t kEcho = kMsgFirstUser + 3;
  (*b)->handle(
      kEcho, "ECHO",
      [](RpcRequest& req) {
        RpcResponse resp;
        resp.payload = Buffer::copy_of(req.payload.span());
        return resp;
      },
      HandlerMode::kInline);
  // Not listening yet: refused, a retryable error -- never NOT_FOUND.
  RpcReply r = (*a)->call(bn, kEcho, Buffer::copy_of("x"), nullptr, CallOptions{2s});
  EXPECT_FALSE(r.status.ok());
  EXPECT_NE(r.status.code(), Code::kNotFound) << r.status.to_string();
  EXPECT_EQ(r.status.health_kind(), HealthKind::kPeerNiConnectError) << r.status.to_string();
  // The node's own calls fail clearly until it listens (its deadlines run from then).
  r = (*b)->call((*a)->nids()[0], kMsgPing, Buffer(), nullptr, CallOptions{2s});
  EXPECT_EQ(r.status.code(), Code::kInvalidArgument) << r.status.to_string();
  ASSERT_TRUE((*b)->listen().ok());
  ASSERT_TRUE((*b)->listen().ok());  // idempotent
  r = (*a)->call(bn, kEcho, Buffer::copy_of("served"), nullptr, CallOptions{5s});
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(std::string(r.payload.view()), "served");
  (*b)->stop();
  EXPECT_EQ((*b)->listen().code(), Code::kCancelled);
  // A node created and stopped without listening stops cleanly.
  auto c = Node::create(config("127.0.5.7"), kKey);
  ASSERT_TRUE(c.ok());
  (*c)->stop();
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
