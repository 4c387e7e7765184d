// BlockStore: where a block server keeps the blocks of one target. Each striped file has
// its own part on every target, addressed by block index: a block is written and read at
// any offset and length within it; bytes never written read as zeros.
//
//   "mem"        in memory (tests, benchmarks; the data goes with the process), at most
//                `capacity` bytes of blocks; a whole-block write keeps the request's own
//                memory and a whole-block read sends the block's, so neither copies;
//   a directory  one sparse file per striped file in it (DIR/NAME), block b at b x block
//                size; opened with O_DIRECT too where the file system allows it, used for
//                transfers aligned to 4 KiB in memory, offset and length (whole blocks from
//                the block buffers are), the page cache otherwise. A write is acknowledged
//                once it is in the file (page cache or device): a killed server keeps it.
//
// File names: 1..64 of [A-Za-z0-9._-], not "." or ".." (they name files on the server).
// Threads: read() and write() from any thread, concurrently.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace pfsnet {

// OK, or kInvalidArgument saying what is wrong with `name` as a striped file's name.
Status check_file_name(const std::string& name);

// A whole block shared without a copy, with the CRC-32C kept with it where it is known (the
// writer's, from its write's seal), to send as the reply's own (RpcResponse::bulk_crc).
struct SharedBlock {
  BulkData data;
  std::optional<uint32_t> crc;
};

class BlockStore {
 public:
  virtual ~BlockStore() = default;
  virtual Status write(const std::string& file, uint64_t block, uint32_t offset,
                       std::span<const uint8_t> data) = 0;
  virtual Status read(const std::string& file, uint64_t block, uint32_t offset,
                      std::span<uint8_t> out) = 0;
  // A whole block written from memory it may keep (`whole.size()` is the block size), with
  // its CRC-32C when known: "mem" keeps it as the block, without a copy, and the CRC with
  // it (a partial write later drops it). The others write it.
  virtual Status write_block(const std::string& file, uint64_t block, Buffer whole,
                             std::optional<uint32_t> /*crc*/) {
    return write(file, block, 0, whole.span());
  }
  // A whole block shared without a copy, to send while a later write replaces it, and its
  // CRC where kept: "mem" only; data null where reads go through read().
  virtual SharedBlock read_block(const std::string& /*file*/, uint64_t /*block*/) { return {}; }
  // Whether a transfer from memory aligned to 4 KiB goes faster (O_DIRECT).
  virtual bool wants_aligned() const { return true; }
  // Whether a whole-block write_block or read_block may block the thread (on a disk)
  // rather than only move a pointer.
  virtual bool blocks_thread() const { return true; }
  // "mem" or the directory, and whether O_DIRECT is in use.
  virtual std::string describe() const = 0;
};

// Opens target `spec` ("mem" or a directory, created if missing) for blocks of
// `block_size` bytes; `capacity` bounds the bytes a file's blocks may reach (per file on a
// directory: block x size + length <= capacity; in all for "mem").
Result<std::unique_ptr<BlockStore>> open_block_store(const std::string& spec, uint32_t block_size,
                                                     uint64_t capacity);

}  // namespace pfsnet
