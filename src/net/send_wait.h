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

}  // namespace pfsnet
