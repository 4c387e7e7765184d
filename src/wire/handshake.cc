#include "wire/handshake.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "wire/le.h"
#include "wire/nid_form.h"

namespace pfsnet {

Nonce random_nonce() {
  Nonce n;
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    throw std::runtime_error("RAND_bytes failed");
  return n;
}

namespace {
// The NIDs of a HELLO and of the proofs: each in its wire form (wire/nid_form.h), so an
// IPv4 NID's 8 bytes are version 1's.
void append_nids(std::vector<uint8_t>* out, const std::vector<Nid>& nids) {
  for (const Nid& n : nids) {
    size_t at = out->size();
    out->resize(at + nid_wire_size(n));
    put_nid(out->data() + at, n);
  }
}
}  // namespace

Buffer encode_hello(const Hello& h) {
  std::vector<uint8_t> b(66);
  std::memcpy(b.data(), h.nonce.data(), 32);
  std::memcpy(b.data() + 32, h.mac.data(), 32);
  b[64] = static_cast<uint8_t>(h.nids.size());
  b[65] = static_cast<uint8_t>(h.nids.size() >> 8);
  append_nids(&b, h.nids);
  b.push_back(h.flags);
  return Buffer::copy_of(std::span<const uint8_t>(b));
}

Result<Hello> decode_hello(std::span<const uint8_t> p) {
  if (p.size() < 66) return Status(Code::kProtocol, "malformed HELLO: too short");
  Hello h;
  std::memcpy(h.nonce.data(), p.data(), 32);
  std::memcpy(h.mac.data(), p.data() + 32, 32);
  size_t n = p[64] | (size_t(p[65]) << 8);
  if (n == 0 || n > kMaxHelloNids) return Status(Code::kProtocol, "malformed HELLO: NID count");
  size_t at = 66;
  for (size_t i = 0; i < n; ++i) {
    size_t used = 0;
    if (p.size() < at + 1) return Status(Code::kProtocol, "malformed HELLO: length");
    auto nid = get_nid(p.subspan(at, p.size() - at - 1), &used);  // the last byte: flags
    if (!nid.ok()) return Status(Code::kProtocol, "malformed HELLO: " + nid.status().message());
    h.nids.push_back(*nid);
    at += used;
  }
  if (p.size() != at + 1) return Status(Code::kProtocol, "malformed HELLO: length");
  h.flags = p[at];
  if (h.flags & ~kHelloBulk) return Status(Code::kProtocol, "malformed HELLO: unknown flags");
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
  append_nids(&msg, their_nids);
  append_nids(&msg, my_nids);
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

std::vector<Nid> hello_nids(const std::vector<Nid>& announced) {
  std::vector<Nid> v;
  for (size_t i = 0; i < announced.size(); ++i)
    if (i == 0 || !announced[i].is_large()) v.push_back(announced[i]);
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

namespace {

// A version-1 server HELLO's nonce from a node that speaks more: its last 8 bytes say so
// ("PFSV", the highest version, 0), so a client whose offer was removed on the way sees it.
constexpr size_t kMarkAt = 24;

void mark_nonce(Nonce* n, uint16_t max_version) {
  uint8_t* p = n->data() + kMarkAt;
  le::put<uint32_t>(p, kOfferMagic);
  le::put<uint16_t>(p + 4, max_version);
  le::put<uint16_t>(p + 6, 0);
}

uint16_t marked_max(const Nonce& n) {
  const uint8_t* p = n.data() + kMarkAt;
  if (le::get<uint32_t>(p) != kOfferMagic || le::get<uint16_t>(p + 6) != 0) return 1;
  return le::get<uint16_t>(p + 4);
}

// Version-2 handshake fields: type u8 | length u16 | value. Unknown types are skipped.
// kNids: the NIDs, each type u8 | address length u8 | net number u16 | address (network
// byte order), the large form a longer address (IPv6) fits.
enum Field : uint8_t {
  kVersions = 1,
  kFeatures = 2,
  kRelease = 3,
  kInstance = 4,
  kNids = 5,
  kLevel = 6,
  kWindow = 7,  // u32: the receive window the sender grants (kFeatureWindow)
};
constexpr size_t kMaxRelease = 64;

void put_field(std::vector<uint8_t>* out, uint8_t type, std::span<const uint8_t> v) {
  out->push_back(type);
  out->push_back(static_cast<uint8_t>(v.size()));
  out->push_back(static_cast<uint8_t>(v.size() >> 8));
  out->insert(out->end(), v.begin(), v.end());
}

template <class T>
void put_int_field(std::vector<uint8_t>* out, uint8_t type, T v) {
  uint8_t b[sizeof(T)];
  le::put<T>(b, v);
  put_field(out, type, b);
}

std::string versions_string(uint16_t lo, uint16_t hi) {
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi);
}

}  // namespace

uint64_t wire_offer(uint16_t min_version, uint16_t max_version) {
  if (max_version <= 1) return 0;
  return uint64_t(kOfferMagic) << 32 | uint64_t(max_version) << 16 | min_version;
}

Result<std::pair<uint16_t, uint16_t>> parse_offer(uint64_t xid) {
  if (xid == 0) return std::pair<uint16_t, uint16_t>{1, 1};
  uint16_t lo = static_cast<uint16_t>(xid), hi = static_cast<uint16_t>(xid >> 16);
  if (uint32_t(xid >> 32) != kOfferMagic || lo == 0 || lo > hi)
    return Status(Code::kProtocol, "malformed HELLO: its xid is neither 0 nor a version offer");
  return std::pair<uint16_t, uint16_t>{lo, hi};
}

std::string key_fingerprint(std::string_view key) {
  uint8_t d[32];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), d);
  return to_hex(std::span(d, 8));
}

