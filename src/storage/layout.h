// StripeLayout: where the bytes of a striped file live. GPFS stripes a file over its disks
// round-robin in block-size units (the paper's "stripe unit = block size"): file block b
// goes to target b mod n, as that target's block b div n. A byte range maps to one extent
// per block it touches, in file order, each naming its target, the block there and the
// part of the caller's buffer it covers.
// Thread safety: a plain value.
#pragma once

#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <vector>

namespace pfsnet {

// One target of a block server: the server's NID and the target's index there.
struct TargetRef {
  Nid server;
  uint32_t target = 0;
  bool operator==(const TargetRef&) const = default;
};

struct Extent {
  uint64_t file_block = 0;    // block index in the file
  size_t target = 0;          // index into StripeLayout::targets()
  uint64_t target_block = 0;  // block index within that target's part of the file
  uint32_t offset = 0;        // first byte within the block
  uint32_t length = 0;        // bytes, offset + length <= block size
  uint64_t buf_offset = 0;    // where they are in the caller's buffer
};

class StripeLayout {
 public:
  static constexpr uint32_t kMinBlockSize = 4096;
  static constexpr uint32_t kMaxBlockSize = 16u << 20;
  static constexpr size_t kMaxTargets = 4096;

  // Errors: a block size not a power of two within the bounds, no target, too many, or
  // one target listed twice.
  static Result<StripeLayout> make(uint32_t block_size, std::vector<TargetRef> targets);

  uint32_t block_size() const { return block_size_; }
  const std::vector<TargetRef>& targets() const { return targets_; }
  size_t target_of(uint64_t file_block) const { return file_block % targets_.size(); }
  uint64_t target_block(uint64_t file_block) const { return file_block / targets_.size(); }
  // The extents of [offset, offset + length), in file order; none for length 0.
  std::vector<Extent> map(uint64_t offset, uint64_t length) const;

 private:
  StripeLayout(uint32_t bs, std::vector<TargetRef> t) : block_size_(bs), targets_(std::move(t)) {}
  uint32_t block_size_;
  std::vector<TargetRef> targets_;
};

}  // namespace pfsnet
