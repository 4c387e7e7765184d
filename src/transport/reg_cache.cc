// RegCache: see reg_cache.h.
#include "transport/reg_cache.h"

#include <algorithm>

namespace pfsnet {

namespace {
constexpr uint64_t kSweepEvery = 64;
}

RegCache::RegCache(Hooks hooks, size_t max_entries)
    : hooks_(std::make_shared<const Hooks>(std::move(hooks))),
      max_entries_(std::max<size_t>(1, max_entries)) {}

RegCache::Ref RegCache::get(const BulkData& b) {
  MutexLock lk(mu_);
  if (++gets_ % kSweepEvery == 0) sweep_locked();
  auto it = entries_.find(b.get());
  if (it != entries_.end()) {
    // The same Buffer object only while the weak reference still points at it.
    if (it->second.buf.lock() == b) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.reg;
    }
    ++stats_.stale;
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }
  void* h = hooks_->reg(b->data(), b->size());
  if (!h) return nullptr;
  ++stats_.registrations;
  auto reg = std::make_shared<Reg>(hooks_, h);
  lru_.push_front(b.get());
  entries_.emplace(b.get(), Entry{b, reg, lru_.begin()});
  while (entries_.size() > max_entries_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
    ++stats_.evicted;
  }
  return reg;
}

RegCache::Ref RegCache::register_once(const uint8_t* p, size_t n) {
  void* h = hooks_->reg(p, n);
  if (!h) return nullptr;
  MutexLock lk(mu_);
  ++stats_.registrations;
  return std::make_shared<Reg>(hooks_, h);
}

void RegCache::sweep_locked() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (!it->second.buf.expired()) {
      ++it;
      continue;
    }
    ++stats_.stale;
    lru_.erase(it->second.lru);
    it = entries_.erase(it);
  }
}

RegCache::Stats RegCache::stats() const {
  MutexLock lk(mu_);
  Stats s = stats_;
  s.entries = entries_.size();
  return s;
}

}  // namespace pfsnet