std::string_view key_used_name(KeyUsed k) {
  switch (k) {
    case KeyUsed::kCurrent:
      return "current";
    case KeyUsed::kNext:
      return "next";
    case KeyUsed::kPrevious:
      return "previous";
  }
  return "?";
}

HandshakeMachine::HandshakeMachine(ClusterKeys keys, std::vector<Nid> my_nids, bool client,
                                   uint8_t flags, WireSpeaks speaks)
    : keys_(std::move(keys)), client_(client), speaks_(std::move(speaks)) {
  all_nids_ = std::move(my_nids);
  mine_.nids = hello_nids(all_nids_);
  mine_.flags = client ? flags : 0;
}

HandshakeMachine HandshakeMachine::client(ClusterKeys keys, std::vector<Nid> my_nids, uint8_t flags,
                                          WireSpeaks speaks) {
  return HandshakeMachine(std::move(keys), std::move(my_nids), true, flags, std::move(speaks));
}

HandshakeMachine HandshakeMachine::server(ClusterKeys keys, std::vector<Nid> my_nids,
                                          WireSpeaks speaks) {
  return HandshakeMachine(std::move(keys), std::move(my_nids), false, 0, std::move(speaks));
}

HandshakeMachine::Step HandshakeMachine::done(State s, std::string why, std::optional<Out> send) {
  state_ = s;
  why_ = std::move(why);
  return Step{std::move(send), s};
}

HandshakeMachine::Step HandshakeMachine::reject(std::string why) {
  Buffer reason = Buffer::copy_of(std::string_view(why));
  return done(State::kRefused, std::move(why), Out{FrameKind::kReject, std::move(reason)});
}

Buffer encode_wire_fields(const WireFields& w) {
  std::vector<uint8_t> f;
  uint8_t v[4];
  le::put<uint16_t>(v, w.min_version);
  le::put<uint16_t>(v + 2, w.max_version);
  put_field(&f, kVersions, v);
  put_int_field<uint64_t>(&f, kFeatures, w.features);
  if (!w.release.empty()) {
    size_t n = std::min(w.release.size(), kMaxRelease);
    put_field(&f, kRelease, {reinterpret_cast<const uint8_t*>(w.release.data()), n});
  }
  if (w.instance) put_int_field<uint64_t>(&f, kInstance, w.instance);
  if (!w.nids.empty()) {
    std::vector<uint8_t> n;
    for (const Nid& nid : w.nids) {
      n.push_back(static_cast<uint8_t>(nid.type));
      n.push_back(nid.addr_len);
      n.push_back(static_cast<uint8_t>(nid.net_num));
      n.push_back(static_cast<uint8_t>(nid.net_num >> 8));
      n.insert(n.end(), nid.addr.begin(), nid.addr.begin() + nid.addr_len);
    }
    put_field(&f, kNids, n);
  }
  if (w.level) put_int_field<uint16_t>(&f, kLevel, w.level);
  if (w.window) put_int_field<uint32_t>(&f, kWindow, w.window);
  return Buffer::copy_of(std::span<const uint8_t>(f));
}

