// The connection handshake: both ends prove they hold the cluster key with an
// HMAC-SHA256 challenge-response, and tell each other their NIDs; the client says what
// the connection is for (flags: a bulk connection of its path, lnet.conns_per_peer).
//
//   client -> server  HELLO  {nonce_c, nids_c, flags_c}
//   server -> client  HELLO  {nonce_s, nids_s, mac_s = HMAC(key, "S" nonce_c nonce_s nids_c
//                             nids_s flags_c), flags 0}
//   client -> server  AUTH   {mac_c = HMAC(key, "C" nonce_s nonce_c nids_s nids_c flags_c)}
//   server -> client  AUTH   {}                   (accepted)
// Either side sends REJECT {reason} and closes when a proof does not verify.
//
// Versions and features (docs/wire_format.md, "Negotiation"): the client's HELLO is always
// a version-1 frame a pfsnet of any version reads, its xid field the client's offer (the
// range of versions it speaks; 0 from a version-1-only client). A server that speaks a
// higher common version answers with a version-2 HELLO carrying its range, features,
// release and instance, and the client's AUTH carries the client's; from the AUTH on both
// ends speak that version with the features both announced. Otherwise the exchange is
// version 1's, unchanged, except that a server that speaks more marks its nonce (so a
// client whose offer was removed on the way notices).
// Thread safety: pure functions.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wire/frame.h"

