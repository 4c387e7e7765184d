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
#include <vector>

#include "wire/frame.h"

namespace pfsnet {

using Nonce = std::array<uint8_t, 32>;
using Mac = std::array<uint8_t, 32>;
inline constexpr size_t kMaxHelloNids = 64;
// Hello::flags: the connection is one of its path's bulk connections (it carries large
// messages only; the path's first connection carries the rest).
inline constexpr uint8_t kHelloBulk = 1;

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
  };
  struct Step {
    std::optional<Out> send;  // to send now (a REJECT too, before closing)
    State state = State::kRunning;
  };

  // `my_nids`: what this end announces (announced_nids); `flags`: the client's kHello* bits.
  static HandshakeMachine client(std::string key, std::vector<Nid> my_nids, uint8_t flags);
  static HandshakeMachine server(std::string key, std::vector<Nid> my_nids);

  // The client's HELLO (a server sends nothing first: an empty step).
  Step start();
  // A frame from the peer.
  Step on_frame(FrameKind kind, std::span<const uint8_t> payload);

  State state() const { return state_; }
  bool is_client() const { return client_; }
  // The peer's NIDs: from its HELLO on (a server knows them after the first frame).
  const std::vector<Nid>& peer_nids() const { return peer_.nids; }
  // The client's kHello* bits (a server knows them after the first frame).
  uint8_t client_flags() const { return client_ ? mine_.flags : peer_.flags; }
  const std::string& why() const { return why_; }

 private:
  HandshakeMachine(std::string key, std::vector<Nid> my_nids, bool client, uint8_t flags);
  Step done(State s, std::string why, std::optional<Out> send = std::nullopt);

  std::string key_;
  bool client_;
  int step_ = 0;  // frames of the peer's taken
  Hello mine_, peer_;
  State state_ = State::kRunning;
  std::string why_;
};

// Runs `client` against `server` where both ends are in one process (the in-memory
// transport): each frame one end sends goes to the other until neither sends (four frames
// at most). `on_wire` sees each frame on its way, in order, and may change it.
void run_handshake(HandshakeMachine& client, HandshakeMachine& server,
                   const std::function<void(HandshakeMachine::Out&)>& on_wire = {});

}  // namespace pfsnet
