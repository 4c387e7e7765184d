#include "wire/handshake.h"

#include <gtest/gtest.h>

#include <cstring>
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

// Versions and features: the highest version both ends speak, the features both announce.
WireSpeaks speaks(uint16_t lo, uint16_t hi, uint64_t features, std::string release,
                  uint64_t instance) {
  return WireSpeaks{lo, hi, features, std::move(release), instance};
}

struct Negotiated {
  Ends e;
  std::vector<uint16_t> versions;  // of each frame's header, in order
  std::vector<uint64_t> xids;
  void run(const std::function<void(size_t, HandshakeMachine::Out&)>& tamper = {}) {
    e.run([&](size_t i, HandshakeMachine::Out& o) {
      if (tamper) tamper(i, o);
      versions.push_back(o.version);
      xids.push_back(o.xid);
    });
  }
};

const std::string kKey = "k0123456789abcdef";
const Nid kC1 = *Nid::parse("127.0.0.2@tcp"), kC2 = *Nid::parse("198.18.0.2@tcp1");
const Nid kS1 = *Nid::parse("127.0.0.3@tcp"), kS2 = *Nid::parse("198.18.0.3@o2ib");

Negotiated between(WireSpeaks c, WireSpeaks s, uint8_t flags = 0) {
  return Negotiated{{HandshakeMachine::client(kKey, {kC1, kC2}, flags, std::move(c)),
                     HandshakeMachine::server(kKey, {kS1, kS2}, std::move(s)),
                     {}},
                    {},
                    {}};
}

TEST(HandshakeNegotiationTest, TwoNewEndsSpeakVersion2WithTheFeaturesBothAnnounce) {
  Negotiated n =
      between(speaks(1, 2, kFeatureJobId | kFeatureQueueTime, "0.9.0+c", 11),
              speaks(1, 2, kFeaturesSpoken | (uint64_t{1} << 50), "0.9.1+s", 22), kHelloBulk);
  n.run();
  ASSERT_EQ(n.e.c.state(), HandshakeMachine::State::kEstablished) << n.e.c.why();
  ASSERT_EQ(n.e.s.state(), HandshakeMachine::State::kEstablished) << n.e.s.why();
  // The client's HELLO is a version-1 frame whose xid offers 1 to 2; the rest are 2.
  EXPECT_EQ(n.versions, (std::vector<uint16_t>{1, 2, 2, 2}));
  EXPECT_EQ(n.xids[0], wire_offer(1, 2));
  EXPECT_EQ(*parse_offer(n.xids[0]), (std::pair<uint16_t, uint16_t>{1, 2}));
  for (const HandshakeMachine* m : {&n.e.c, &n.e.s}) {
    EXPECT_EQ(m->session().version, 2);
    EXPECT_EQ(m->session().features, kFeatureJobId | kFeatureQueueTime);
  }
  const WireSession& c = n.e.c.session();
  const WireSession& s = n.e.s.session();
  EXPECT_EQ(c.peer_release, "0.9.1+s");
  EXPECT_EQ(c.peer_instance, 22u);
  EXPECT_EQ(c.peer_features, kFeaturesSpoken | (uint64_t{1} << 50));
  EXPECT_EQ(c.peer_max, 2);
  EXPECT_EQ(s.peer_release, "0.9.0+c");
  EXPECT_EQ(s.peer_instance, 11u);
  EXPECT_EQ(s.peer_features, kFeatureJobId | kFeatureQueueTime);
  // Each end knows the other's NIDs (the server's from its version-2 fields) and the flags.
  EXPECT_EQ(n.e.c.peer_nids(), (std::vector<Nid>{kS1, kS2}));
  EXPECT_EQ(n.e.s.peer_nids(), (std::vector<Nid>{kC1, kC2}));
  EXPECT_EQ(n.e.s.client_flags(), kHelloBulk);
}

