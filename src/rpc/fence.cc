#include "rpc/fence.h"

#include <algorithm>

namespace pfsnet {

void Fence::evict(const std::vector<Nid>& nids, const std::string& why) {
  {
    MutexLock lk(mu_);
    for (const Nid& n : nids) evicted_[n] = why;
    count_.store(evicted_.size(), std::memory_order_relaxed);
  }
  tell(FenceEvent{FenceEvent::kEvicted, nids, why});
}

void Fence::readmit(const std::vector<Nid>& nids) {
  size_t was = 0;
  {
    MutexLock lk(mu_);
    for (const Nid& n : nids) was += evicted_.erase(n);
    count_.store(evicted_.size(), std::memory_order_relaxed);
  }
  if (was > 0) tell(FenceEvent{FenceEvent::kReadmitted, nids, ""});
}

void Fence::fenced(const std::vector<Nid>& nids) {
  tell(FenceEvent{FenceEvent::kFenced, nids, ""});
}

void Fence::self_evicted(const std::string& why) {
  tell(FenceEvent{FenceEvent::kSelfEvicted, {}, why});
}

std::optional<std::string> Fence::evicted(const Nid& peer) const {
  if (count_.load(std::memory_order_relaxed) == 0) return std::nullopt;
  MutexLock lk(mu_);
  auto it = evicted_.find(peer);
  if (it == evicted_.end()) return std::nullopt;
  return it->second;
}

int Fence::subscribe(Listener l) {
  MutexLock lk(mu_);
  listeners_.emplace_back(next_id_, std::move(l));
  return next_id_++;
}

void Fence::unsubscribe(int id) {
  MutexLock lk(mu_);
  std::erase_if(listeners_, [id](const auto& p) { return p.first == id; });
}

void Fence::tell(const FenceEvent& e) {
  std::vector<Listener> ls;
  {
    MutexLock lk(mu_);
    for (const auto& [id, l] : listeners_) ls.push_back(l);
  }
  for (const Listener& l : ls) l(e);
}

}  // namespace pfsnet
