// The block service's messages (ids in <pfsnet/msg_types.h>), little-endian fields with
// limits (wire/byte_codec.h). A decoder takes a peer's bytes: every field is checked.
//
//   BLOCK_INFO   request: nothing.  reply: u32 block size, u32 targets, u64 capacity
//   BLOCK_WRITE  request: str file, u32 target, u64 block, u32 offset, u32 length; the
//                data (length bytes) as bulk.  reply: nothing
//   BLOCK_READ   request: as BLOCK_WRITE, no bulk.  reply: the data as bulk
//
// Thread safety: plain values.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <span>
#include <string>

#include "rpc/msg_types.h"

namespace pfsnet {

struct BlockInfo {
  uint32_t block_size = 0;
  uint32_t targets = 0;
  uint64_t capacity = 0;  // bytes per file per target
  bool operator==(const BlockInfo&) const = default;
};

struct BlockIo {
  std::string file;
  uint32_t target = 0;
  uint64_t block = 0;
  uint32_t offset = 0;
  uint32_t length = 0;
  bool operator==(const BlockIo&) const = default;
};

Buffer encode_block_info(const BlockInfo& i);
Result<BlockInfo> decode_block_info(std::span<const uint8_t> b);
Buffer encode_block_io(const BlockIo& io);
// Errors (kProtocol): malformed, a bad file name, length 0, or offset + length past
// `block_size`.
Result<BlockIo> decode_block_io(std::span<const uint8_t> b, uint32_t block_size);

}  // namespace pfsnet