TEST(HandshakeNegotiationTest, AVersionOneClientGetsVersionOnesExchangeUnchanged) {
  // A client of pfsnet up to 8827b49 offers nothing (xid 0) and reads only version-1 frames.
  Negotiated n = between(speaks(1, 1, 0, "", 0), speaks(1, 2, kFeaturesSpoken, "new", 5));
  n.run();
  ASSERT_EQ(n.e.c.state(), HandshakeMachine::State::kEstablished) << n.e.c.why();
  ASSERT_EQ(n.e.s.state(), HandshakeMachine::State::kEstablished) << n.e.s.why();
  EXPECT_EQ(n.versions, (std::vector<uint16_t>{1, 1, 1, 1}));
  EXPECT_EQ(n.xids, (std::vector<uint64_t>{0, 0, 0, 0}));
  EXPECT_EQ(n.e.s.session().version, 1);
  EXPECT_EQ(n.e.s.session().features, 0u);
  EXPECT_EQ(n.e.s.session().peer_release, "");
  EXPECT_EQ(n.e.c.peer_nids(), (std::vector<Nid>{kS1, kS2}));
  // The exchange is version 1's to the byte: the old functions verify it.
  Hello c = client_hello({kC1});
  auto m = HandshakeMachine::server(kKey, {kS1});
  auto st = m.on_frame(FrameKind::kHello, encode_hello(c).span());
  ASSERT_TRUE(st.send);
  EXPECT_EQ(st.send->version, 1);
  auto sh = decode_hello(st.send->payload.span());
  ASSERT_TRUE(sh.ok());
  EXPECT_TRUE(server_proof_ok(kKey, c, *sh));
  Mac proof = client_proof(kKey, c, *sh);
  st = m.on_frame(FrameKind::kAuth, proof);
  EXPECT_EQ(st.state, HandshakeMachine::State::kEstablished);
  ASSERT_TRUE(st.send);
  EXPECT_EQ(st.send->payload.size(), 0u);
}

TEST(HandshakeNegotiationTest, ANewClientSpeaksVersionOneToAVersionOneServer) {
  // A server of pfsnet up to 8827b49, played by the version-1 functions it ran: it takes the
  // HELLO (its xid unread), answers with its proof and an unmarked nonce, checks ours.
  auto m = HandshakeMachine::client(kKey, {kC1}, 0, speaks(1, 2, kFeaturesSpoken, "new", 1));
  auto hello = m.start().send;
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->version, 1);
  auto ch = decode_hello(hello->payload.span());
  ASSERT_TRUE(ch.ok()) << ch.status().to_string();
  Hello sh = server_hello(kKey, *ch, {kS1});
  auto st = m.on_frame(FrameKind::kHello, encode_hello(sh).span());
  ASSERT_TRUE(st.send);
  EXPECT_EQ(st.send->kind, FrameKind::kAuth);
  EXPECT_EQ(st.send->version, 1);
  Mac proof;
  ASSERT_EQ(st.send->payload.size(), proof.size());
  std::memcpy(proof.data(), st.send->payload.data(), proof.size());
  EXPECT_TRUE(client_proof_ok(kKey, *ch, sh, proof));
  EXPECT_EQ(m.on_frame(FrameKind::kAuth, {}).state, HandshakeMachine::State::kEstablished);
  EXPECT_EQ(m.session().version, 1);
  EXPECT_EQ(m.session().features, 0u);
  EXPECT_EQ(m.peer_nids(), (std::vector<Nid>{kS1}));
}

TEST(HandshakeNegotiationTest, AnOfferRemovedOnTheWayIsNoticed) {
  // Someone clears the client's offer: the server, which speaks 2, answers version 1 with
  // its nonce marked, which its proof covers; the client that offered 2 refuses.
  Negotiated n =
      between(speaks(1, 2, kFeaturesSpoken, "", 0), speaks(1, 2, kFeaturesSpoken, "", 0));
  n.run([](size_t i, HandshakeMachine::Out& o) {
    if (i == 0) o.xid = 0;
  });
  EXPECT_EQ(n.e.c.state(), HandshakeMachine::State::kFailed);
  EXPECT_NE(n.e.c.why().find("offer was removed"), std::string::npos) << n.e.c.why();
  // A server that speaks only 1 marks that: no alarm, version 1.
  Negotiated one = between(speaks(1, 2, kFeaturesSpoken, "", 0), speaks(1, 1, 0, "", 0));
  one.run();
  EXPECT_EQ(one.e.c.state(), HandshakeMachine::State::kEstablished) << one.e.c.why();
  EXPECT_EQ(one.e.c.session().version, 1);
}

