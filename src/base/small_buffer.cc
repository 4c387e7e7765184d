// detail::take_small_block / give_small_block (pfsnet/buffer.h): the blocks of small
// Buffers, from the calling thread's ThreadFreeList.
#include <pfsnet/buffer.h>

#include "base/free_list.h"
#include "base/sanitizers.h"

namespace pfsnet::detail {
namespace {
struct alignas(16) SmallBlock {
  uint8_t bytes[kSmallBuffer];
};
}  // namespace

uint8_t* take_small_block() {
  if constexpr (PFSNET_UNDER_ASAN || PFSNET_UNDER_TSAN) return nullptr;
  return static_cast<uint8_t*>(ThreadFreeList<SmallBlock>::allocate(sizeof(SmallBlock)));
}

void give_small_block(uint8_t* p) noexcept {
  ThreadFreeList<SmallBlock>::release(p, sizeof(SmallBlock));
}

}  // namespace pfsnet::detail
