#include "wire/handshake.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>

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

// The machine every transport runs, end against end (run_handshake, as the in-memory
// transport runs it).
struct Ends {
  HandshakeMachine c, s;
  std::vector<FrameKind> wire;  // every frame sent, in order
  // Runs the exchange; `tamper` may change a frame on its way (index in `wire`).
  void run(const std::function<void(size_t, HandshakeMachine::Out&)>& tamper = {}) {
    run_handshake(c, s, [&](HandshakeMachine::Out& out) {
      if (tamper) tamper(wire.size(), out);
      wire.push_back(out.kind);
    });
  }
};

TEST(HandshakeMachineTest, BothEndsEstablishWithEachOthersNidsAndTheClientsFlags) {
  Nid c1 = *Nid::parse("127.0.0.2@tcp"), c2 = *Nid::parse("127.0.1.2@tcp1");
  Nid s1 = *Nid::parse("127.0.0.3@tcp");
  Ends e{HandshakeMachine::client("k0123456789abcdef", {c1, c2}, kHelloBulk),
         HandshakeMachine::server("k0123456789abcdef", {s1}),
         {}};
  EXPECT_TRUE(e.s.start().send == std::nullopt);  // the client speaks first
  e.run();
  EXPECT_EQ(e.wire, (std::vector<FrameKind>{FrameKind::kHello, FrameKind::kHello, FrameKind::kAuth,
                                            FrameKind::kAuth}));
  EXPECT_EQ(e.c.state(), HandshakeMachine::State::kEstablished);
  EXPECT_EQ(e.s.state(), HandshakeMachine::State::kEstablished);
  EXPECT_EQ(e.c.peer_nids(), (std::vector<Nid>{s1}));
  EXPECT_EQ(e.s.peer_nids(), (std::vector<Nid>{c1, c2}));
  EXPECT_EQ(e.s.client_flags(), kHelloBulk);
  // Anything after the end is refused, and changes nothing at the other end.
  auto late = e.s.on_frame(FrameKind::kAuth, {});
  EXPECT_EQ(late.state, HandshakeMachine::State::kFailed);
  EXPECT_FALSE(late.send);
}

TEST(HandshakeMachineTest, AWrongKeyIsRefusedByWhicheverEndChecksItFirst) {
  Nid c1 = *Nid::parse("127.0.0.2@tcp"), s1 = *Nid::parse("127.0.0.3@tcp");
  // The client checks the server's proof first: it sends REJECT, the server hears why.
  Ends e{HandshakeMachine::client("k0123456789abcdef", {c1}, 0),
         HandshakeMachine::server("other-key-0123456", {s1}),
         {}};
  e.run();
  EXPECT_EQ(e.wire,
            (std::vector<FrameKind>{FrameKind::kHello, FrameKind::kHello, FrameKind::kReject}));
  EXPECT_EQ(e.c.state(), HandshakeMachine::State::kRefused);
  EXPECT_EQ(e.c.why(), "wrong cluster key");
  EXPECT_EQ(e.s.state(), HandshakeMachine::State::kRefusedByPeer);
  EXPECT_EQ(e.s.why(), "wrong cluster key");
  // A client's proof changed on the way: the server refuses it.
  Ends t{HandshakeMachine::client("k0123456789abcdef", {c1}, 0),
         HandshakeMachine::server("k0123456789abcdef", {s1}),
         {}};
  t.run([](size_t i, HandshakeMachine::Out& o) {
    if (i == 2) o.payload.data()[0] ^= 1;
  });
  EXPECT_EQ(t.s.state(), HandshakeMachine::State::kRefused);
  EXPECT_EQ(t.c.state(), HandshakeMachine::State::kRefusedByPeer);
  // The client's flags changed on the way (a bulk connection passed off as the path's
  // first): the client finds the server's proof wrong.
  Ends f{HandshakeMachine::client("k0123456789abcdef", {c1}, kHelloBulk),
         HandshakeMachine::server("k0123456789abcdef", {s1}),
         {}};
  f.run([](size_t i, HandshakeMachine::Out& o) {
    if (i == 0) o.payload.data()[o.payload.size() - 1] = 0;
  });
  EXPECT_EQ(f.c.state(), HandshakeMachine::State::kRefused);
}

TEST(HandshakeMachineTest, FramesOutOfPlaceOrMalformedFailTheHandshake) {
  Nid c1 = *Nid::parse("127.0.0.2@tcp"), s1 = *Nid::parse("127.0.0.3@tcp");
  auto server = [&] { return HandshakeMachine::server("k0123456789abcdef", {s1}); };
  auto client = [&] { return HandshakeMachine::client("k0123456789abcdef", {c1}, 0); };
  {
    auto s = server();
    auto st = s.on_frame(FrameKind::kAuth, {});
    EXPECT_EQ(st.state, HandshakeMachine::State::kFailed);
    EXPECT_EQ(s.why(), "expected HELLO");
  }
  {
    auto s = server();
    uint8_t junk[10] = {};
    EXPECT_EQ(s.on_frame(FrameKind::kHello, junk).state, HandshakeMachine::State::kFailed);
    EXPECT_NE(s.why().find("malformed HELLO"), std::string::npos) << s.why();
  }
  {
    auto s = server();
    auto c = client();
    auto hello = c.start().send;
    ASSERT_TRUE(hello);
    EXPECT_EQ(s.on_frame(hello->kind, hello->payload.span()).state,
              HandshakeMachine::State::kRunning);
    Mac short_proof{};
    EXPECT_EQ(s.on_frame(FrameKind::kAuth, std::span<const uint8_t>(short_proof).first(8)).state,
              HandshakeMachine::State::kFailed);
    EXPECT_EQ(s.why(), "expected AUTH");
  }
  {
    auto c = client();
    (void)c.start();
    EXPECT_EQ(c.on_frame(FrameKind::kRequest, {}).state, HandshakeMachine::State::kFailed);
    EXPECT_EQ(c.why(), "expected HELLO");
  }
  {
    auto c = client();
    (void)c.start();
    std::string why = "this node requires TLS";
    auto st = c.on_frame(
        FrameKind::kReject,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(why.data()), why.size()));
    EXPECT_EQ(st.state, HandshakeMachine::State::kRefusedByPeer);
    EXPECT_EQ(c.why(), why);
  }
}

}  // namespace
}  // namespace pfsnet
