#include "wire/frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace pfsnet {
namespace {

FrameHeader sample() {
  FrameHeader h;
  h.kind = FrameKind::kReply;
  h.flags = kFlagBulkFromServer;
  h.src_nid = Nid::parse("127.0.0.2@tcp")->pack();
  h.dst_nid = Nid::parse("10.2.0.5@o2ib1")->pack();
  h.xid = 0x0123456789abcdefULL;
  h.msg_type = 7;
  h.payload_len = 100;
  h.bulk_len = 2 * 1024 * 1024;
  h.credits = 3;
  h.exec_ns = 123456789;
  h.status = 9;
  h.health = 4;
  return h;
}

TEST(FrameTest, RoundTrip) {
  EncodedHeader e;
  encode_header(sample(), &e);
  auto d = decode_header(e, FrameLimits{});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  FrameHeader h = sample();
  EXPECT_EQ(d->kind, h.kind);
  EXPECT_EQ(d->flags, h.flags);
  EXPECT_EQ(d->src_nid, h.src_nid);
  EXPECT_EQ(d->dst_nid, h.dst_nid);
  EXPECT_EQ(d->xid, h.xid);
  EXPECT_EQ(d->msg_type, h.msg_type);
  EXPECT_EQ(d->payload_len, h.payload_len);
  EXPECT_EQ(d->bulk_len, h.bulk_len);
  EXPECT_EQ(d->credits, h.credits);
  EXPECT_EQ(d->exec_ns, h.exec_ns);
  EXPECT_EQ(d->status, h.status);
  EXPECT_EQ(d->health, h.health);
  // Little-endian magic "PFS1".
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(e.data()), 4), "PFS1");
}

// A request carries the client's incarnation and done_lag where a reply carries its
// execution time and status, and only those.
TEST(FrameTest, RequestCarriesIncarnationAndDoneLag) {
  FrameHeader h = sample();
  h.kind = FrameKind::kRequest;
  h.incarnation = 0xfedcba9876543210ULL;
  h.done_lag = 0x89abcdefU;
  EncodedHeader e;
  encode_header(h, &e);
  auto d = decode_header(e, FrameLimits{});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->incarnation, h.incarnation);
  EXPECT_EQ(d->done_lag, h.done_lag);
  EXPECT_EQ(d->exec_ns, 0u);
  EXPECT_EQ(d->status, 0u);
  EXPECT_EQ(d->health, 0u);
  auto r = decode_header(
      [&] {
        FrameHeader rep = sample();
        EncodedHeader er;
        encode_header(rep, &er);
        return er;
      }(),
      FrameLimits{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->incarnation, 0u);
  EXPECT_EQ(r->done_lag, 0u);
}

TEST(FrameTest, TruncatedHeader) {
  EncodedHeader e;
  encode_header(sample(), &e);
  for (size_t n = 0; n < kHeaderSize; ++n) {
    auto d = decode_header(std::span(e.data(), n), FrameLimits{});
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), Code::kProtocol);
    EXPECT_NE(d.status().message().find("truncated header"), std::string::npos);
  }
}

TEST(FrameTest, OversizedLengthsRefusedBeforeAllocation) {
  FrameHeader h = sample();
  h.bulk_len = 2 * 1024 * 1024 + 1;
  EncodedHeader e;
  encode_header(h, &e);
  auto d = decode_header(e, FrameLimits{});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), "malformed frame: bulk length 2097153 exceeds limit 2097152");
  h = sample();
  h.payload_len = 0xffffffff;
  encode_header(h, &e);
  EXPECT_EQ(decode_header(e, FrameLimits{}).status().message(),
            "malformed frame: payload length 4294967295 exceeds limit 65536");
}

TEST(FrameTest, CorruptionDetected) {
  EncodedHeader e;
  encode_header(sample(), &e);
  for (size_t i = 0; i < kHeaderSize; ++i) {
    EncodedHeader c = e;
    c[i] ^= 0x10;
    EXPECT_FALSE(decode_header(c, FrameLimits{}).ok()) << "flip at byte " << i;
  }
}

TEST(FrameTest, WrongVersionIsRejected) {
  EncodedHeader e;
  encode_header(sample(), &e);
  e[4] = 2;  // version 2, checksum recomputed so only the version is wrong
  uint32_t crc = crc32c({e.data(), 60});
  for (int i = 0; i < 4; ++i) e[60 + i] = static_cast<uint8_t>(crc >> (8 * i));
  auto d = decode_header(e, FrameLimits{});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kRejected);
}

TEST(FrameTest, BulkOnControlFrameRefused) {
  FrameHeader h = sample();
  h.kind = FrameKind::kCredit;
  EncodedHeader e;
  encode_header(h, &e);
  EXPECT_EQ(decode_header(e, FrameLimits{}).status().message(),
            "malformed frame: bulk data on a control frame");
}

TEST(FrameTest, GarbageNeverDecodes) {
  std::mt19937_64 rng(42);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    EncodedHeader g;
    for (auto& b : g) b = static_cast<uint8_t>(rng());
    if (i % 2) std::memcpy(g.data(), "PFS1\x01\x00", 6);  // valid prefix, garbage rest
    accepted += decode_header(g, FrameLimits{}).ok();
  }
  EXPECT_EQ(accepted, 0);
}

}  // namespace
}  // namespace pfsnet