namespace pfsnet {

using Nonce = std::array<uint8_t, 32>;
using Mac = std::array<uint8_t, 32>;
inline constexpr size_t kMaxHelloNids = 64;
// The reason of a REJECT for a proof that did not verify.
inline constexpr std::string_view kWrongClusterKey = "wrong cluster key";
// Hello::flags: the connection is one of its path's bulk connections (it carries large
// messages only; the path's first connection carries the rest).
inline constexpr uint8_t kHelloBulk = 1;

// The cluster keys a node holds. It proves with `current` and accepts a peer's proof by
// any of the three: during a rotation (docs/security.md, "Rotating the cluster key") a
// node holds the `next` key before it commits to it, and the `previous` one after, so
// nodes on either side of the commit accept each other. Empty: none.
struct ClusterKeys {
  std::string current, next, previous;
  ClusterKeys() = default;
  ClusterKeys(std::string key) : current(std::move(key)) {}  // NOLINT: one key, no rotation
  ClusterKeys(const char* key) : current(key) {}             // NOLINT
  bool rotating() const { return !next.empty() || !previous.empty(); }
  bool operator==(const ClusterKeys&) const = default;
};
// What a log line or a view may say of a key: the first 8 bytes of its SHA-256, in hex
// (which key it is, nothing of it).
std::string key_fingerprint(std::string_view key);
// Which of its keys verified a peer's proof.
enum class KeyUsed : uint8_t { kCurrent, kNext, kPrevious };
std::string_view key_used_name(KeyUsed k);  // "current", "next", "previous"

// Release levels (docs/wire_format.md, "Release levels"; Storage Scale's minReleaseLevel):
// what a release understands of the cluster-wide features, one number that only grows. Level
// 1 is every release that speaks only wire version 1 (8827b49 and before); level 2 speaks
// version 2, its extension fields and large NIDs, and announces its level in the handshake.
// A cluster's minimum release level (kept by the MGS, `pfsnet upgrade`) is the lowest a
// node may run: a connection's handshake refuses a peer below it.
inline constexpr uint16_t kReleaseLevel = 2;
// The lowest wire version a peer of `level` speaks (a level-1 release speaks only 1).
inline constexpr uint16_t wire_floor(uint16_t level) { return level >= 2 ? 2 : 1; }

// What a node speaks, for its handshakes.
struct WireSpeaks {
  uint16_t min_version = kWireVersionMin, max_version = kWireVersionMax;
  uint64_t features = kFeaturesSpoken;
  std::string release;             // this build's (pfsnet/version.h), shown to its peers
  uint64_t instance = 0;           // this process's run, random per start; 0: not said
  uint16_t level = kReleaseLevel;  // this build's release level, announced on version 2
  // The receive window it grants where the connection speaks kFeatureWindow: requests and
  // replies in flight it takes on the connection. 0: it grants none (its peer's window is
  // the peer's own).
  uint32_t window = 0;
  // The cluster's minimum release level as this node knows it: a peer below it is refused
  // (a version-1 peer is of level 1). 1: every peer is taken.
  uint16_t min_peer_level = 1;
};

// What one connection speaks, from its handshake.
struct WireSession {
  uint16_t version = 1;
  uint64_t features = 0;  // those both ends announced
  // The peer's own, as its version-2 handshake said; a version-1 peer says none of them.
  uint16_t peer_min = 1, peer_max = 1;
  uint64_t peer_features = 0;
  std::string peer_release;
  uint64_t peer_instance = 0;
  // The peer's release level: 1 from a version-1 peer; what a version-2 peer announced (2
  // from one that announced none, which speaks version 2).
  uint16_t peer_level = 1;
  bool peer_says_level = false;  // its handshake named its level (a release that has levels)
  // Which of this node's keys the peer proved with (its current key is this node's next
  // or previous one while a rotation is under way).
  KeyUsed peer_key = KeyUsed::kCurrent;
  // Receive windows (kFeatureWindow in `features`): what this end granted the peer in its
  // handshake, and what the peer granted this end; 0: none.
  uint32_t window = 0, peer_window = 0;
};

// Leaves in `ext` only what a connection speaking `w` carries: nothing on version 1, on
// version 2 the fields of the features both ends announced. Every transport's one rule.
inline void fit_extensions(const WireSession& w, FrameExt* ext) {
  if (ext->empty()) return;
  if (w.version < 2)
    *ext = {};
  else
    ext->keep_only(w.features);
}

// The client HELLO's xid: the versions it offers (0: version 1 only).
inline constexpr uint32_t kOfferMagic = 0x56534650;  // "PFSV" on the wire
uint64_t wire_offer(uint16_t min_version, uint16_t max_version);
// The range an xid offers; an error when it is neither 0 nor an offer.
Result<std::pair<uint16_t, uint16_t>> parse_offer(uint64_t xid);

// The fields of a version-2 handshake (the server's HELLO, the client's AUTH): type u8 |
// length u16 | value each, unknown types skipped (docs/wire_format.md).
struct WireFields {
  uint16_t min_version = 1, max_version = 1;
  uint64_t features = 0;
  std::string release;  // at most 64 printable bytes
  uint64_t instance = 0;
  std::vector<Nid> nids;  // the server's; the client's when its HELLO left large ones out
  uint16_t level = 0;     // the sender's release level; 0: not said
  uint32_t window = 0;    // the receive window it grants (kFeatureWindow); 0: not said
};
Buffer encode_wire_fields(const WireFields& w);
Result<WireFields> decode_wire_fields(std::span<const uint8_t> bytes);

struct Hello {
  Nonce nonce{};
  Mac mac{};  // zero from the client
  std::vector<Nid> nids;
  uint8_t flags = 0;  // the client's kHello* bits; 0 from the server
};

Nonce random_nonce();
Buffer encode_hello(const Hello& h);
Result<Hello> decode_hello(std::span<const uint8_t> payload);

// role is 'S' for the server's proof, 'C' for the client's; `client_flags` are the
// client HELLO's.
Mac handshake_mac(std::string_view key, char role, const Nonce& mine, const Nonce& theirs,
                  const std::vector<Nid>& their_nids, const std::vector<Nid>& my_nids,
                  uint8_t client_flags);
// Constant-time comparison.
bool mac_equal(const Mac& a, const Mac& b);

// The steps of the exchange above, for every transport that runs it.
// The NIDs a HELLO announces: `local` (the NI at this end) first, then the node's others.
std::vector<Nid> announced_nids(const Nid& local, const std::vector<Nid>& node_nids);
// The NIDs a HELLO -- a version-1 frame whatever is negotiated -- carries of `announced`:
// the connection's own (first) and the others that version 1 can hold (IPv4). A large
// NID reaches a version-2 peer in the version-2 fields, never a version-1 peer.
std::vector<Nid> hello_nids(const std::vector<Nid>& announced);
// The client's HELLO: a fresh nonce, its NIDs and its flags.
Hello client_hello(std::vector<Nid> nids, uint8_t flags = 0);
// The server's HELLO answering `client`: a fresh nonce, its NIDs and its proof of the key.
Hello server_hello(std::string_view key, const Hello& client, std::vector<Nid> nids);
// The client's check of the server's proof.
bool server_proof_ok(std::string_view key, const Hello& client, const Hello& server);
// The client's proof (its AUTH payload), and the server's check of it.
Mac client_proof(std::string_view key, const Hello& client, const Hello& server);
bool client_proof_ok(std::string_view key, const Hello& client, const Hello& server,
                     const Mac& proof);

// The exchange above as one machine without I/O: a transport sends what start() and
// on_frame() return and feeds it every frame it reads until the machine is done. TCP (over
// its sockets, TLS beneath), the fabric (one message at a time) and the in-memory transport
// (the two ends' machines against each other) all run this one.
class HandshakeMachine {
 public:
  enum class State {
    kRunning,        // waiting for the peer's next frame
    kEstablished,    // both proofs verified: peer_nids() are the peer's
    kRefusedByPeer,  // the peer sent REJECT; why(): its reason
    kRefused,        // the peer's proof failed: the REJECT to send is in the step; close after
    kFailed,         // a frame out of place or malformed; why(): what
  };
  struct Out {
    FrameKind kind;
    Buffer payload;
    uint16_t version = 1;  // of the frame's header
    uint64_t xid = 0;      // the header's xid (a client HELLO's offer)
  };
  struct Step {
    std::optional<Out> send;  // to send now (a REJECT too, before closing)
    State state = State::kRunning;
  };

