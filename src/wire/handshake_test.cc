#include "wire/handshake.h"

#include <gtest/gtest.h>

namespace pfsnet {
namespace {

TEST(HandshakeTest, HelloRoundTrip) {
  Hello h;
  h.nonce = random_nonce();
  h.nids = {*Nid::parse("127.0.0.2@tcp"), *Nid::parse("198.18.1.2@tcp1")};
  Buffer b = encode_hello(h);
  auto d = decode_hello(b.span());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->nonce, h.nonce);
  EXPECT_EQ(d->nids, h.nids);
}

TEST(HandshakeTest, MalformedHello) {
  Hello h;
  h.nids = {*Nid::parse("127.0.0.2@tcp")};
  Buffer b = encode_hello(h);
  for (size_t n = 0; n < b.size(); ++n) EXPECT_FALSE(decode_hello(b.span().first(n)).ok());
  Buffer zero = Buffer::copy_of(b.span());
  zero.data()[64] = 0;
  EXPECT_FALSE(decode_hello(zero.span()).ok());
}

TEST(HandshakeTest, ProofsVerifyOnlyWithTheSameKey) {
  Nonce c = random_nonce(), s = random_nonce();
  std::vector<Nid> cn = {*Nid::parse("127.0.0.2@tcp")}, sn = {*Nid::parse("127.0.0.3@tcp")};
  Mac server = handshake_mac("0123456789abcdef", 'S', s, c, cn, sn);
  EXPECT_TRUE(mac_equal(server, handshake_mac("0123456789abcdef", 'S', s, c, cn, sn)));
  EXPECT_FALSE(mac_equal(server, handshake_mac("0123456789abcdeX", 'S', s, c, cn, sn)));
  // A proof for one role or one set of NIDs is not a proof for another.
  EXPECT_FALSE(mac_equal(server, handshake_mac("0123456789abcdef", 'C', s, c, cn, sn)));
  EXPECT_FALSE(mac_equal(server, handshake_mac("0123456789abcdef", 'S', s, c, sn, cn)));
  EXPECT_NE(random_nonce(), random_nonce());
}

}  // namespace
}  // namespace pfsnet
