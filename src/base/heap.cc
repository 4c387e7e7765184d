#include "base/heap.h"

#include <malloc.h>

namespace pfsnet {

bool keep_freed_buffers_in_heap() {
#if defined(__GLIBC__)
  // 32 MiB is glibc's largest mmap threshold on 64-bit systems (half a per-thread heap).
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
#else
  return false;
#endif
}

}  // namespace pfsnet
