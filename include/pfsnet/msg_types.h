// The message types an application may call on any pfsnet node (every node serves PING and
// the bulk write/read pair), and the first id of an application's own types
// (pfsnet::Node::handle). pfsnet's internal services' ids are not part of the API.
// Thread safety: constants.
#pragma once

#include <cstdint>

namespace pfsnet {

// A round trip: an empty payload echoes the request's bulk back; a 4-byte little-endian N
// asks for N bytes of the ping pattern in the reply (a read).
inline constexpr uint32_t kMsgPing = 1;
// lnet_selftest's bulk write (pattern data the server checks) and read (N bytes of it).
inline constexpr uint32_t kMsgBrwWrite = 2;
inline constexpr uint32_t kMsgBrwRead = 3;

inline constexpr uint32_t kMsgFirstUser = 1024;

}  // namespace pfsnet