TEST(HandshakeNegotiationTest, NoCommonVersionIsRefusedSayingWhatEachSpeaks) {
  Negotiated n = between(speaks(2, 2, kFeaturesSpoken, "", 0), speaks(1, 1, 0, "", 0));
  n.run();
  EXPECT_EQ(n.e.s.state(), HandshakeMachine::State::kRefused);
  EXPECT_EQ(n.e.c.state(), HandshakeMachine::State::kRefusedByPeer);
  EXPECT_EQ(n.e.c.why(), "no common wire version: the peer speaks 2, this node 1");
  // A malformed offer fails the handshake.
  auto s = HandshakeMachine::server(kKey, {kS1});
  FrameHeader h;
  h.kind = FrameKind::kHello;
  h.xid = 0x1234;
  EXPECT_EQ(s.on_frame(h, encode_hello(client_hello({kC1})).span()).state,
            HandshakeMachine::State::kFailed);
  EXPECT_NE(s.why().find("version offer"), std::string::npos);
}

TEST(HandshakeNegotiationTest, Version2ProofsCoverEveryFieldAndTheKey) {
  // The server's fields (its features) changed on the way: the client refuses its proof.
  Negotiated f = between({}, {});
  f.run([](size_t i, HandshakeMachine::Out& o) {
    if (i == 1) o.payload.data()[o.payload.size() - 1] ^= 1;
  });
  EXPECT_EQ(f.e.c.state(), HandshakeMachine::State::kRefused);
  EXPECT_EQ(f.e.s.state(), HandshakeMachine::State::kRefusedByPeer);
  // The client's fields changed on the way: the server refuses.
  Negotiated g = between({}, {});
  g.run([](size_t i, HandshakeMachine::Out& o) {
    if (i == 2) o.payload.data()[o.payload.size() - 1] ^= 1;
  });
  EXPECT_EQ(g.e.s.state(), HandshakeMachine::State::kRefused);
  EXPECT_EQ(g.e.c.state(), HandshakeMachine::State::kRefusedByPeer);
  EXPECT_EQ(g.e.c.why(), "wrong cluster key");
  // The offer is covered too: raised on the way, the proofs no longer match.
  Negotiated o = between(speaks(1, 2, kFeaturesSpoken, "", 0), {});
  o.run([](size_t i, HandshakeMachine::Out& out) {
    if (i == 0) out.xid = wire_offer(1, 3);
  });
  EXPECT_NE(o.e.c.state(), HandshakeMachine::State::kEstablished);
  // A wrong key: refused at the first proof, as in version 1.
  Negotiated k{{HandshakeMachine::client(kKey, {kC1}, 0),
                HandshakeMachine::server("other-key-0123456", {kS1}),
                {}},
               {},
               {}};
  k.run();
  EXPECT_EQ(k.e.c.state(), HandshakeMachine::State::kRefused);
  EXPECT_EQ(k.e.s.why(), "wrong cluster key");
}

