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
  h.src_nid = *Nid::parse("127.0.0.2@tcp");
  h.dst_nid = *Nid::parse("10.2.0.5@o2ib1");
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
  e[4] = 3;  // version 3, checksum recomputed so only the version is wrong
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

// WINDOW (kind 7) is a control frame that carries its grant in the xid; a kind past it is
// not a frame.
TEST(FrameTest, AWindowFrameCarriesItsGrantAndIsAControlFrame) {
  FrameHeader w;
  w.kind = FrameKind::kWindow;
  w.xid = 64;
  EncodedHead e;
  encode_frame_head(w, 2, &e);
  auto d = decode_header(e.span(), FrameLimits{});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->kind, FrameKind::kWindow);
  EXPECT_EQ(d->xid, 64u);
  w.bulk_len = 1;
  EncodedHeader v1;
  encode_header(w, &v1);
  EXPECT_EQ(decode_header(v1, FrameLimits{}).status().message(),
            "malformed frame: bulk data on a control frame");
  EXPECT_TRUE(is_valid_frame_kind(7));
  EXPECT_FALSE(is_valid_frame_kind(8));
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

// Version 2: the header names no NIDs (the connection does), and its extension area
// carries the request's job id and trace context and the reply's queue time.
FrameHeader v2_request() {
  FrameHeader h;
  h.kind = FrameKind::kRequest;
  h.flags = kFlagDataCrc | kFlagResend;
  h.xid = 0x1122334455667788ULL;
  h.msg_type = 1;
  h.payload_len = 8;
  h.bulk_len = 4096;
  h.credits = 2;
  h.incarnation = 0xfeedULL;
  h.done_lag = 17;
  EXPECT_TRUE(h.ext.set_job("slurm.4242"));
  h.ext.trace = *TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  h.ext.has_trace = true;
  return h;
}

Result<FrameHeader> decode_head(const EncodedHead& e) {
  auto d = decode_header(e.span().first(kHeaderSize), FrameLimits{});
  if (!d.ok()) return d;
  if (Status s = decode_extensions(e.span().subspan(kHeaderSize), &*d); !s.ok()) return s;
  return d;
}

TEST(FrameV2Test, RequestAndReplyRoundTripWithTheirExtensions) {
  FrameHeader h = v2_request();
  EncodedHead e;
  encode_frame_head(h, 2, &e);
  EXPECT_EQ(e.size, kHeaderSize + h.ext.encoded_size());
  EXPECT_EQ(h.ext.encoded_size(), 2 + 10 + 2 + kTraceContextSize);
  auto d = decode_head(e);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->version, 2);
  EXPECT_EQ(d->kind, FrameKind::kRequest);
  EXPECT_EQ(d->flags, h.flags);
  EXPECT_EQ(d->xid, h.xid);
  EXPECT_EQ(d->msg_type, h.msg_type);
  EXPECT_EQ(d->payload_len, h.payload_len);
  EXPECT_EQ(d->bulk_len, h.bulk_len);
  EXPECT_EQ(d->credits, h.credits);
  EXPECT_EQ(d->incarnation, h.incarnation);
  EXPECT_EQ(d->done_lag, h.done_lag);
  EXPECT_EQ(d->src_nid, Nid::none());  // filled in from the connection
  EXPECT_EQ(d->ext.job(), "slurm.4242");
  EXPECT_TRUE(d->ext.has_trace);
  EXPECT_EQ(d->ext.trace, h.ext.trace);
  EXPECT_FALSE(d->ext.has_queue_time);

  FrameHeader r = sample();
  r.ext.has_queue_time = true;
  r.ext.queue_ns = 987654321;
  encode_frame_head(r, 2, &e);
  d = decode_head(e);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->kind, FrameKind::kReply);
  EXPECT_EQ(d->exec_ns, r.exec_ns);
  EXPECT_EQ(d->status, r.status);
  EXPECT_EQ(d->health, r.health);
  EXPECT_TRUE(d->ext.has_queue_time);
  EXPECT_EQ(d->ext.queue_ns, 987654321u);

  // Without extensions a version-2 header is 64 bytes, as version 1's.
  FrameHeader plain = v2_request();
  plain.ext = {};
  encode_frame_head(plain, 2, &e);
  EXPECT_EQ(e.size, kHeaderSize);
  d = decode_head(e);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->ext.empty());
}

TEST(FrameV2Test, AVersionOneFrameNeverCarriesExtensions) {
  FrameHeader h = v2_request();
  h.src_nid = *Nid::parse("127.0.0.2@tcp");
  EncodedHead e;
  encode_frame_head(h, 1, &e);
  ASSERT_EQ(e.size, kHeaderSize);
  EncodedHeader v1;
  encode_header(h, &v1);
  EXPECT_EQ(std::memcmp(v1.data(), e.bytes.data(), kHeaderSize), 0);
  auto d = decode_header(e.span(), FrameLimits{});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->version, 1);
  EXPECT_EQ(d->ext_len, 0);
  EXPECT_EQ(d->src_nid, h.src_nid);
}

