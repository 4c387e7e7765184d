// RegPool: see reg_pool.h.
#include "transport/reg_pool.h"

#include <bit>
#include <cstdlib>
#include <cstring>

namespace pfsnet {

namespace {
constexpr size_t kPage = 4096;
}

RegPool::~RegPool() {
  // Only idle chunks can be left: each sink's Buffer holds the pool.
  MutexLock lk(mu_);
  for (auto& [p, c] : chunks_) {
    if (c.handle && hooks_.unreg) hooks_.unreg(c.handle);
    std::free(p);
  }
}

std::optional<RegPool::Sink> RegPool::take(size_t n) {
  if (n == 0 || n > max_chunk_) return std::nullopt;
  size_t cls = std::max(kMinChunk, std::bit_ceil(n));
  uint8_t* p = nullptr;
  void* handle = nullptr;
  {
    MutexLock lk(mu_);
    if (closed_) return std::nullopt;
    auto it = idle_.find(cls);
    if (it != idle_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      stats_.idle_bytes -= cls;
      handle = chunks_[p].handle;
    }
  }
  if (!p) {
    // A new chunk: page-aligned (registration pins whole pages), touched now so the
    // faults are taken once, then registered.
    p = static_cast<uint8_t*>(std::aligned_alloc(kPage, cls));
    if (!p) return std::nullopt;
    std::memset(p, 0, cls);
    if (hooks_.reg) {
      handle = hooks_.reg(p, cls);
      if (!handle) {
        std::free(p);
        return std::nullopt;
      }
    }
    MutexLock lk(mu_);
    chunks_[p] = Chunk{cls, handle};
    ++stats_.registrations;
  }
  MutexLock lk(mu_);
  ++stats_.taken;
  ++stats_.out;
  return Sink{Buffer::pooled(p, n, shared_from_this()), handle};
}

void RegPool::give_back(uint8_t* p) {
  MutexLock lk(mu_);
  auto it = chunks_.find(p);
  if (it == chunks_.end()) return;  // not ours: cannot happen (only Buffers of this pool)
  --stats_.out;
  if (!closed_ && !it->second.retired && stats_.idle_bytes + it->second.size <= idle_cap_) {
    idle_[it->second.size].push_back(p);
    stats_.idle_bytes += it->second.size;
    return;
  }
  Chunk c = it->second;
  chunks_.erase(it);
  release_locked(p, c);
}

void RegPool::retire(const uint8_t* p) {
  MutexLock lk(mu_);
  auto it = chunks_.find(const_cast<uint8_t*>(p));
  if (it != chunks_.end()) it->second.retired = true;
}

void RegPool::release_locked(uint8_t* p, const Chunk& c) {
  if (c.handle && hooks_.unreg) hooks_.unreg(c.handle);
  std::free(p);
  ++stats_.freed;
}

void RegPool::close() {
  MutexLock lk(mu_);
  closed_ = true;
  for (auto& [cls, list] : idle_)
    for (uint8_t* p : list) {
      auto it = chunks_.find(p);
      Chunk c = it->second;
      chunks_.erase(it);
      release_locked(p, c);
    }
  idle_.clear();
  stats_.idle_bytes = 0;
}

RegPool::Stats RegPool::stats() const {
  MutexLock lk(mu_);
  return stats_;
}

}  // namespace pfsnet