// Rotating the cluster key: each end proves with its current key and accepts its next and
// previous too, so every pair of nodes a rotation passes through -- not started, holding
// the next key, committed to it, done -- connects, on version 1 and on version 2, and each
// end sees which of its keys the other proved with; a node that commits while another does
// not hold the next key yet, or drops the old key while a peer still proves with it, is
// refused (docs/security.md's order: every node holds the next key before any commits).
TEST(HandshakeKeyRotationTest, NodesOnEitherSideOfACommitAcceptEachOther) {
  const std::string k1 = "first-key-0123456", k2 = "second-key-012345";
  ClusterKeys before(k1), holding(k1), committed(k2), after(k2);
  holding.next = k2;
  committed.previous = k1;
  struct Case {
    ClusterKeys c, s;
    bool ok;
    KeyUsed c_sees, s_sees;  // which of its keys verified the other's proof
  };
  const std::vector<Case> cases = {
      {before, holding, true, KeyUsed::kCurrent, KeyUsed::kCurrent},
      {holding, holding, true, KeyUsed::kCurrent, KeyUsed::kCurrent},
      {committed, holding, true, KeyUsed::kPrevious, KeyUsed::kNext},
      {holding, committed, true, KeyUsed::kNext, KeyUsed::kPrevious},
      {committed, committed, true, KeyUsed::kCurrent, KeyUsed::kCurrent},
      {after, committed, true, KeyUsed::kCurrent, KeyUsed::kCurrent},
      {committed, after, true, KeyUsed::kCurrent, KeyUsed::kCurrent},
      // Done too early: the node still proving with the old key is refused.
      {after, holding, false, {}, {}},
      {holding, after, false, {}, {}},
      // Committed before every node holds the next key: a node that does not is refused.
      {before, committed, false, {}, {}},
      {committed, before, false, {}, {}},
      {before, after, false, {}, {}},
  };
  for (uint16_t v : {uint16_t{1}, uint16_t{2}})
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& k = cases[i];
      Ends e{HandshakeMachine::client(k.c, {kC1}, 0, speaks(1, v, 0, "r", 1)),
             HandshakeMachine::server(k.s, {kS1}, speaks(1, v, 0, "r", 2)),
             {}};
      e.run();
      SCOPED_TRACE("version " + std::to_string(v) + ", case " + std::to_string(i));
      if (!k.ok) {
        EXPECT_TRUE(e.c.state() == HandshakeMachine::State::kRefused ||
                    e.s.state() == HandshakeMachine::State::kRefused);
        EXPECT_EQ(e.c.why(), "wrong cluster key");
        EXPECT_EQ(e.s.why(), "wrong cluster key");
        continue;
      }
      ASSERT_EQ(e.c.state(), HandshakeMachine::State::kEstablished) << e.c.why();
      ASSERT_EQ(e.s.state(), HandshakeMachine::State::kEstablished) << e.s.why();
      EXPECT_EQ(e.c.session().version, v);
      EXPECT_EQ(e.c.session().peer_key, k.c_sees);
      EXPECT_EQ(e.s.session().peer_key, k.s_sees);
    }
}

// Large NIDs (IPv6): a HELLO -- a version-1 frame -- carries the connection's NID and the
// IPv4 others; a version-2 peer gets the whole list in the version-2 fields, a version-1
// peer never sees a large NID.
TEST(HandshakeLargeNidsTest, AVersion2PeerLearnsEveryNidAVersion1PeerOnlyTheIpv4Ones) {
  const Nid c6 = *Nid::parse("2001:2::2@tcp"), s6 = *Nid::parse("2001:2::3@tcp");
  for (uint16_t server_max : {2, 1}) {
    Ends e{
        HandshakeMachine::client(kKey, {kC1, c6, kC2}, 0, speaks(1, 2, kFeaturesSpoken, "c", 1)),
        HandshakeMachine::server(kKey, {kS1, s6}, speaks(1, server_max, kFeaturesSpoken, "s", 2)),
        {}};
    std::vector<Buffer> frames;
    e.run([&](size_t, HandshakeMachine::Out& o) {
      frames.push_back(Buffer::copy_of(o.payload.span()));
    });
    ASSERT_EQ(e.c.state(), HandshakeMachine::State::kEstablished) << e.c.why();
    ASSERT_EQ(e.s.state(), HandshakeMachine::State::kEstablished) << e.s.why();
    auto hello = decode_hello(frames[0].span());
    ASSERT_TRUE(hello.ok()) << hello.status().to_string();
    EXPECT_EQ(hello->nids, (std::vector<Nid>{kC1, kC2})) << "the client HELLO holds no large NID";
    if (server_max == 2) {
      EXPECT_EQ(e.s.peer_nids(), (std::vector<Nid>{kC1, c6, kC2}));
      EXPECT_EQ(e.c.peer_nids(), (std::vector<Nid>{kS1, s6}));
    } else {
      EXPECT_EQ(e.s.peer_nids(), (std::vector<Nid>{kC1, kC2}));
      EXPECT_EQ(e.c.peer_nids(), (std::vector<Nid>{kS1}));
      auto sh = decode_hello(frames[1].span());
      ASSERT_TRUE(sh.ok());
      EXPECT_EQ(sh->nids, (std::vector<Nid>{kS1}));
    }
  }
}