Result<WireFields> decode_wire_fields(std::span<const uint8_t> b) {
  auto bad = [](const std::string& why) {
    return Status(Code::kProtocol, "malformed version-2 handshake: " + why);
  };
  WireFields w;
  bool versions = false, features = false, nids = false;
  size_t i = 0;
  while (i < b.size()) {
    if (b.size() - i < 3) return bad("truncated field");
    uint8_t type = b[i];
    size_t len = b[i + 1] | size_t(b[i + 2]) << 8;
    if (b.size() - i - 3 < len) return bad("field " + std::to_string(type) + " truncated");
    const uint8_t* v = b.data() + i + 3;
    i += 3 + len;
    switch (type) {
      case kVersions:
        if (len != 4 || versions) return bad("versions field");
        w.min_version = le::get<uint16_t>(v);
        w.max_version = le::get<uint16_t>(v + 2);
        if (w.min_version == 0 || w.min_version > w.max_version)
          return bad("versions " + std::to_string(w.min_version) + " to " +
                     std::to_string(w.max_version));
        versions = true;
        break;
      case kFeatures:
        if (len != 8 || features) return bad("features field");
        w.features = le::get<uint64_t>(v);
        features = true;
        break;
      case kRelease:
        if (len == 0 || len > kMaxRelease || !w.release.empty())
          return bad("release field of " + std::to_string(len) + " bytes");
        for (size_t k = 0; k < len; ++k)
          if (v[k] < 0x20 || v[k] > 0x7e) return bad("release is not printable");
        w.release.assign(reinterpret_cast<const char*>(v), len);
        break;
      case kInstance:
        if (len != 8) return bad("instance field");
        w.instance = le::get<uint64_t>(v);
        break;
      case kLevel:
        if (len != 2 || w.level) return bad("level field");
        w.level = le::get<uint16_t>(v);
        if (w.level < 2) return bad("release level " + std::to_string(w.level) + " on version 2");
        break;
      case kWindow:
        if (len != 4 || w.window) return bad("window field");
        w.window = le::get<uint32_t>(v);
        if (w.window == 0 || w.window > kMaxWindow)
          return bad("a window of " + std::to_string(w.window));
        break;
      case kNids: {
        if (nids) return bad("NIDs field twice");
        nids = true;
        for (size_t k = 0; k < len;) {
          if (len - k < 4 || len - k - 4 < v[k + 1]) return bad("NIDs field truncated");
          uint8_t alen = v[k + 1];
          uint64_t packed = uint64_t(v[k]) << 48 | uint64_t(v[k + 2] | v[k + 3] << 8) << 32;
          const uint8_t* a = v + k + 4;
          k += 4 + size_t(alen);
          if (alen != 4 && alen != 16) {  // an address this build cannot hold: a NI it cannot use
            if (w.nids.empty())
              return bad("the connection's NID has an address of " + std::to_string(alen) +
                         " bytes");
            continue;
          }
          auto nid = Nid::unpack(packed);
          if (!nid.ok()) return bad(nid.status().message());
          nid->addr_len = alen;
          std::memcpy(nid->addr.data(), a, alen);
          if (w.nids.size() == kMaxHelloNids) return bad("too many NIDs");
          w.nids.push_back(*nid);
        }
        if (w.nids.empty()) return bad("no NIDs");
        break;
      }
      default:
        break;  // a field of a later version: skipped
    }
  }
  if (!versions || !features) return bad("no versions or features");
  return w;
}

Buffer HandshakeMachine::my_fields() const {
  WireFields w{speaks_.min_version, speaks_.max_version, speaks_.features,
               speaks_.release,     speaks_.instance,    {},
               speaks_.level,       speaks_.window};
  // The server's NIDs; the client's are in its HELLO but for the large ones it left out.
  if (!client_ || all_nids_ != mine_.nids) w.nids = all_nids_;
  return encode_wire_fields(w);
}

