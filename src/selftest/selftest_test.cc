// SELFTEST_RUN's request as a peer sends it: decoded with limits, since any node holding
// the cluster key could otherwise ask this one for any load.
#include "selftest/selftest.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace pfsnet {
namespace {

Result<LoadRequest> decode(const LoadRequest& r, uint32_t max_bulk = 2 << 20) {
  Buffer b = r.encode();
  return decode_load_request(b.span(), max_bulk);
}

Result<LoadRequest> decode_bytes(const std::string& bytes) {
  return decode_load_request(
      std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 2 << 20);
}

LoadRequest good() {
  LoadRequest r;
  r.targets = {*Nid::parse("198.18.1.2@tcp")};
  r.size = 4096;
  return r;
}

TEST(LoadRequestTest, WhatTheSenderEncodesDecodesTheSame) {
  LoadRequest r;
  r.targets = {*Nid::parse("198.18.1.2@tcp"), *Nid::parse("198.18.2.2@o2ib1")};
  r.test = "brw";
  r.mode = "read";
  r.size = 1 << 20;
  r.concurrency = 16;
  r.duration_s = 2.5;
  Buffer e = r.encode();
  auto d = decode_load_request(e.span(), 2 << 20);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->targets, r.targets);
  EXPECT_EQ(d->mode, "read");
  EXPECT_EQ(d->size, 1u << 20);
  EXPECT_EQ(d->concurrency, 16);
  EXPECT_EQ(d->duration_s, 2.5);
}

TEST(LoadRequestTest, ALoadBeyondItsLimitsIsRefusedNamingTheField) {
  struct Case {
    void (*bend)(LoadRequest&);
    const char* names;
  } cases[] = {
      {[](LoadRequest& r) { r.concurrency = 2147483647; }, "concurrency"},
      {[](LoadRequest& r) { r.concurrency = 0; }, "concurrency"},
      {[](LoadRequest& r) { r.concurrency = -1; }, "concurrency"},
      {[](LoadRequest& r) { r.size = 4294967295u; }, "size"},
      {[](LoadRequest& r) { r.size = (2 << 20) + 1; }, "size"},
      {[](LoadRequest& r) { r.duration_s = 1e9; }, "duration_s"},
      {[](LoadRequest& r) { r.duration_s = 0; }, "duration_s"},
      {[](LoadRequest& r) { r.duration_s = -1; }, "malformed"},  // a figure is >= 0
      {[](LoadRequest& r) { r.duration_s = std::nan(""); }, "malformed"},
      {[](LoadRequest& r) { r.test = "flood"; }, "test"},
      {[](LoadRequest& r) { r.mode = "sideways"; }, "mode"},
      {[](LoadRequest& r) { r.targets.clear(); }, "targets"},
      {[](LoadRequest& r) {
         r.targets.resize(LoadRequest::kMaxTargets + 1, *Nid::parse("198.18.1.2@tcp"));
       },
       "targets"},
  };
  for (const Case& c : cases) {
    LoadRequest r = good();
    c.bend(r);
    auto d = decode(r);
    ASSERT_FALSE(d.ok()) << c.names;
    EXPECT_EQ(d.status().code(), Code::kProtocol) << c.names;
    EXPECT_NE(d.status().message().find(c.names), std::string::npos) << d.status().message();
  }
  ASSERT_TRUE(decode(good()).ok());
  // The engine's bulk limit bounds the size.
  LoadRequest r = good();
  r.size = 65536;
  EXPECT_TRUE(decode(r, 65536).ok());
  r.size = 65537;
  EXPECT_FALSE(decode(r, 65536).ok());
  // Bytes that are no request: cut anywhere, one byte too many, a count beyond the bytes,
  // a NID that does not unpack.
  Buffer b = good().encode();
  std::string bytes(reinterpret_cast<const char*>(b.data()), b.size());
  for (size_t cut = 0; cut < bytes.size(); ++cut)
    EXPECT_FALSE(decode_bytes(bytes.substr(0, cut)).ok()) << "cut at " << cut;
  EXPECT_FALSE(decode_bytes(bytes + '\0').ok());
  std::string more = bytes;
  more[0] = 2;  // two targets, one NID
  EXPECT_NE(decode_bytes(more).status().message().find("targets"), std::string::npos);
  std::string nid = bytes;
  for (size_t i = 4; i < 12; ++i) nid[i] = '\xff';
  EXPECT_NE(decode_bytes(nid).status().message().find("targets"), std::string::npos)
      << decode_bytes(nid).status().message();
}

TEST(ClientResultTest, WhatTheClientEncodesDecodesTheSameAndNothingMalformedPasses) {
  ClientResult c;
  c.rpcs = 1234;
  c.errors = 2;
  c.bytes = 1234ull << 20;
  c.seconds = 10.02;
  c.rtt_ms = 50.3;
  c.latencies_ms = {50.5, 61.25, 70};
  c.timeline = {100ull << 20, 450ull << 20, 0};
  c.first_error = "TIMEOUT: no reply";
  Buffer b = encode_client_result(c);
  auto d = decode_client_result(b.span());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->rpcs, 1234u);
  EXPECT_EQ(d->errors, 2u);
  EXPECT_EQ(d->bytes, 1234ull << 20);
  EXPECT_EQ(d->seconds, 10.02);
  EXPECT_EQ(d->rtt_ms, 50.3);
  EXPECT_EQ(d->latencies_ms, c.latencies_ms);
  EXPECT_EQ(d->timeline, c.timeline);
  EXPECT_EQ(d->first_error, c.first_error);
  std::string bytes(reinterpret_cast<const char*>(b.data()), b.size());
  auto dec = [](const std::string& x) {
    return decode_client_result(std::span(reinterpret_cast<const uint8_t*>(x.data()), x.size()));
  };
  for (size_t cut = 0; cut < bytes.size(); ++cut)
    EXPECT_EQ(dec(bytes.substr(0, cut)).status().code(), Code::kProtocol) << "cut at " << cut;
  EXPECT_FALSE(dec(bytes + 'x').ok());
  // Figures that are no figures, counts beyond their limits.
  ClientResult bad = c;
  bad.seconds = -1;
  EXPECT_FALSE(decode_client_result(encode_client_result(bad).span()).ok());
  bad = c;
  bad.latencies_ms[1] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(decode_client_result(encode_client_result(bad).span()).ok());
  bad = c;
  bad.rpcs = (uint64_t(1) << 62) + 1;
  EXPECT_FALSE(decode_client_result(encode_client_result(bad).span()).ok());
  std::string many = bytes;
  const size_t lat_count = 8 * 5;  // after three counts and two figures
  many[lat_count + 0] = '\xd1';    // 2001 latencies
  many[lat_count + 1] = '\x07';
  EXPECT_NE(dec(many).status().message().find("2000"), std::string::npos)
      << dec(many).status().message();
}

}  // namespace
}  // namespace pfsnet
