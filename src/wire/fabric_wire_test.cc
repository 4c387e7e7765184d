#include "wire/fabric_wire.h"

#include <gtest/gtest.h>

#include <vector>

namespace pfsnet {
namespace {

std::vector<uint8_t> message(const FabricHeader& h, size_t body) {
  std::vector<uint8_t> m(kFabricHeaderSize + body, 0xab);
  encode_fabric_header(h, m.data());
  return m;
}

TEST(FabricWireTest, HeaderRoundTrips) {
  FabricHeader h{FabricMsg::kFrameRma, kRmaBulk, 37, 100, 0x1122334455667788ull};
  auto m = message(h, 100);
  auto d = decode_fabric_header(m);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->type, FabricMsg::kFrameRma);
  EXPECT_EQ(d->flags, kRmaBulk);
  EXPECT_EQ(d->credits, 37);
  EXPECT_EQ(d->body_len, 100u);
  EXPECT_EQ(d->cookie, 0x1122334455667788ull);
}

TEST(FabricWireTest, BadHeadersAreRefusedWithTheirReason) {
  FabricHeader h{FabricMsg::kFrame, 0, 0, 10, 0};
  auto m = message(h, 10);
  EXPECT_NE(decode_fabric_header({m.data(), 15}).status().message().find("truncated"),
            std::string::npos);
  // A body length that is not what arrived.
  auto shorter = message(h, 9);
  EXPECT_NE(decode_fabric_header(shorter).status().message().find("body of 10"), std::string::npos);
  m[0] = 9;
  EXPECT_NE(decode_fabric_header(m).status().message().find("unknown type 9"), std::string::npos);
  FabricHeader noop{FabricMsg::kNoop, 0, 1, 4, 0};
  EXPECT_FALSE(decode_fabric_header(message(noop, 4)).ok());
  noop.body_len = 0;
  EXPECT_TRUE(decode_fabric_header(message(noop, 0)).ok());
}

TEST(FabricWireTest, RmaDescriptorsAreBounded) {
  uint8_t b[kRmaDescSize];
  encode_rma_desc({0x7f0000001000, 42, 2 << 20}, b);
  auto d = decode_rma_desc(b, 2 << 20);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->addr, 0x7f0000001000u);
  EXPECT_EQ(d->key, 42u);
  EXPECT_EQ(d->len, 2u << 20);
  EXPECT_FALSE(decode_rma_desc(b, (2 << 20) - 1).ok());
  EXPECT_FALSE(decode_rma_desc({b, kRmaDescSize - 1}, 2 << 20).ok());
  encode_rma_desc({1, 1, 0}, b);
  EXPECT_FALSE(decode_rma_desc(b, 2 << 20).ok());
}

TEST(FabricWireTest, ConnParamsRoundTripAndAreChecked) {
  auto e = encode_conn_params({kFabricWireVersion, 64, 4096});
  auto p = decode_conn_params(e);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rx_depth, 64u);
  EXPECT_EQ(p->msg_size, 4096u);
  EXPECT_FALSE(decode_conn_params({e.data(), 8}).ok());
  EXPECT_FALSE(decode_conn_params(encode_conn_params({kFabricWireVersion, 1, 4096})).ok());
  EXPECT_FALSE(decode_conn_params(encode_conn_params({kFabricWireVersion, 64, 100})).ok());
  auto v2 = decode_conn_params(encode_conn_params({2, 64, 4096}));
  EXPECT_EQ(v2.status().code(), Code::kRejected);
  e[0] ^= 1;
  EXPECT_NE(decode_conn_params(e).status().message().find("another protocol"), std::string::npos);
}

}  // namespace
}  // namespace pfsnet