Status HandshakeMachine::take_fields(std::span<const uint8_t> b) {
  auto w = decode_wire_fields(b);
  if (!w.ok()) return w.status();
  if (client_ && w->nids.empty())
    return Status(Code::kProtocol, "malformed version-2 handshake: no NIDs");
  session_.peer_min = w->min_version;
  session_.peer_max = w->max_version;
  session_.peer_features = w->features;
  session_.peer_release = std::move(w->release);
  session_.peer_instance = w->instance;
  session_.peer_level = w->level ? w->level : 2;
  session_.peer_says_level = w->level != 0;
  session_.features = speaks_.features & w->features;
  if (session_.features & kFeatureWindow) {
    session_.peer_window = w->window;
    session_.window = speaks_.window;
  }
  if (client_) {
    peer_.nids = std::move(w->nids);
  } else if (!w->nids.empty()) {  // the client's whole list, its large NIDs too
    if (peer_.nids.empty() || w->nids[0] != peer_.nids[0])
      return Status(Code::kProtocol,
                    "malformed version-2 handshake: its NIDs do not begin with its HELLO's");
    peer_.nids = std::move(w->nids);
  }
  return Status::Ok();
}

// v2: HMAC(key, role | '2' | offer | the client HELLO | second | third): for the server's
// proof its nonce and fields, for the client's the server's HELLO and its own fields.
std::string HandshakeMachine::peer_refusal() const { return check_ ? check_(peer_.nids) : ""; }

uint16_t HandshakeMachine::min_version() const {
  return std::max(speaks_.min_version, wire_floor(speaks_.min_peer_level));
}

std::string HandshakeMachine::level_refusal(uint16_t peer_level) const {
  if (peer_level >= speaks_.min_peer_level) return "";
  return "the cluster's minimum release level is " + std::to_string(speaks_.min_peer_level) +
         " and the peer's release is of level " + std::to_string(peer_level) +
         (peer_level == 1 ? " (it speaks only wire version 1)" : "") +
         ": upgrade it (pfsnet upgrade check lists the nodes below the level)";
}

std::optional<KeyUsed> HandshakeMachine::accepted_by(
    const std::function<bool(std::string_view)>& ok) const {
  if (ok(keys_.current)) return KeyUsed::kCurrent;
  if (!keys_.next.empty() && ok(keys_.next)) return KeyUsed::kNext;
  if (!keys_.previous.empty() && ok(keys_.previous)) return KeyUsed::kPrevious;
  return std::nullopt;
}

Mac HandshakeMachine::v2_mac(std::string_view key, char role, std::span<const uint8_t> second,
                             std::span<const uint8_t> third) const {
  std::vector<uint8_t> msg;
  msg.reserve(2 + 8 + client_hello_raw_.size() + second.size() + third.size());
  msg.push_back(static_cast<uint8_t>(role));
  msg.push_back('2');
  uint8_t offer[8];
  le::put<uint64_t>(offer, offer_);
  msg.insert(msg.end(), offer, offer + 8);
  msg.insert(msg.end(), client_hello_raw_.data(),
             client_hello_raw_.data() + client_hello_raw_.size());
  msg.insert(msg.end(), second.begin(), second.end());
  msg.insert(msg.end(), third.begin(), third.end());
  Mac mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg.data(), msg.size(), mac.data(),
       &len);
  return mac;
}

HandshakeMachine::Step HandshakeMachine::start() {
  if (!client_ || step_ != 0 || state_ != State::kRunning) return Step{};
  mine_ = client_hello(std::move(mine_.nids), mine_.flags);
  offer_ = wire_offer(std::min(min_version(), speaks_.max_version), speaks_.max_version);
  client_hello_raw_ = encode_hello(mine_);
  return Step{Out{FrameKind::kHello, Buffer::copy_of(client_hello_raw_.span()), 1, offer_},
              State::kRunning};
}

HandshakeMachine::Step HandshakeMachine::on_frame(FrameKind kind,
                                                  std::span<const uint8_t> payload) {
  FrameHeader h;
  h.kind = kind;
  return on_frame(h, payload);
}

