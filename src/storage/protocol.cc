#include "storage/protocol.h"

#include "storage/block_store.h"
#include "wire/byte_codec.h"

namespace pfsnet {

Buffer encode_block_info(const BlockInfo& i) {
  ByteWriter w;
  w.u32(i.block_size);
  w.u32(i.targets);
  w.u64(i.capacity);
  return w.take();
}

Result<BlockInfo> decode_block_info(std::span<const uint8_t> b) {
  ByteReader r(b);
  BlockInfo i;
  i.block_size = r.u32();
  i.targets = r.u32();
  i.capacity = r.u64();
  return finish_decode(r, i, "BLOCK_INFO");
}

Buffer encode_block_io(const BlockIo& io) {
  ByteWriter w;
  w.str(io.file);
  w.u32(io.target);
  w.u64(io.block);
  w.u32(io.offset);
  w.u32(io.length);
  return w.take();
}

Result<BlockIo> decode_block_io(std::span<const uint8_t> b, uint32_t block_size) {
  ByteReader r(b);
  BlockIo io;
  io.file = r.str();
  io.target = r.u32();
  io.block = r.u64();
  io.offset = r.u32();
  io.length = r.u32();
  auto d = finish_decode(r, io, "block I/O");
  if (!d.ok()) return d;
  if (Status s = check_file_name(io.file); !s.ok()) return Status(Code::kProtocol, s.message());
  if (io.length == 0 || uint64_t(io.offset) + io.length > block_size)
    return Status(Code::kProtocol, "block I/O of " + std::to_string(io.length) + " bytes at " +
                                       std::to_string(io.offset) + " does not fit a block of " +
                                       std::to_string(block_size));
  if (io.block > (uint64_t{1} << 40))
    return Status(Code::kProtocol, "block " + std::to_string(io.block) + " is out of range");
  return io;
}

}  // namespace pfsnet
