// What a send waits for in the net before its frame is written (Net::send_wait): the
// op tracker's verdict of a client RPC in its `network` phase.
// Thread safety: a plain value.
#pragma once

#include <cstdint>
#include <string>

namespace pfsnet {

struct SendWait {
  // In the order of blame: a connection (the network, or a server gone) before credits (the
  // client's own window: lnet.credits, lnet.peer_credits) before the write under way.
  enum class Kind : uint8_t { kNone, kWrite, kCredits, kConnect };
  Kind kind = Kind::kNone;  // the largest over the destination's paths
  std::string text;         // each waiting path's reason, "; "-joined
};

// What TCP says of the requests written to a peer (Net::reply_wait): the op tracker's
// verdict of a client RPC in its `reply` phase -- whether the peer's host has its request.
struct ReplyWait {
  enum class Kind : uint8_t {
    kNone,       // no TCP figures (another transport, no connection)
    kUnacked,    // data in flight without loss: on its way, or the server's
    kDelivered,  // every byte written acknowledged by the peer's kernel: the server has it
    kStalled,    // the peer's window is closed: its process does not read
    kQueue,      // data in flight behind a standing queue (srtt well above its lowest): the
                 // path is congested or shaped
    kLosing,     // segments lost or being retransmitted: the network
  };
  Kind kind = Kind::kNone;  // the worst over the destination's connections
  std::string text;         // "TCP on L -> P: ...", "; "-joined
};

// One path's kind from its connections' figures summed (lost, retransmitting, unacked
// segments, unsent bytes), whether a window with data waiting is closed, and the busiest
// connection's smoothed and lowest RTT (us). Pure.
ReplyWait::Kind reply_wait_kind(uint64_t lost, uint64_t retransmitting, uint64_t unacked,
                                uint64_t notsent, bool closed_window, uint32_t srtt_us,
                                uint32_t min_rtt_us);

}  // namespace pfsnet
