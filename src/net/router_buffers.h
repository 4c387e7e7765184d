// A router's buffers and its peers' router credits (LNet's rtrbufs and lpni_rtrcredits): a
// pure core, no locks, no clock. A frame to forward first takes one of its sending peer
// NI's router credits (lnet.peer_buffer_credits), then a buffer of its size class
// (lnet.tiny/small/large_router_buffers); where either is out it waits, in order -- in its
// peer's queue, then in its pool's -- keeping the credit of the hop it came on, so its
// sender stops. Letting a buffer go hands it to the pool's next waiter; letting a credit
// go moves the peer's next waiter on to its pool. So one peer never holds more than its
// credits' worth of a router's buffers, and what the router holds to forward is bounded by
// its pools.
// Thread safety: a plain value (Net's router lock guards it).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

namespace pfsnet {

enum class RouterPool : uint8_t { kTiny = 0, kSmall = 1, kLarge = 2 };
inline constexpr size_t kRouterPools = 3;
// A frame's class by the bytes of payload and bulk it carries.
inline constexpr uint64_t kTinyRouterBytes = 512;
inline constexpr uint64_t kSmallRouterBytes = 64 * 1024;
inline RouterPool router_pool_for(uint64_t body_bytes) {
  return body_bytes <= kTinyRouterBytes    ? RouterPool::kTiny
         : body_bytes <= kSmallRouterBytes ? RouterPool::kSmall
                                           : RouterPool::kLarge;
}
inline std::string_view router_pool_name(RouterPool p) {
  return p == RouterPool::kTiny ? "tiny" : p == RouterPool::kSmall ? "small" : "large";
}

// One pool's figures (routerstat's buffer lines).
struct RouterPoolStats {
  int64_t buffers = 0;   // its size
  int64_t in_use = 0;    // held by frames being forwarded
  int64_t min_free = 0;  // the fewest free it has had (LNet's rbp_mincredits)
  int64_t queued = 0;    // frames waiting for one now
  uint64_t waits = 0;    // frames that had to wait for one, since start
};

template <class Key, class T>
class RouterBuffers {
 public:
  RouterBuffers(std::array<int64_t, kRouterPools> sizes, int64_t peer_credits)
      : peer_credits_(peer_credits) {
    for (size_t i = 0; i < kRouterPools; ++i) {
      pools_[i].stats.buffers = sizes[i];
      pools_[i].stats.min_free = sizes[i];
    }
  }

  // A frame `item` of class `pool` from peer `k` asks to be forwarded: appended to `go`
  // when it may go now (it holds a credit and a buffer until release()), else it waits.
  void admit(const Key& k, RouterPool pool, T item, std::vector<T>* go) {
    Peer& p = peers_[k];
    if (p.used >= peer_credits_) {
      p.queue.emplace_back(pool, std::move(item));
      ++peer_waits_;
      ++peer_queued_;
      return;
    }
    ++p.used;
    to_pool(k, pool, std::move(item), go);
  }

  // A frame of class `pool` from `k` that held a credit and a buffer is done with them
  // (written on, or failed): what may go now is appended to `go`.
  void release(const Key& k, RouterPool pool, std::vector<T>* go) {
    Pool& pl = pools_[size_t(pool)];
    if (!pl.queue.empty()) {  // the buffer goes to the pool's next waiter
      auto [wk, item] = std::move(pl.queue.front());
      pl.queue.pop_front();
      --pl.stats.queued;
      go->push_back(std::move(item));
      (void)wk;
    } else {
      --pl.stats.in_use;
    }
    auto it = peers_.find(k);
    if (it == peers_.end()) return;  // not ours (a bug): nothing to give back
    Peer& p = it->second;
    if (!p.queue.empty()) {  // the credit goes to the peer's next waiter
      auto [wpool, item] = std::move(p.queue.front());
      p.queue.pop_front();
      --peer_queued_;
      to_pool(k, wpool, std::move(item), go);
    } else if (--p.used == 0) {
      peers_.erase(it);
    }
  }

  // Every frame waiting, taken out (shutdown); the held ones stay counted.
  std::vector<T> take_waiting() {
    std::vector<T> v;
    for (Pool& pl : pools_) {
      for (auto& [k, item] : pl.queue) v.push_back(std::move(item));
      pl.queue.clear();
      pl.stats.queued = 0;
    }
    for (auto& [k, p] : peers_) {
      for (auto& [pool, item] : p.queue) v.push_back(std::move(item));
      p.queue.clear();
    }
    peer_queued_ = 0;
    return v;
  }

  RouterPoolStats pool(RouterPool p) const { return pools_[size_t(p)].stats; }
  int64_t peer_credits() const { return peer_credits_; }
  // Frames waiting for a credit of their peer, now and since start.
  int64_t peer_queued() const { return peer_queued_; }
  uint64_t peer_waits() const { return peer_waits_; }
  // Credits `k` holds now (0: none).
  int64_t peer_used(const Key& k) const {
    auto it = peers_.find(k);
    return it == peers_.end() ? 0 : it->second.used;
  }

 private:
  struct Peer {
    int64_t used = 0;
    std::deque<std::pair<RouterPool, T>> queue;
  };
  struct Pool {
    RouterPoolStats stats;
    std::deque<std::pair<Key, T>> queue;
  };

  void to_pool(const Key& k, RouterPool pool, T item, std::vector<T>* go) {
    Pool& pl = pools_[size_t(pool)];
    if (pl.stats.in_use < pl.stats.buffers) {
      ++pl.stats.in_use;
      pl.stats.min_free = std::min(pl.stats.min_free, pl.stats.buffers - pl.stats.in_use);
      go->push_back(std::move(item));
      return;
    }
    pl.queue.emplace_back(k, std::move(item));
    ++pl.stats.queued;
    ++pl.stats.waits;
    pl.stats.min_free = std::min<int64_t>(pl.stats.min_free, -pl.stats.queued);
  }

  int64_t peer_credits_;
  std::map<Key, Peer> peers_;
  std::array<Pool, kRouterPools> pools_;
  int64_t peer_queued_ = 0;
  uint64_t peer_waits_ = 0;
};

}  // namespace pfsnet
