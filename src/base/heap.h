// Heap settings for a process that moves blocks of a MiB or so through freshly allocated
// buffers (received bulk, pagepool copies, replies) and frees them as fast.
// Thread safety: call once at start, before other threads.
#pragma once

namespace pfsnet {

// glibc by default maps each large buffer on its own (its dynamic threshold climbs only
// as far as the largest freed, and per-thread arenas hand their tops back), so a buffer's
// first touch faults in fresh zeroed pages: on a block server at 2 GiB/s the kernel's
// page clearing was a third of all CPU. This keeps buffers up to 32 MiB in the heap and
// up to 256 MiB of freed heap per arena for reuse; a daemon's heap is bounded by its
// pagepool, block buffers and credits anyway. Returns false where it does not apply.
bool keep_freed_buffers_in_heap();

}  // namespace pfsnet
