// Buffer: an owned, uninitialised run of bytes (no zero fill, so a 2 MiB receive buffer
// costs no memset; Buffer::page_aligned starts on a 4 KiB boundary, so a received block
// can go to O_DIRECT as it is), and BulkData, a buffer shared between a caller and the transport
// that is writing it, so bulk is sent without a copy. A Buffer's memory comes from the
// heap, or from a BufferPool (a transport's registered receive memory) that takes it back
// when the Buffer goes.
// Thread safety: a Buffer is owned by one thread at a time; a BulkData is immutable; a
// BufferPool takes memory back on any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>

namespace pfsnet {

// Where pooled memory goes back to. The Buffers of a pool keep it alive.
class BufferPool {
 public:
  virtual ~BufferPool() = default;
  // `p` is the start of a chunk the pool handed out. Any thread.
  virtual void give_back(uint8_t* p) = 0;
};

inline constexpr std::align_val_t kBufferPage{4096};

namespace detail {
// Buffers of up to kSmallBuffer bytes (a frame's small payload, a data checksum, a 64 B
// bulk) take a block of that size from the calling thread's free list, and give it back
// to the freeing thread's (every frame made and freed two of them through malloc).
// take_small_block() is null when the library is built under a sanitizer, which must see
// every allocation at its size.
inline constexpr size_t kSmallBuffer = 256;
uint8_t* take_small_block();
void give_small_block(uint8_t* p) noexcept;
// Page-aligned buffers of kLargeBuffer bytes and more (a received block, a pagepool
// block) come from a process-wide cache of freed ones of the same size (bounded), else
// from the heap: a block server that frees a block as it receives the next reuses its
// memory, where the heap handed out fresh pages (why, despite base/heap.h's mallopt, was
// not traced) that the kernel cleared on first touch -- as much CPU as the copy.
// `n` is a multiple of 4096. Under a sanitizer every block comes from the heap and goes
// back to it. The cache keeps at most large_block_cache_limit() bytes (256 MiB unless set:
// a process should set it to what its blocks in use reach, a client its pagepool and
// more); large_block_cache_bytes() is what it keeps now.
inline constexpr size_t kLargeBuffer = 64 << 10;
uint8_t* take_large_block(size_t n);
void give_large_block(uint8_t* p, size_t n) noexcept;
void set_large_block_cache_limit(size_t bytes);
size_t large_block_cache_limit();
size_t large_block_cache_bytes();
}  // namespace detail

// Frees a Buffer's memory: back to its pool for pooled, else to the heap as allocated.
struct BufferFree {
  std::shared_ptr<BufferPool> pool;
  bool page_aligned = false;
  bool small = false;  // a detail::take_small_block() block
  size_t large = 0;    // a detail::take_large_block(large) block
  void operator()(uint8_t* p) const {
    if (pool)
      pool->give_back(p);
    else if (small)
      detail::give_small_block(p);
    else if (large)
      detail::give_large_block(p, large);
    else if (page_aligned)
      ::operator delete[](p, kBufferPage);
    else
      delete[] p;
  }
};

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) : data_(allocate(n)), size_(n) {}
  // The same starting on a 4 KiB boundary (a received block, for O_DIRECT).
  static Buffer page_aligned(size_t n) {
    Buffer b;
    if (n >= detail::kLargeBuffer) {
      const size_t whole = (n + 4095) & ~size_t(4095);
      b.data_ = std::unique_ptr<uint8_t[], BufferFree>(detail::take_large_block(whole),
                                                       BufferFree{nullptr, false, false, whole});
    } else if (n) {
      b.data_ = std::unique_ptr<uint8_t[], BufferFree>(
          static_cast<uint8_t*>(::operator new[](n, kBufferPage)), BufferFree{nullptr, true});
    }
    b.size_ = n;
    return b;
  }
  // `n` bytes at `chunk`, which goes back to `pool` when this Buffer is destroyed.
  static Buffer pooled(uint8_t* chunk, size_t n, std::shared_ptr<BufferPool> pool) {
    Buffer b;
    b.data_ = std::unique_ptr<uint8_t[], BufferFree>(chunk, BufferFree{std::move(pool)});
    b.size_ = n;
    return b;
  }
  static Buffer copy_of(std::span<const uint8_t> bytes) {
    Buffer b(bytes.size());
    if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
    return b;
  }
  static Buffer copy_of(std::string_view s) {
    return copy_of(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  }

  // Its memory belongs to a BufferPool (which wants it back soon), not to the heap.
  bool pooled() const { return data_.get_deleter().pool != nullptr; }

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<uint8_t> span() { return {data_.get(), size_}; }
  std::span<const uint8_t> span() const { return {data_.get(), size_}; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_.get()), size_}; }
  // Keeps the first `n` bytes (n <= size()); the memory stays as it is.
  void shrink_to(size_t n) { size_ = std::min(n, size_); }

 private:
  static std::unique_ptr<uint8_t[], BufferFree> allocate(size_t n) {
    if (n == 0) return nullptr;
    if (n <= detail::kSmallBuffer)
      if (uint8_t* p = detail::take_small_block())
        return std::unique_ptr<uint8_t[], BufferFree>(p, BufferFree{nullptr, false, true});
    return std::unique_ptr<uint8_t[], BufferFree>(
        std::make_unique_for_overwrite<uint8_t[]>(n).release());
  }

  std::unique_ptr<uint8_t[], BufferFree> data_;
  size_t size_ = 0;
};

using BulkData = std::shared_ptr<const Buffer>;

inline BulkData make_bulk(Buffer b) { return std::make_shared<const Buffer>(std::move(b)); }

}  // namespace pfsnet