HandshakeMachine::Step HandshakeMachine::client_takes_hello(const FrameHeader& h,
                                                            std::span<const uint8_t> payload) {
  if (h.kind != FrameKind::kHello) return done(State::kFailed, "expected HELLO");
  if (h.version == 1) {
    auto sh = decode_hello(payload);
    if (!sh.ok()) return done(State::kFailed, sh.status().message());
    peer_ = std::move(*sh);
    std::optional<KeyUsed> used =
        accepted_by([&](std::string_view k) { return server_proof_ok(k, mine_, peer_); });
    if (!used) return reject(std::string(kWrongClusterKey));
    if (std::string why = peer_refusal(); !why.empty()) return reject(why);
    if (speaks_.max_version >= 2 && marked_max(peer_.nonce) >= 2)
      return done(State::kFailed,
                  "the server speaks wire version " + std::to_string(marked_max(peer_.nonce)) +
                      " but answered version 1: our version offer was removed on the way");
    if (std::string why = level_refusal(1); !why.empty()) return reject(why);
    if (speaks_.min_version > 1)
      return reject("no common wire version: the peer speaks 1, this node " +
                    versions_string(speaks_.min_version, speaks_.max_version));
    session_ = WireSession{};
    session_.peer_key = *used;
    Mac proof = client_proof(keys_.current, mine_, peer_);
    return Step{Out{FrameKind::kAuth, Buffer::copy_of(std::span<const uint8_t>(proof))},
                State::kRunning};
  }
  // Version 2: nonce_s | mac_s | the server's fields.
  if (h.version > speaks_.max_version || offer_ == 0)
    return done(State::kFailed, "a version-" + std::to_string(h.version) +
                                    " HELLO answering an offer of at most " +
                                    std::to_string(speaks_.max_version));
  if (payload.size() < 64) return done(State::kFailed, "malformed version-2 HELLO: too short");
  Nonce nonce;
  Mac mac;
  std::memcpy(nonce.data(), payload.data(), 32);
  std::memcpy(mac.data(), payload.data() + 32, 32);
  std::span<const uint8_t> fields = payload.subspan(64);
  std::optional<KeyUsed> used = accepted_by(
      [&](std::string_view k) { return mac_equal(mac, v2_mac(k, 'S', nonce, fields)); });
  if (!used) return reject(std::string(kWrongClusterKey));
  if (Status st = take_fields(fields); !st.ok()) return done(State::kFailed, st.message());
  if (std::string why = peer_refusal(); !why.empty()) return reject(why);
  if (std::string why = level_refusal(session_.peer_level); !why.empty()) return reject(why);
  session_.version = h.version;
  session_.peer_key = *used;
  peer_.nonce = nonce;
  server_hello_raw_ = Buffer::copy_of(payload);
  Buffer mine = my_fields();
  Mac proof = v2_mac(keys_.current, 'C', server_hello_raw_.span(), mine.span());
  Buffer auth(32 + mine.size());
  std::memcpy(auth.data(), proof.data(), 32);
  if (mine.size()) std::memcpy(auth.data() + 32, mine.data(), mine.size());
  return Step{Out{FrameKind::kAuth, std::move(auth), session_.version}, State::kRunning};
}

HandshakeMachine::Step HandshakeMachine::server_takes_hello(const FrameHeader& h,
                                                            std::span<const uint8_t> payload) {
  if (h.kind != FrameKind::kHello) return done(State::kFailed, "expected HELLO");
  if (h.version != 1) return done(State::kFailed, "a client HELLO in a version-2 frame");
  auto ch = decode_hello(payload);
  if (!ch.ok()) return done(State::kFailed, ch.status().message());
  auto offer = parse_offer(h.xid);
  if (!offer.ok()) return done(State::kFailed, offer.status().message());
  peer_ = std::move(*ch);
  offer_ = h.xid;
  client_hello_raw_ = Buffer::copy_of(payload);
  if (std::string why = peer_refusal(); !why.empty()) return reject(why);
  uint16_t v = std::min(offer->second, speaks_.max_version);
  if (offer->second < min_version() && offer->second >= speaks_.min_version)
    return reject(level_refusal(1));  // a version-1 peer, below the cluster's level
  if (v < std::max(offer->first, speaks_.min_version))
    return reject("no common wire version: the peer speaks " +
                  versions_string(offer->first, offer->second) + ", this node " +
                  versions_string(speaks_.min_version, speaks_.max_version));
  if (v == 1) {  // version 1's exchange, the nonce marked when this node speaks more
    mine_ = server_hello(keys_.current, peer_, std::move(mine_.nids));
    if (speaks_.max_version >= 2) {
      mark_nonce(&mine_.nonce, speaks_.max_version);
      mine_.mac = handshake_mac(keys_.current, 'S', mine_.nonce, peer_.nonce, peer_.nids,
                                mine_.nids, peer_.flags);
    }
    session_ = WireSession{};
    return Step{Out{FrameKind::kHello, encode_hello(mine_)}, State::kRunning};
  }
  session_.version = v;
  mine_.nonce = random_nonce();
  Buffer fields = my_fields();
  Mac mac = v2_mac(keys_.current, 'S', mine_.nonce, fields.span());
  server_hello_raw_ = Buffer(64 + fields.size());
  std::memcpy(server_hello_raw_.data(), mine_.nonce.data(), 32);
  std::memcpy(server_hello_raw_.data() + 32, mac.data(), 32);
  if (fields.size()) std::memcpy(server_hello_raw_.data() + 64, fields.data(), fields.size());
  return Step{Out{FrameKind::kHello, Buffer::copy_of(server_hello_raw_.span()), v},
              State::kRunning};
}