  // `my_nids`: what this end announces (announced_nids); `flags`: the client's kHello* bits;
  // `speaks`: its versions, features, release and instance.
  // `keys`: it proves with the current one and accepts any of them.
  static HandshakeMachine client(ClusterKeys keys, std::vector<Nid> my_nids, uint8_t flags,
                                 WireSpeaks speaks = {});
  static HandshakeMachine server(ClusterKeys keys, std::vector<Nid> my_nids,
                                 WireSpeaks speaks = {});

  // The client's HELLO (a server sends nothing first: an empty step).
  Step start();
  // A frame from the peer: its header (version, kind, xid) and payload.
  Step on_frame(const FrameHeader& h, std::span<const uint8_t> payload);
  // A version-1 frame of `kind` with xid 0.
  Step on_frame(FrameKind kind, std::span<const uint8_t> payload);

  // Called with the NIDs the peer announces once its HELLO is in (and its proof checked,
  // for a client): a non-empty answer refuses the peer with it (the REJECT carries it) --
  // a transport whose peer proved an identity beneath (a TLS certificate) checks that it
  // names those NIDs.
  using PeerCheck = std::function<std::string(const std::vector<Nid>&)>;
  void check_peer(PeerCheck check) { check_ = std::move(check); }

  State state() const { return state_; }
  bool is_client() const { return client_; }
  // The peer's NIDs: from its HELLO on (a server knows them after the first frame).
  const std::vector<Nid>& peer_nids() const { return peer_.nids; }
  // The client's kHello* bits (a server knows them after the first frame).
  uint8_t client_flags() const { return client_ ? mine_.flags : peer_.flags; }
  const std::string& why() const { return why_; }
  // What the connection speaks: final once established.
  const WireSession& session() const { return session_; }

 private:
  HandshakeMachine(ClusterKeys keys, std::vector<Nid> my_nids, bool client, uint8_t flags,
                   WireSpeaks speaks);
  // The keys it accepts, current first; calls `ok` with each until it holds: the one that
  // did, or nullopt (the peer holds none of them).
  std::optional<KeyUsed> accepted_by(const std::function<bool(std::string_view)>& ok) const;
  // check_peer's answer for the peer's NIDs ("" without a check: accepted).
  std::string peer_refusal() const;
  // The lowest version this end accepts: its own, raised by the cluster's release level.
  uint16_t min_version() const;
  // Why a peer of `peer_level` is refused under the cluster's level ("" when it is not).
  std::string level_refusal(uint16_t peer_level) const;
  Step done(State s, std::string why, std::optional<Out> send = std::nullopt);
  Step reject(std::string why);
  Step client_takes_hello(const FrameHeader& h, std::span<const uint8_t> payload);
  Step server_takes_hello(const FrameHeader& h, std::span<const uint8_t> payload);
  Step server_takes_auth(const FrameHeader& h, std::span<const uint8_t> payload);
  // This end's version-2 fields (versions, features, release, instance).
  Buffer my_fields() const;
  // Takes the peer's fields into session_; an error says what was wrong.
  Status take_fields(std::span<const uint8_t> fields);
  Mac v2_mac(std::string_view key, char role, std::span<const uint8_t> second,
             std::span<const uint8_t> third) const;

  ClusterKeys keys_;
  bool client_;
  WireSpeaks speaks_;
  int step_ = 0;  // frames of the peer's taken
  Hello mine_, peer_;
  std::vector<Nid> all_nids_;  // what this end announces; its HELLO may carry fewer (hello_nids)
  uint64_t offer_ = 0;         // the client HELLO's xid
  Buffer client_hello_raw_;    // the client HELLO's payload as sent
  Buffer server_hello_raw_;    // the server's version-2 HELLO payload as sent
  WireSession session_;
  PeerCheck check_;
  State state_ = State::kRunning;
  std::string why_;
};

// Runs `client` against `server` where both ends are in one process (the in-memory
// transport): each frame one end sends goes to the other until neither sends (four frames
// at most). `on_wire` sees each frame on its way, in order, and may change it.
void run_handshake(HandshakeMachine& client, HandshakeMachine& server,
                   const std::function<void(HandshakeMachine::Out&)>& on_wire = {});

}  // namespace pfsnet