// Rewrites the extension area of `e` (after its header) to `ext` with a valid CRC.
void set_extensions(EncodedHead* e, const std::vector<uint8_t>& ext) {
  std::memcpy(e->bytes.data() + kHeaderSize, ext.data(), ext.size());
  e->size = kHeaderSize + ext.size();
  uint8_t* p = e->bytes.data();
  p[44] = static_cast<uint8_t>(ext.size());
  p[45] = static_cast<uint8_t>(ext.size() >> 8);
  uint32_t c = ext.empty() ? 0 : crc32c(std::span(ext.data(), ext.size()));
  std::memcpy(p + 48, &c, 4);
  uint32_t h = crc32c({p, 60});
  std::memcpy(p + 60, &h, 4);
}

TEST(FrameV2Test, ExtensionFieldsFollowTheRules) {
  FrameHeader h = v2_request();
  h.ext = {};
  EncodedHead e;
  encode_frame_head(h, 2, &e);
  auto with = [&](std::vector<uint8_t> ext) {
    EncodedHead c = e;
    set_extensions(&c, ext);
    return decode_head(c);
  };
  auto refused = [&](std::vector<uint8_t> ext, const std::string& says) {
    auto d = with(std::move(ext));
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), Code::kProtocol);
    EXPECT_NE(d.status().message().find(says), std::string::npos) << d.status().message();
  };
  // An unknown field with bit 7 clear is skipped; the known ones around it are taken.
  auto d = with({0x40, 3, 'a', 'b', 'c', 1, 2, 'j', '1'});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->ext.job(), "j1");
  refused({0xc0, 1, 0}, "must be known");
  refused({1, 2, 'a', 'b', 1, 1, 'c'}, "twice");
  refused({1, 0}, "of 0 bytes");
  refused({1, 2, 'a', ' '}, "printable");
  refused({3, 8, 0, 0, 0, 0, 0, 0, 0, 0}, "on a REQUEST");  // a reply's field
  std::vector<uint8_t> zero_trace = {2, 25};
  zero_trace.resize(2 + 25, 0);
  refused(zero_trace, "all-zero");
  refused({1, 5, 'a'}, "truncated");
  refused({1}, "truncated");
  // The area's CRC covers it: a byte changed after it was sealed is refused.
  EncodedHead c = e;
  set_extensions(&c, {1, 2, 'a', 'b'});
  c.bytes[kHeaderSize + 2] = 'x';
  auto bad_crc = decode_head(c);
  ASSERT_FALSE(bad_crc.ok());
  EXPECT_NE(bad_crc.status().message().find("extension checksum"), std::string::npos);
  // The header's limits, before anything is read after it.
  EncodedHead big = e;
  big.bytes[44] = 0x01;
  big.bytes[45] = 0x08;  // 2049 bytes
  uint32_t hc = crc32c({big.bytes.data(), 60});
  std::memcpy(big.bytes.data() + 60, &hc, 4);
  auto over = decode_header(big.span().first(kHeaderSize), FrameLimits{});
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("exceeds limit 1024"), std::string::npos);
  FrameHeader credit;
  credit.kind = FrameKind::kCredit;
  EncodedHead ce;
  encode_frame_head(credit, 2, &ce);
  set_extensions(&ce, {1, 1, 'a'});
  auto on_control = decode_header(ce.span().first(kHeaderSize), FrameLimits{});
  ASSERT_FALSE(on_control.ok());
  EXPECT_NE(on_control.status().message().find("control frame"), std::string::npos);
  EncodedHead reserved = e;
  reserved.bytes[55] = 1;
  hc = crc32c({reserved.bytes.data(), 60});
  std::memcpy(reserved.bytes.data() + 60, &hc, 4);
  EXPECT_FALSE(decode_header(reserved.span().first(kHeaderSize), FrameLimits{}).ok());
}

TEST(FrameV2Test, JobIdsAndTraceContextsAreChecked) {
  FrameExt x;
  EXPECT_TRUE(x.set_job(std::string(kMaxJobId, 'a')));
  EXPECT_FALSE(x.set_job(std::string(kMaxJobId + 1, 'a')));
  EXPECT_FALSE(x.set_job(""));
  EXPECT_FALSE(x.set_job("a b"));
  EXPECT_FALSE(x.set_job("caf\xc3\xa9"));
  EXPECT_EQ(x.job(), std::string(kMaxJobId, 'a'));  // a refused id changes nothing
  const std::string tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  auto t = TraceContext::parse(tp);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->to_string(), tp);
  EXPECT_EQ(t->flags, 1);
  EXPECT_EQ(t->trace_id[0], 0x4b);
  EXPECT_EQ(t->parent_id[7], 0xb7);
  for (std::string bad : {"", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                          "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"}) {
    auto r = TraceContext::parse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  FrameExt all;
  all.set_job("j");
  all.has_trace = true;
  all.has_queue_time = true;
  FrameExt some = all;
  some.keep_only(kFeatureQueueTime);
  EXPECT_EQ(some.job_id_len, 0);
  EXPECT_FALSE(some.has_trace);
  EXPECT_TRUE(some.has_queue_time);
  all.keep_only(0);
  EXPECT_TRUE(all.empty());
  EXPECT_EQ(feature_names(kFeaturesSpoken), "job_id,trace,queue_time,routing,window");
  EXPECT_EQ(feature_names(kFeatureTraceContext | (uint64_t{1} << 40)), "trace,0x10000000000");
  EXPECT_EQ(feature_names(0), "");
}

}  // namespace
}  // namespace pfsnet
