#include "wire/handshake.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <stdexcept>

namespace pfsnet {

Nonce random_nonce() {
  Nonce n;
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    throw std::runtime_error("RAND_bytes failed");
  return n;
}

Buffer encode_hello(const Hello& h) {
  Buffer b(64 + 2 + 8 * h.nids.size() + 1);
  uint8_t* p = b.data();
  std::memcpy(p, h.nonce.data(), 32);
  std::memcpy(p + 32, h.mac.data(), 32);
  p[64] = static_cast<uint8_t>(h.nids.size());
  p[65] = static_cast<uint8_t>(h.nids.size() >> 8);
  for (size_t i = 0; i < h.nids.size(); ++i) {
    uint64_t v = h.nids[i].pack();
    for (int k = 0; k < 8; ++k) p[66 + 8 * i + k] = static_cast<uint8_t>(v >> (8 * k));
  }
  p[66 + 8 * h.nids.size()] = h.flags;
  return b;
}

Result<Hello> decode_hello(std::span<const uint8_t> p) {
  if (p.size() < 66) return Status(Code::kProtocol, "malformed HELLO: too short");
  Hello h;
  std::memcpy(h.nonce.data(), p.data(), 32);
  std::memcpy(h.mac.data(), p.data() + 32, 32);
  size_t n = p[64] | (size_t(p[65]) << 8);
  if (n == 0 || n > kMaxHelloNids) return Status(Code::kProtocol, "malformed HELLO: NID count");
  if (p.size() != 66 + 8 * n + 1) return Status(Code::kProtocol, "malformed HELLO: length");
  h.flags = p[66 + 8 * n];
  if (h.flags & ~kHelloBulk) return Status(Code::kProtocol, "malformed HELLO: unknown flags");
  for (size_t i = 0; i < n; ++i) {
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v |= uint64_t(p[66 + 8 * i + k]) << (8 * k);
    auto nid = Nid::unpack(v);
    if (!nid.ok()) return Status(Code::kProtocol, "malformed HELLO: " + nid.status().message());
    h.nids.push_back(*nid);
  }
  return h;
}

Mac handshake_mac(std::string_view key, char role, const Nonce& mine, const Nonce& theirs,
                  const std::vector<Nid>& their_nids, const std::vector<Nid>& my_nids,
                  uint8_t client_flags) {
  // role | theirs (the challenge) | mine | their nids | my nids | the client's flags
  std::vector<uint8_t> msg;
  msg.reserve(1 + 64 + 8 * (their_nids.size() + my_nids.size()) + 1);
  msg.push_back(static_cast<uint8_t>(role));
  msg.insert(msg.end(), theirs.begin(), theirs.end());
  msg.insert(msg.end(), mine.begin(), mine.end());
  for (const auto* list : {&their_nids, &my_nids})
    for (const Nid& n : *list) {
      uint64_t v = n.pack();
      for (int k = 0; k < 8; ++k) msg.push_back(static_cast<uint8_t>(v >> (8 * k)));
    }
  msg.push_back(client_flags);
  Mac mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg.data(), msg.size(), mac.data(),
       &len);
  return mac;
}

