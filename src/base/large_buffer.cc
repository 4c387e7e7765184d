// detail::take_large_block / give_large_block (pfsnet/buffer.h): page-aligned blocks of a
// size, from a process-wide cache of freed ones.
#include <pfsnet/buffer.h>

#include <new>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "base/sanitizers.h"

namespace pfsnet::detail {
namespace {

class LargeBlockCache {
 public:
  uint8_t* take(size_t n) EXCLUDES(mu_) {
    {
      MutexLock lk(mu_);
      auto it = free_.find(n);
      if (it != free_.end() && !it->second.empty()) {
        uint8_t* p = it->second.back();  // the last freed: likeliest still in the CPU's cache
        it->second.pop_back();
        bytes_ -= n;
        return p;
      }
    }
    return static_cast<uint8_t*>(::operator new[](n, kBufferPage));
  }
  void give(uint8_t* p, size_t n) noexcept EXCLUDES(mu_) {
    {
      MutexLock lk(mu_);
      if (bytes_ + n <= limit_) {
        try {
          free_[n].push_back(p);
          bytes_ += n;
          return;
        } catch (...) {  // no memory for the list: the block goes to the heap instead
        }
      }
    }
    ::operator delete[](p, kBufferPage);
  }
  void set_limit(size_t bytes) EXCLUDES(mu_) {
    std::vector<std::pair<uint8_t*, size_t>> out;  // freed after the lock is let go
    {
      MutexLock lk(mu_);
      limit_ = bytes;
      for (auto& [n, blocks] : free_)
        while (bytes_ > limit_ && !blocks.empty()) {
          out.emplace_back(blocks.back(), n);
          blocks.pop_back();
          bytes_ -= n;
        }
    }
    for (auto& [p, n] : out) ::operator delete[](p, kBufferPage);
  }
  size_t limit() const EXCLUDES(mu_) {
    MutexLock lk(mu_);
    return limit_;
  }
  size_t bytes() const EXCLUDES(mu_) {
    MutexLock lk(mu_);
    return bytes_;
  }

 private:
  mutable Mutex mu_;
  std::unordered_map<size_t, std::vector<uint8_t*>> free_ GUARDED_BY(mu_);
  size_t bytes_ GUARDED_BY(mu_) = 0;
  size_t limit_ GUARDED_BY(mu_) = 256 << 20;
};

// Never destroyed: a Buffer freed during static destruction still finds it.
LargeBlockCache& cache() {
  static LargeBlockCache* c = new LargeBlockCache;
  return *c;
}

constexpr bool kHeapOnly = PFSNET_UNDER_ASAN || PFSNET_UNDER_TSAN;

}  // namespace

uint8_t* take_large_block(size_t n) {
  if constexpr (kHeapOnly) return static_cast<uint8_t*>(::operator new[](n, kBufferPage));
  return cache().take(n);
}

void give_large_block(uint8_t* p, size_t n) noexcept {
  if constexpr (kHeapOnly) {
    ::operator delete[](p, kBufferPage);
    return;
  }
  cache().give(p, n);
}

void set_large_block_cache_limit(size_t bytes) { cache().set_limit(bytes); }
size_t large_block_cache_limit() { return cache().limit(); }
size_t large_block_cache_bytes() { return cache().bytes(); }

}  // namespace pfsnet::detail