// On an IPv6 connection the HELLO's first NID -- the connection's own -- is large, in the
// marked form a release without large NIDs refuses ("bad NID network type"), which cannot
// be listening there anyway.
TEST(HandshakeLargeNidsTest, AnIpv6ConnectionsHelloCarriesItsLargeNidMarked) {
  const Nid c6 = *Nid::parse("2001:2::2@tcp"), s6 = *Nid::parse("2001:2::3@tcp");
  Ends e{HandshakeMachine::client(kKey, {c6, kC1}, 0, speaks(1, 2, kFeaturesSpoken, "c", 1)),
         HandshakeMachine::server(kKey, {s6}, speaks(1, 2, kFeaturesSpoken, "s", 2)),
         {}};
  std::vector<Buffer> frames;
  e.run([&](size_t, HandshakeMachine::Out& o) {
    frames.push_back(Buffer::copy_of(o.payload.span()));
  });
  ASSERT_EQ(e.s.state(), HandshakeMachine::State::kEstablished) << e.s.why();
  EXPECT_EQ(e.s.peer_nids(), (std::vector<Nid>{c6, kC1}));
  EXPECT_EQ(e.c.peer_nids(), (std::vector<Nid>{s6}));
  ASSERT_GE(frames[0].size(), 66u + 8);
  uint64_t first = 0;
  for (int k = 0; k < 8; ++k) first |= uint64_t(frames[0].data()[66 + k]) << (8 * k);
  EXPECT_FALSE(Nid::unpack(first).ok()) << "an old decoder refuses it";
  EXPECT_EQ(decode_hello(frames[0].span())->nids[0], c6);
  // Truncated anywhere inside the large NID: malformed, never read past.
  for (size_t n = 66; n < 66 + 24; ++n) EXPECT_FALSE(decode_hello(frames[0].span().first(n)).ok());
}

// Release levels: each end learns the other's; a peer below the cluster's level is refused
// by whichever end knows the level, saying why.
WireSpeaks at_level(uint16_t level, uint16_t min_peer_level) {
  WireSpeaks w = speaks(1, 2, kFeaturesSpoken, "r", 1);
  w.level = level;
  w.min_peer_level = min_peer_level;
  return w;
}

TEST(HandshakeLevelTest, EachEndLearnsThePeersLevelAndOneThatSaysNoneIsOfLevel2) {
  Negotiated n = between(at_level(3, 1), at_level(2, 2));
  n.run();
  ASSERT_EQ(n.e.c.state(), HandshakeMachine::State::kEstablished) << n.e.c.why();
  ASSERT_EQ(n.e.s.state(), HandshakeMachine::State::kEstablished) << n.e.s.why();
  EXPECT_EQ(n.e.c.session().peer_level, 2);
  EXPECT_TRUE(n.e.c.session().peer_says_level);
  EXPECT_EQ(n.e.s.session().peer_level, 3);
  // A version-2 build from before levels announces none: it speaks 2, so it is of level 2,
  // and the MGS knows not to send it what it does not decode (peer_says_level).
  Negotiated m = between(at_level(0, 1), at_level(2, 2));
  m.run();
  ASSERT_EQ(m.e.s.state(), HandshakeMachine::State::kEstablished) << m.e.s.why();
  EXPECT_EQ(m.e.s.session().peer_level, 2);
  EXPECT_FALSE(m.e.s.session().peer_says_level);
  // A version-1 peer is of level 1.
  Negotiated v1 = between(speaks(1, 1, 0, "", 0), at_level(2, 1));
  v1.run();
  ASSERT_EQ(v1.e.s.state(), HandshakeMachine::State::kEstablished) << v1.e.s.why();
  EXPECT_EQ(v1.e.s.session().peer_level, 1);
  EXPECT_FALSE(v1.e.s.session().peer_says_level);
}