bool mac_equal(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::vector<Nid> announced_nids(const Nid& local, const std::vector<Nid>& node_nids) {
  std::vector<Nid> v = {local};
  for (const Nid& n : node_nids)
    if (n != local) v.push_back(n);
  return v;
}

Hello client_hello(std::vector<Nid> nids, uint8_t flags) {
  Hello h;
  h.nonce = random_nonce();
  h.nids = std::move(nids);
  h.flags = flags;
  return h;
}

Hello server_hello(std::string_view key, const Hello& client, std::vector<Nid> nids) {
  Hello h;
  h.nonce = random_nonce();
  h.nids = std::move(nids);
  h.mac = handshake_mac(key, 'S', h.nonce, client.nonce, client.nids, h.nids, client.flags);
  return h;
}

bool server_proof_ok(std::string_view key, const Hello& client, const Hello& server) {
  return mac_equal(server.mac, handshake_mac(key, 'S', server.nonce, client.nonce, client.nids,
                                             server.nids, client.flags));
}

Mac client_proof(std::string_view key, const Hello& client, const Hello& server) {
  return handshake_mac(key, 'C', client.nonce, server.nonce, server.nids, client.nids,
                       client.flags);
}

bool client_proof_ok(std::string_view key, const Hello& client, const Hello& server,
                     const Mac& proof) {
  return mac_equal(proof, client_proof(key, client, server));
}

HandshakeMachine::HandshakeMachine(std::string key, std::vector<Nid> my_nids, bool client,
                                   uint8_t flags)
    : key_(std::move(key)), client_(client) {
  mine_.nids = std::move(my_nids);
  mine_.flags = client ? flags : 0;
}

HandshakeMachine HandshakeMachine::client(std::string key, std::vector<Nid> my_nids,
                                          uint8_t flags) {
  return HandshakeMachine(std::move(key), std::move(my_nids), true, flags);
}

HandshakeMachine HandshakeMachine::server(std::string key, std::vector<Nid> my_nids) {
  return HandshakeMachine(std::move(key), std::move(my_nids), false, 0);
}

HandshakeMachine::Step HandshakeMachine::done(State s, std::string why, std::optional<Out> send) {
  state_ = s;
  why_ = std::move(why);
  return Step{std::move(send), s};
}

HandshakeMachine::Step HandshakeMachine::start() {
  if (!client_ || step_ != 0 || state_ != State::kRunning) return Step{};
  mine_ = client_hello(std::move(mine_.nids), mine_.flags);
  return Step{Out{FrameKind::kHello, encode_hello(mine_)}, State::kRunning};
}

HandshakeMachine::Step HandshakeMachine::on_frame(FrameKind kind,
                                                  std::span<const uint8_t> payload) {
  if (state_ != State::kRunning) return done(State::kFailed, "a frame after the handshake ended");
  int step = step_++;
  if (kind == FrameKind::kReject)
    return done(State::kRefusedByPeer,
                std::string(reinterpret_cast<const char*>(payload.data()), payload.size()));
  static const std::string kWrongKey = "wrong cluster key";
  auto reject = [&] {
    return done(State::kRefused, kWrongKey,
                Out{FrameKind::kReject, Buffer::copy_of(std::string_view(kWrongKey))});
  };
  if (client_ && step == 0) {  // the server's HELLO with its proof
    if (kind != FrameKind::kHello) return done(State::kFailed, "expected HELLO");
    auto sh = decode_hello(payload);
    if (!sh.ok()) return done(State::kFailed, sh.status().message());
    peer_ = std::move(*sh);
    if (!server_proof_ok(key_, mine_, peer_)) return reject();
    Mac proof = client_proof(key_, mine_, peer_);
    return Step{Out{FrameKind::kAuth, Buffer::copy_of(std::span<const uint8_t>(proof))},
                State::kRunning};
  }
  if (client_ && step == 1) {  // the server's acceptance
    if (kind != FrameKind::kAuth) return done(State::kFailed, "expected AUTH");
    return done(State::kEstablished, "");
  }
  if (!client_ && step == 0) {  // the client's HELLO
    if (kind != FrameKind::kHello) return done(State::kFailed, "expected HELLO");
    auto ch = decode_hello(payload);
    if (!ch.ok()) return done(State::kFailed, ch.status().message());
    peer_ = std::move(*ch);
    mine_ = server_hello(key_, peer_, std::move(mine_.nids));
    return Step{Out{FrameKind::kHello, encode_hello(mine_)}, State::kRunning};
  }
  // The server, step 1: the client's proof.
  if (kind != FrameKind::kAuth || payload.size() != sizeof(Mac))
    return done(State::kFailed, "expected AUTH");
  Mac theirs;
  std::memcpy(theirs.data(), payload.data(), theirs.size());
  if (!client_proof_ok(key_, peer_, mine_, theirs)) return reject();
  return done(State::kEstablished, "", Out{FrameKind::kAuth, Buffer()});
}

void run_handshake(HandshakeMachine& client, HandshakeMachine& server,
                   const std::function<void(HandshakeMachine::Out&)>& on_wire) {
  std::optional<HandshakeMachine::Out> out = client.start().send;
  for (int i = 0; i < 4 && out; ++i) {
    if (on_wire) on_wire(*out);
    HandshakeMachine& to = i % 2 == 0 ? server : client;
    out = to.on_frame(out->kind, out->payload.span()).send;
  }
}

}  // namespace pfsnet
