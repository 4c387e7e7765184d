// RegPool: reusable, registered memory for RMA sinks -- the buffers the fabric transport
// reads a peer's payload and bulk into (o2iblnd keeps its receive pages mapped the same
// way). A sink from here is registered once and its pages are touched once, so steady
// traffic neither registers memory nor takes page faults. (A fresh 1 MiB sink per frame
// cost 256 page faults, which on a 2-core VM held fabric bulk writes near 300 MiB/s.)
// Memory the application hands in (a frame's bulk to send) is registered per frame; the
// provider caches those registrations (verbs: libfabric's MR cache, FI_MR_CACHE_*).
//
// Capacity rule: chunks come in size classes, powers of two from kMinChunk to
// `max_chunk`; a larger sink is not pooled (take() says so and the caller allocates).
// A chunk given back stays idle in its class while the idle bytes stay within
// `idle_cap`; beyond that it is unregistered and freed. So the pool holds at most
// `idle_cap` idle bytes plus the sinks in use.
//
// Registration is injected (Hooks), so the pool is tested without a fabric. The hooks
// (and what they capture: the domain) live as long as the pool, and the pool as long as
// any Buffer of it: a sink may outlive the transport that took it.
// Threads: every method on any thread (one mutex); give_back() runs wherever the last
// owner drops a sink's Buffer.
#pragma once

#include <pfsnet/buffer.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"

namespace pfsnet {

class RegPool final : public BufferPool, public std::enable_shared_from_this<RegPool> {
 public:
  static constexpr size_t kMinChunk = 64 << 10;

  struct Hooks {
    // Registers [p, p + n) for the fabric; returns its handle (a fid_mr*), or null on
    // failure. Unset: the provider needs no local registration.
    std::function<void*(uint8_t* p, size_t n)> reg;
    std::function<void(void* handle)> unreg;
  };
  struct Sink {
    Buffer buf;              // the size asked for; its memory goes back to the pool
    void* handle = nullptr;  // the chunk's registration (null: none needed)
  };
  struct Stats {
    uint64_t taken = 0;          // sinks handed out
    uint64_t registrations = 0;  // chunks allocated and registered
    uint64_t freed = 0;     // chunks unregistered and freed (over the idle cap, closed, retired)
    size_t idle_bytes = 0;  // in the free lists
    size_t out = 0;         // sinks not yet given back
  };

  static std::shared_ptr<RegPool> make(Hooks hooks, size_t max_chunk, size_t idle_cap) {
    return std::shared_ptr<RegPool>(new RegPool(std::move(hooks), max_chunk, idle_cap));
  }
  ~RegPool() override;

  // A sink of `n` bytes (n > 0). nullopt: larger than max_chunk, closed, or registering
  // failed -- the caller allocates and registers on its own.
  std::optional<Sink> take(size_t n);
  void give_back(uint8_t* p) override;
  // The chunk of the sink at `p` (taken, not yet given back) is not to be used again: when
  // it comes back it is unregistered and freed. For a sink whose registration a peer may
  // still write to.
  void retire(const uint8_t* p);
  // Frees the idle chunks now and each one still out when it comes back; take() then
  // answers nullopt. For a transport that stops while sinks are still held.
  void close();
  Stats stats() const;

 private:
  RegPool(Hooks hooks, size_t max_chunk, size_t idle_cap)
      : hooks_(std::move(hooks)), max_chunk_(max_chunk), idle_cap_(idle_cap) {}
  struct Chunk {
    size_t size = 0;
    void* handle = nullptr;
    bool retired = false;
  };
  void release_locked(uint8_t* p, const Chunk& c) REQUIRES(mu_);

  const Hooks hooks_;
  const size_t max_chunk_, idle_cap_;
  mutable Mutex mu_;
  std::unordered_map<uint8_t*, Chunk> chunks_ GUARDED_BY(mu_);    // every live chunk
  std::map<size_t, std::vector<uint8_t*>> idle_ GUARDED_BY(mu_);  // by size class
  Stats stats_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace pfsnet