TEST(HandshakeLevelTest, AServerAtLevel2RefusesAVersion1ClientSayingWhy) {
  Negotiated n = between(speaks(1, 1, 0, "", 0), at_level(2, 2));
  n.run();
  EXPECT_EQ(n.e.s.state(), HandshakeMachine::State::kRefused);
  EXPECT_EQ(n.e.c.state(), HandshakeMachine::State::kRefusedByPeer);
  EXPECT_EQ(n.e.c.why(),
            "the cluster's minimum release level is 2 and the peer's release is of level 1 (it "
            "speaks only wire version 1): upgrade it (pfsnet upgrade check lists the nodes "
            "below the level)");
  // The REJECT is a version-1 frame: what an 8827b49 client reads.
  EXPECT_EQ(n.versions.back(), 1);
}

TEST(HandshakeLevelTest, AClientAtLevel2OffersOnly2AndRefusesAVersion1Server) {
  auto m = HandshakeMachine::client(kKey, {kC1}, 0, at_level(2, 2));
  auto hello = m.start().send;
  ASSERT_TRUE(hello);
  EXPECT_EQ(*parse_offer(hello->xid), (std::pair<uint16_t, uint16_t>{2, 2}));
  // An 8827b49 server reads no offer: it answers version 1's HELLO, its nonce unmarked.
  auto ch = decode_hello(hello->payload.span());
  ASSERT_TRUE(ch.ok());
  auto st = m.on_frame(FrameKind::kHello, encode_hello(server_hello(kKey, *ch, {kS1})).span());
  EXPECT_EQ(st.state, HandshakeMachine::State::kRefused);
  ASSERT_TRUE(st.send);
  EXPECT_EQ(st.send->kind, FrameKind::kReject);
  EXPECT_NE(m.why().find("minimum release level is 2"), std::string::npos) << m.why();
}

TEST(HandshakeLevelTest, AVersion2PeerBelowTheLevelIsRefusedByEitherEnd) {
  Negotiated s = between(at_level(2, 1), at_level(3, 3));  // the server knows level 3
  s.run();
  EXPECT_EQ(s.e.s.state(), HandshakeMachine::State::kRefused);
  EXPECT_EQ(s.e.c.state(), HandshakeMachine::State::kRefusedByPeer);
  EXPECT_NE(s.e.c.why().find("level is 3 and the peer's release is of level 2:"), std::string::npos)
      << s.e.c.why();
  Negotiated c = between(at_level(3, 3), at_level(2, 1));  // the client does
  c.run();
  EXPECT_EQ(c.e.c.state(), HandshakeMachine::State::kRefused);
  EXPECT_EQ(c.e.s.state(), HandshakeMachine::State::kRefusedByPeer);
  EXPECT_NE(c.e.s.why().find("level is 3"), std::string::npos) << c.e.s.why();
  // Both at the level: established.
  Negotiated ok = between(at_level(3, 3), at_level(3, 3));
  ok.run();
  EXPECT_EQ(ok.e.c.state(), HandshakeMachine::State::kEstablished) << ok.e.c.why();
}

TEST(HandshakeLevelTest, TheLevelFieldIsCheckedWhenDecoded) {
  WireFields w;
  w.min_version = 1;
  w.max_version = 2;
  w.features = 1;
  w.level = 7;
  auto back = decode_wire_fields(encode_wire_fields(w).span());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->level, 7);
  w.level = 0;
  Buffer base = encode_wire_fields(w);  // no level field
  EXPECT_EQ(decode_wire_fields(base.span())->level, 0);
  auto with = [&](std::vector<uint8_t> field) {
    std::vector<uint8_t> b(base.data(), base.data() + base.size());
    b.insert(b.end(), field.begin(), field.end());
    return decode_wire_fields(b);
  };
  EXPECT_TRUE(with({6, 2, 0, 2, 0}).ok());
  EXPECT_FALSE(with({6, 2, 0, 1, 0}).ok()) << "level 1 does not speak version 2";
  EXPECT_FALSE(with({6, 2, 0, 0, 0}).ok());
  EXPECT_FALSE(with({6, 1, 0, 2}).ok()) << "a level of one byte";
  EXPECT_FALSE(with({6, 2, 0, 2, 0, 6, 2, 0, 3, 0}).ok()) << "two levels";
}

