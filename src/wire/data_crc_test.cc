#include "wire/data_crc.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "wire/crc32c.h"

namespace pfsnet {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(DataCrcTest, SealedPayloadUnsealsToItselfAndCoversPayloadThenBulk) {
  std::vector<uint8_t> payload = random_bytes(100, 1), bulk = random_bytes(1 << 20, 2);
  Buffer sealed = seal_payload(payload, bulk);
  ASSERT_EQ(sealed.size(), payload.size() + kDataCrcSize);
  // The CRC is of payload then bulk, as one run of bytes.
  std::vector<uint8_t> both = payload;
  both.insert(both.end(), bulk.begin(), bulk.end());
  uint32_t want = crc32c(both);
  const uint8_t* t = sealed.data() + payload.size();
  EXPECT_EQ(uint32_t(t[0]) | uint32_t(t[1]) << 8 | uint32_t(t[2]) << 16 | uint32_t(t[3]) << 24,
            want);
  ASSERT_TRUE(unseal_payload(&sealed, bulk));
  EXPECT_EQ(std::vector<uint8_t>(sealed.data(), sealed.data() + sealed.size()), payload);
}

// The bulk's own CRC comes out of a seal that checks (what a store keeps with the data),
// and goes back in: sealing with it joined gives the same seal without a pass over the bulk.
TEST(DataCrcTest, TheBulksOwnCrcComesOutOfTheSealAndJoinsBackIn) {
  for (size_t n : {size_t{1}, size_t{4096}, size_t{(1 << 20) + 5}}) {
    std::vector<uint8_t> payload = random_bytes(37, 3), bulk = random_bytes(n, 4);
    Buffer sealed = seal_payload(payload, bulk);
    std::optional<uint32_t> bulk_crc;
    ASSERT_TRUE(unseal_payload(&sealed, bulk, &bulk_crc));
    EXPECT_EQ(bulk_crc, crc32c(bulk)) << n;
    EXPECT_EQ(data_crc_joined(payload, crc32c(bulk), bulk.size()), data_crc(payload, bulk)) << n;
  }
  // A CRC taken as the bulk came in is joined instead of a pass: right, the seal checks;
  // not the bulk's, it fails and the payload stays sealed.
  {
    std::vector<uint8_t> payload = random_bytes(20, 7), bulk = random_bytes(70000, 8);
    Buffer sealed = seal_payload(payload, bulk);
    std::optional<uint32_t> wrong = crc32c(bulk) ^ 1;
    ASSERT_FALSE(unseal_payload(&sealed, bulk, &wrong));
    EXPECT_EQ(sealed.size(), payload.size() + kDataCrcSize);
    std::optional<uint32_t> right = crc32c(bulk);
    ASSERT_TRUE(unseal_payload(&sealed, bulk, &right));
    EXPECT_EQ(sealed.size(), payload.size());
    EXPECT_EQ(right, crc32c(bulk));
  }
  // No bulk, no bulk CRC; a seal that fails leaves it unset.
  std::vector<uint8_t> payload = random_bytes(10, 5), bulk = random_bytes(100, 6);
  Buffer only = seal_payload(payload, {});
  std::optional<uint32_t> none;
  ASSERT_TRUE(unseal_payload(&only, {}, &none));
  EXPECT_FALSE(none.has_value());
  Buffer sealed = seal_payload(payload, bulk);
  bulk[50] ^= 1;
  ASSERT_FALSE(unseal_payload(&sealed, bulk, &none));
  EXPECT_FALSE(none.has_value());
}

TEST(DataCrcTest, EmptyPayloadAndNoBulkSealToo) {
  Buffer sealed = seal_payload({}, {});
  ASSERT_EQ(sealed.size(), kDataCrcSize);
  ASSERT_TRUE(unseal_payload(&sealed, {}));
  EXPECT_TRUE(sealed.empty());
}

// Any one flipped bit -- in the payload, the bulk or the CRC itself -- is caught, and a
// caught payload is left as it came.
TEST(DataCrcTest, EveryFlippedBitIsCaught) {
  std::vector<uint8_t> payload = random_bytes(24, 3), bulk = random_bytes(4096, 4);
  const Buffer sealed = seal_payload(payload, bulk);
  for (size_t byte = 0; byte < sealed.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      Buffer b = Buffer::copy_of(sealed.span());
      b.data()[byte] ^= uint8_t(1u << bit);
      ASSERT_FALSE(unseal_payload(&b, bulk)) << "payload byte " << byte << " bit " << bit;
      EXPECT_EQ(b.size(), sealed.size());
    }
  for (size_t byte = 0; byte < bulk.size(); byte += 61)
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = bulk;
      bad[byte] ^= uint8_t(1u << bit);
      Buffer b = Buffer::copy_of(sealed.span());
      ASSERT_FALSE(unseal_payload(&b, bad)) << "bulk byte " << byte << " bit " << bit;
    }
  // Bulk cut short, or bytes moved from the bulk to the payload's end: caught too.
  Buffer b = Buffer::copy_of(sealed.span());
  EXPECT_FALSE(unseal_payload(&b, std::span(bulk).first(bulk.size() - 1)));
  Buffer tiny = Buffer::copy_of(std::string_view("abc"));
  EXPECT_FALSE(unseal_payload(&tiny, {}));
  EXPECT_EQ(tiny.size(), 3u);
}

// The decoder's rules for the flag: only on REQUEST and REPLY, with room for the CRC, which
// does not count against the payload limit.
TEST(DataCrcTest, DecoderAcceptsTheFlagOnlyWhereItMeansSomething) {
  FrameLimits limits;
  limits.max_payload = 1000;
  auto decode = [&](FrameKind kind, uint32_t payload_len) {
    FrameHeader h;
    h.kind = kind;
    h.flags = kFlagDataCrc;
    h.payload_len = payload_len;
    EncodedHeader e;
    encode_header(h, &e);
    return decode_header(e, limits);
  };
  EXPECT_TRUE(decode(FrameKind::kRequest, 4).ok());
  EXPECT_TRUE(decode(FrameKind::kReply, 1004).ok());  // a full payload and its CRC
  auto over = decode(FrameKind::kReply, 1005);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("exceeds limit"), std::string::npos);
  auto short_one = decode(FrameKind::kRequest, 3);
  ASSERT_FALSE(short_one.ok());
  EXPECT_EQ(short_one.status().code(), Code::kProtocol);
  auto control = decode(FrameKind::kCredit, 4);
  ASSERT_FALSE(control.ok());
  EXPECT_NE(control.status().message().find("control frame"), std::string::npos);
}

}  // namespace
}  // namespace pfsnet