HandshakeMachine::Step HandshakeMachine::server_takes_auth(const FrameHeader& h,
                                                           std::span<const uint8_t> payload) {
  if (h.kind != FrameKind::kAuth || h.version != session_.version)
    return done(State::kFailed, "expected AUTH");
  if (session_.version == 1) {
    if (payload.size() != sizeof(Mac)) return done(State::kFailed, "expected AUTH");
    Mac theirs;
    std::memcpy(theirs.data(), payload.data(), theirs.size());
    std::optional<KeyUsed> used =
        accepted_by([&](std::string_view k) { return client_proof_ok(k, peer_, mine_, theirs); });
    if (!used) return reject(std::string(kWrongClusterKey));
    session_.peer_key = *used;
    return done(State::kEstablished, "", Out{FrameKind::kAuth, Buffer()});
  }
  if (payload.size() < sizeof(Mac)) return done(State::kFailed, "expected AUTH");
  Mac theirs;
  std::memcpy(theirs.data(), payload.data(), theirs.size());
  std::span<const uint8_t> fields = payload.subspan(sizeof(Mac));
  std::optional<KeyUsed> used = accepted_by([&](std::string_view k) {
    return mac_equal(theirs, v2_mac(k, 'C', server_hello_raw_.span(), fields));
  });
  if (!used) return reject(std::string(kWrongClusterKey));
  if (Status st = take_fields(fields); !st.ok()) return done(State::kFailed, st.message());
  if (std::string why = peer_refusal(); !why.empty()) return reject(why);  // its large NIDs too
  if (std::string why = level_refusal(session_.peer_level); !why.empty()) return reject(why);
  session_.peer_key = *used;
  return done(State::kEstablished, "", Out{FrameKind::kAuth, Buffer(), session_.version});
}

HandshakeMachine::Step HandshakeMachine::on_frame(const FrameHeader& h,
                                                  std::span<const uint8_t> payload) {
  if (state_ != State::kRunning) return done(State::kFailed, "a frame after the handshake ended");
  int step = step_++;
  if (h.kind == FrameKind::kReject)
    return done(State::kRefusedByPeer,
                std::string(reinterpret_cast<const char*>(payload.data()), payload.size()));
  if (client_ && step == 0) return client_takes_hello(h, payload);
  if (client_ && step == 1) {  // the server's acceptance
    if (h.kind != FrameKind::kAuth || h.version != session_.version)
      return done(State::kFailed, "expected AUTH");
    return done(State::kEstablished, "");
  }
  if (!client_ && step == 0) return server_takes_hello(h, payload);
  return server_takes_auth(h, payload);
}

void run_handshake(HandshakeMachine& client, HandshakeMachine& server,
                   const std::function<void(HandshakeMachine::Out&)>& on_wire) {
  std::optional<HandshakeMachine::Out> out = client.start().send;
  for (int i = 0; i < 4 && out; ++i) {
    if (on_wire) on_wire(*out);
    HandshakeMachine& to = i % 2 == 0 ? server : client;
    FrameHeader h;
    h.kind = out->kind;
    h.version = out->version;
    h.xid = out->xid;
    out = to.on_frame(h, out->payload.span()).send;
  }
}

}  // namespace pfsnet
