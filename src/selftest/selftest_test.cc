// SELFTEST_RUN's request as a peer sends it: decoded with limits, since any node holding
// the cluster key could otherwise ask this one for any load.
#include "selftest/selftest.h"

#include <gtest/gtest.h>

namespace pfsnet {
namespace {

Result<LoadRequest> decode(std::string_view text, uint32_t max_bulk = 2 << 20) {
  return decode_load_request(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()),
                             max_bulk);
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
  const std::string t = R"("targets":["198.18.1.2@tcp"])";
  struct Case {
    std::string body, names;
  } cases[] = {
      {"{" + t + R"(,"concurrency":2147483647})", "concurrency"},
      {"{" + t + R"(,"concurrency":0})", "concurrency"},
      {"{" + t + R"(,"concurrency":1.5})", "concurrency"},
      {"{" + t + R"(,"size":4294967295})", "size"},
      {"{" + t + R"(,"size":-1})", "size"},
      {"{" + t + R"(,"size":"big"})", "size"},
      {"{" + t + R"(,"duration_s":1e9})", "duration_s"},
      {"{" + t + R"(,"duration_s":0})", "duration_s"},
      {"{" + t + R"(,"test":"flood"})", "test"},
      {"{" + t + R"(,"mode":7})", "mode"},
      {R"({"targets":[]})", "targets"},
      {R"({"targets":["not a nid"]})", "targets"},
      {R"({"targets":"198.18.1.2@tcp"})", "targets"},
      {"[1,2,3]", "JSON object"},
      {"{\"targets\":", "JSON object"},
  };
  for (const Case& c : cases) {
    auto d = decode(c.body);
    ASSERT_FALSE(d.ok()) << c.body;
    EXPECT_EQ(d.status().code(), Code::kProtocol) << c.body;
    EXPECT_NE(d.status().message().find(c.names), std::string::npos)
        << c.body << ": " << d.status().message();
  }
  // The engine's bulk limit bounds the size.
  EXPECT_TRUE(decode("{" + t + R"(,"size":65536})", 65536).ok());
  EXPECT_FALSE(decode("{" + t + R"(,"size":65537})", 65536).ok());
  // Too many targets.
  std::string many = R"({"targets":[)";
  for (size_t i = 0; i <= LoadRequest::kMaxTargets; ++i)
    many += std::string(i ? "," : "") + "\"10.0." + std::to_string(i / 250) + "." +
            std::to_string(i % 250 + 1) + "@tcp\"";
  EXPECT_FALSE(decode(many + "]}").ok());
}

}  // namespace
}  // namespace pfsnet