// Receive windows: an end that grants one (a router) tells its peer in its fields; each
// end's session holds what it granted and what it was granted -- only where both speak the
// feature: a peer that does not is granted nothing and held to nothing.
TEST(HandshakeWindowTest, AGrantedWindowReachesThePeerWhereBothSpeakTheFeature) {
  WireSpeaks router = speaks(1, 2, kFeaturesSpoken, "r", 1);
  router.window = 8;
  Negotiated n = between(speaks(1, 2, kFeaturesSpoken, "c", 2), router);
  n.run();
  ASSERT_EQ(n.e.c.state(), HandshakeMachine::State::kEstablished) << n.e.c.why();
  EXPECT_TRUE(n.e.c.session().features & kFeatureWindow);
  EXPECT_EQ(n.e.c.session().peer_window, 8u);
  EXPECT_EQ(n.e.c.session().window, 0u);
  EXPECT_EQ(n.e.s.session().window, 8u);
  EXPECT_EQ(n.e.s.session().peer_window, 0u);
  // The client grants too (both routers).
  WireSpeaks other = speaks(1, 2, kFeaturesSpoken, "c", 2);
  other.window = 3;
  Negotiated both = between(other, router);
  both.run();
  EXPECT_EQ(both.e.c.session().peer_window, 8u);
  EXPECT_EQ(both.e.s.session().peer_window, 3u);
  // A client without the feature: no window either way.
  Negotiated old = between(speaks(1, 2, kFeaturesSpoken & ~kFeatureWindow, "c", 2), router);
  old.run();
  ASSERT_EQ(old.e.s.state(), HandshakeMachine::State::kEstablished) << old.e.s.why();
  EXPECT_FALSE(old.e.s.session().features & kFeatureWindow);
  EXPECT_EQ(old.e.s.session().window, 0u);
  EXPECT_EQ(old.e.c.session().peer_window, 0u);
}

TEST(HandshakeWindowTest, TheWindowFieldIsCheckedWhenDecoded) {
  WireFields w;
  w.min_version = 1;
  w.max_version = 2;
  w.features = kFeatureWindow;
  w.window = 300;
  auto back = decode_wire_fields(encode_wire_fields(w).span());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->window, 300u);
  w.window = 0;
  Buffer base = encode_wire_fields(w);  // no window field
  EXPECT_EQ(decode_wire_fields(base.span())->window, 0u);
  auto with = [&](std::vector<uint8_t> field) {
    std::vector<uint8_t> b(base.data(), base.data() + base.size());
    b.insert(b.end(), field.begin(), field.end());
    return decode_wire_fields(b);
  };
  EXPECT_TRUE(with({7, 4, 0, 8, 0, 0, 0}).ok());
  EXPECT_TRUE(with({7, 4, 0, 0, 0, 1, 0}).ok()) << "65536, the most peer_credits can be";
  EXPECT_FALSE(with({7, 4, 0, 1, 0, 1, 0}).ok()) << "beyond any peer_credits";
  EXPECT_FALSE(with({7, 4, 0, 0, 0, 0, 0}).ok()) << "a window of 0";
  EXPECT_FALSE(with({7, 2, 0, 8, 0}).ok()) << "a window of two bytes";
  EXPECT_FALSE(with({7, 4, 0, 8, 0, 0, 0, 7, 4, 0, 9, 0, 0, 0}).ok()) << "two windows";
}

}  // namespace
}  // namespace pfsnet
