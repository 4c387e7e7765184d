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

// A frame message's body: frame header, inline parts, then descriptors in their order.
// `descs`: the length of each descriptor.
std::vector<uint8_t> frame_body(FrameKind kind, uint32_t payload, uint32_t bulk, size_t inline_len,
                                std::vector<uint64_t> descs = {}) {
  FrameHeader h;
  h.kind = kind;
  h.xid = 9;
  h.payload_len = payload;
  h.bulk_len = bulk;
  EncodedHeader e;
  encode_header(h, &e);
  std::vector<uint8_t> b(e.begin(), e.end());
  b.resize(kHeaderSize + inline_len, 0x5a);
  for (size_t i = 0; i < descs.size(); ++i) {
    uint8_t d[kRmaDescSize];
    encode_rma_desc({0x1000u * (i + 1), 7u + i, descs[i]}, d);
    b.insert(b.end(), d, d + kRmaDescSize);
  }
  return b;
}

Result<FrameMsg> decode(FabricMsg type, uint8_t flags, const std::vector<uint8_t>& body) {
  FabricHeader fh{type, flags, 0, static_cast<uint32_t>(body.size()), 0};
  return decode_frame_msg(fh, body, FrameLimits{});
}

TEST(FabricWireTest, FrameMessagesCarryTheirPartsAndSinks) {
  // A read request offering a 1 MiB sink, inline.
  auto m =
      decode(FabricMsg::kFrame, kSinkOffered, frame_body(FrameKind::kRequest, 4, 0, 4, {1 << 20}));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->payload.size(), 4u);
  EXPECT_TRUE(m->bulk.empty());
  ASSERT_TRUE(m->sink);
  EXPECT_EQ(m->sink->key, 7u);
  EXPECT_EQ(m->sink->len, 1u << 20);
  EXPECT_FALSE(m->bulk_in_sink);
  // Its reply: 16 bytes of payload inline, 1 MiB of bulk in the sink.
  m = decode(FabricMsg::kFrame, kBulkInSink, frame_body(FrameKind::kReply, 16, 1 << 20, 16));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->bulk_in_sink);
  EXPECT_EQ(m->payload.size(), 16u);
  EXPECT_EQ(m->hdr.bulk_len, 1u << 20);
  // A write by RMA: payload and bulk read from the sender, and a sink for the reply.
  m = decode(FabricMsg::kFrameRma, kRmaPayload | kRmaBulk | kSinkOffered,
             frame_body(FrameKind::kRequest, 60000, 1 << 20, 0, {60000, 1 << 20, 1 << 20}));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE(m->payload_rma && m->bulk_rma && m->sink);
  EXPECT_EQ(m->payload_rma->key, 7u);
  EXPECT_EQ(m->bulk_rma->key, 8u);
  EXPECT_EQ(m->sink->key, 9u);
  // A plain inline frame.
  m = decode(FabricMsg::kFrame, 0, frame_body(FrameKind::kRequest, 3, 5, 8));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->bulk.size(), 5u);
}

TEST(FabricWireTest, BadFrameMessagesAreRefusedWithTheirReason) {
  auto why = [](FabricMsg t, uint8_t flags, const std::vector<uint8_t>& body) {
    auto m = decode(t, flags, body);
    return m.ok() ? std::string("accepted") : m.status().message();
  };
  auto has = [](const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
  };
  // Sinks belong to requests, bulk in a sink to replies.
  EXPECT_PRED2(
      has, why(FabricMsg::kFrame, kSinkOffered, frame_body(FrameKind::kReply, 0, 0, 0, {1 << 20})),
      "non-request");
  EXPECT_PRED2(has, why(FabricMsg::kFrame, kBulkInSink, frame_body(FrameKind::kRequest, 0, 10, 0)),
               "non-reply");
  // Bulk both in the sink and read from the sender; bulk in a sink of no length.
  EXPECT_PRED2(has,
               why(FabricMsg::kFrameRma, kBulkInSink | kRmaBulk,
                   frame_body(FrameKind::kReply, 0, 10, 0, {10})),
               "in a sink and");
  EXPECT_PRED2(has, why(FabricMsg::kFrame, kBulkInSink, frame_body(FrameKind::kReply, 0, 0, 0)),
               "in a sink and");
  // RMA flags on an inline frame; an RMA frame with nothing to read.
  EXPECT_PRED2(
      has, why(FabricMsg::kFrame, kRmaBulk, frame_body(FrameKind::kRequest, 0, 10, 0, {1 << 20})),
      "unknown flags");
  EXPECT_PRED2(has, why(FabricMsg::kFrameRma, 0, frame_body(FrameKind::kRequest, 4, 0, 4)),
               "nothing to read");
  // A missing descriptor, a sink larger than the frame limit, a region of the wrong size.
  EXPECT_PRED2(has, why(FabricMsg::kFrame, kSinkOffered, frame_body(FrameKind::kRequest, 4, 0, 4)),
               "lengths do not match");
  EXPECT_PRED2(
      has,
      why(FabricMsg::kFrame, kSinkOffered, frame_body(FrameKind::kRequest, 4, 0, 4, {64ull << 20})),
      "limit");
  EXPECT_PRED2(
      has, why(FabricMsg::kFrameRma, kRmaBulk, frame_body(FrameKind::kRequest, 0, 100, 0, {99})),
      "wrong length");
  // Not a frame message at all; a broken frame header.
  EXPECT_PRED2(has, why(FabricMsg::kNoop, 0, frame_body(FrameKind::kRequest, 0, 0, 0)),
               "not a frame");
  auto body = frame_body(FrameKind::kRequest, 0, 0, 0);
  body[3] ^= 1;
  EXPECT_FALSE(decode(FabricMsg::kFrame, 0, body).ok());
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
  // Version 1 had no reply sinks: its peers are refused, as any other version.
  for (uint16_t v : {uint16_t(1), uint16_t(kFabricWireVersion + 1)}) {
    auto other = decode_conn_params(encode_conn_params({v, 64, 4096}));
    EXPECT_EQ(other.status().code(), Code::kRejected) << "version " << v;
  }
  e[0] ^= 1;
  EXPECT_NE(decode_conn_params(e).status().message().find("another protocol"), std::string::npos);
}

}  // namespace
}  // namespace pfsnet
