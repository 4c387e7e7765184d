#include "storage/layout.h"

#include <algorithm>

namespace pfsnet {

Result<StripeLayout> StripeLayout::make(uint32_t block_size, std::vector<TargetRef> targets) {
  if (block_size < kMinBlockSize || block_size > kMaxBlockSize ||
      (block_size & (block_size - 1)) != 0)
    return Status(Code::kInvalidArgument,
                  "block size " + std::to_string(block_size) + " is not a power of two in " +
                      std::to_string(kMinBlockSize) + ".." + std::to_string(kMaxBlockSize));
  if (targets.empty() || targets.size() > kMaxTargets)
    return Status(Code::kInvalidArgument, "a striped file needs 1.." + std::to_string(kMaxTargets) +
                                              " targets, not " + std::to_string(targets.size()));
  for (size_t i = 0; i < targets.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (targets[i] == targets[j])
        return Status(Code::kInvalidArgument, "target " + std::to_string(targets[i].target) +
                                                  " of " + targets[i].server.to_string() +
                                                  " is listed twice");
  return StripeLayout(block_size, std::move(targets));
}

std::vector<Extent> StripeLayout::map(uint64_t offset, uint64_t length) const {
  std::vector<Extent> out;
  uint64_t pos = offset, end = offset + length;
  while (pos < end) {
    Extent e;
    e.file_block = pos / block_size_;
    e.offset = static_cast<uint32_t>(pos % block_size_);
    e.length = static_cast<uint32_t>(std::min<uint64_t>(block_size_ - e.offset, end - pos));
    e.target = target_of(e.file_block);
    e.target_block = target_block(e.file_block);
    e.buf_offset = pos - offset;
    out.push_back(e);
    pos += e.length;
  }
  return out;
}

}  // namespace pfsnet
