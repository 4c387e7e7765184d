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
  EXPECT_EQ(d->flags, 0);
  h.flags = kHelloBulk;
  d = decode_hello(encode_hello(h).span());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->flags, kHelloBulk);
}

TEST(HandshakeTest, MalformedHello) {
  Hello h;
  h.nids = {*Nid::parse("127.0.0.2@tcp")};
  Buffer b = encode_hello(h);
  for (size_t n = 0; n < b.size(); ++n) EXPECT_FALSE(decode_hello(b.span().first(n)).ok());
  Buffer zero = Buffer::copy_of(b.span());
  zero.data()[64] = 0;
  EXPECT_FALSE(decode_hello(zero.span()).ok());
  Buffer unknown = Buffer::copy_of(b.span());
  unknown.data()[unknown.size() - 1] = 2;  // a flag this version does not know
  auto d = decode_hello(unknown.span());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("unknown flags"), std::string::npos);
}

TEST(HandshakeTest, ProofsVerifyOnlyWithTheSameKey) {
  Nonce c = random_nonce(), s = random_nonce();
  std::vector<Nid> cn = {*Nid::parse("127.0.0.2@tcp")}, sn = {*Nid::parse("127.0.0.3@tcp")};
  Mac server = handshake_mac("0123456789abcdef", 'S', s, c, cn, sn, 0);
  EXPECT_TRUE(mac_equal(server, handshake_mac("0123456789abcdef", 'S', s, c, cn, sn, 0)));
  EXPECT_FALSE(mac_equal(server, handshake_mac("0123456789abcdeX", 'S', s, c, cn, sn, 0)));
  // A proof for one role, one set of NIDs or one purpose is not a proof for another.
  EXPECT_FALSE(mac_equal(server, handshake_mac("0123456789abcdef", 'C', s, c, cn, sn, 0)));
  EXPECT_FALSE(mac_equal(server, handshake_mac("0123456789abcdef", 'S', s, c, sn, cn, 0)));
  EXPECT_FALSE(mac_equal(server, handshake_mac("0123456789abcdef", 'S', s, c, cn, sn, kHelloBulk)));
  EXPECT_NE(random_nonce(), random_nonce());
}

TEST(HandshakeTest, TheExchangeProvesTheKeyBothWays) {
  const std::string key = "0123456789abcdef", other = "0123456789abcdeX";
  Nid c1 = *Nid::parse("127.0.0.2@tcp"), c2 = *Nid::parse("127.0.1.2@tcp1");
  Nid s1 = *Nid::parse("127.0.0.3@tcp");
  EXPECT_EQ(announced_nids(c2, {c1, c2}), (std::vector<Nid>{c2, c1}));
  Hello ch = client_hello(announced_nids(c1, {c1, c2}));
  EXPECT_EQ(ch.mac, Mac{});
  Hello sh = server_hello(key, ch, {s1});
  EXPECT_NE(sh.nonce, ch.nonce);
  EXPECT_TRUE(server_proof_ok(key, ch, sh));
  EXPECT_FALSE(server_proof_ok(other, ch, sh));  // a server without our key
  Hello replayed = sh;
  replayed.nids.push_back(c2);  // its NIDs are part of the proof
  EXPECT_FALSE(server_proof_ok(key, ch, replayed));
  Mac proof = client_proof(key, ch, sh);
  EXPECT_TRUE(client_proof_ok(key, ch, sh, proof));
  EXPECT_FALSE(client_proof_ok(key, ch, sh, client_proof(other, ch, sh)));
  // A proof is bound to this exchange's nonces: not valid for another server HELLO.
  EXPECT_FALSE(client_proof_ok(key, ch, server_hello(key, ch, {s1}), proof));
  EXPECT_NE(proof, sh.mac);  // the roles differ
  // The client's flags are part of both proofs: changed on the way, neither verifies.
  Hello bulk = client_hello(announced_nids(c1, {c1, c2}), kHelloBulk);
  Hello bsh = server_hello(key, bulk, {s1});
  EXPECT_TRUE(server_proof_ok(key, bulk, bsh));
  Hello flipped = bulk;
  flipped.flags = 0;
  EXPECT_FALSE(server_proof_ok(key, flipped, bsh));
  EXPECT_FALSE(client_proof_ok(key, flipped, bsh, client_proof(key, bulk, bsh)));
}

}  // namespace
}  // namespace pfsnet
