// RegCache: registrations of application memory that the fabric sends by RMA (a frame's
// bulk, which the peer reads), kept while that memory lives, so a buffer sent again and
// again -- a client writing the same BulkData, a server answering reads from one buffer --
// is registered once (o2iblnd's FMR/registration cache, in the small; RegPool covers the
// memory the transport allocates itself).
//
// An entry is keyed by the BulkData's Buffer and holds a weak reference to it: while the
// Buffer lives its memory can neither move nor be freed (a BulkData is immutable), so the
// registration stays right. Once the Buffer is gone the entry is stale and is never
// matched again, even by a new Buffer at the same address (the weak reference tells them
// apart); stale entries are dropped on the next sweep. So no registration outlives its
// memory for long, which matters where registration pins pages.
//
// Capacity rule: at most `max_entries` entries; beyond that the least recently used goes.
// A registration leaves the cache and closes when the cache and every Ref to it have let
// go: an RMA still in flight keeps its registration open after eviction.
// Registration is injected (Hooks), so the cache is tested without a fabric; the hooks
// (and what they capture: the domain) live until the last registration closes.
// Threads: every method on any thread (one mutex); a Ref is dropped on any thread.
#pragma once

#include <pfsnet/buffer.h>

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <unordered_map>

#include "base/mutex.h"

namespace pfsnet {

class RegCache {
 public:
  struct Hooks {
    // Registers [p, p + n); returns its handle (a fid_mr*), or null on failure.
    std::function<void*(const uint8_t* p, size_t n)> reg;
    std::function<void(void* handle)> unreg;
  };
  // A registration in use; `handle` stays valid while the Ref lives.
  struct Reg {
    Reg(std::shared_ptr<const Hooks> h, void* handle) : hooks(std::move(h)), handle(handle) {}
    ~Reg() { hooks->unreg(handle); }
    Reg(const Reg&) = delete;
    Reg& operator=(const Reg&) = delete;
    std::shared_ptr<const Hooks> hooks;
    void* handle;
  };
  using Ref = std::shared_ptr<Reg>;
  struct Stats {
    uint64_t hits = 0;
    uint64_t registrations = 0;  // made by get() and register_once()
    uint64_t evicted = 0;        // over the capacity
    uint64_t stale = 0;          // dropped because their memory was freed
    size_t entries = 0;
  };

  RegCache(Hooks hooks, size_t max_entries);

  // The registration of all of `b` (non-null, not empty): the cached one, or a new one.
  // Null when registering failed.
  Ref get(const BulkData& b);
  // A registration of [p, p + n) outside the cache, for one operation (memory the cache
  // cannot watch: a payload owned by one frame, a sink too large for the pool). Null when
  // registering failed.
  Ref register_once(const uint8_t* p, size_t n);
  Stats stats() const;

 private:
  struct Entry {
    std::weak_ptr<const Buffer> buf;
    Ref reg;
    std::list<const Buffer*>::iterator lru;
  };
  // Drops the stale entries (get() does, every kSweepEvery calls).
  void sweep_locked() REQUIRES(mu_);

  const std::shared_ptr<const Hooks> hooks_;
  const size_t max_entries_;
  mutable Mutex mu_;
  std::unordered_map<const Buffer*, Entry> entries_ GUARDED_BY(mu_);
  std::list<const Buffer*> lru_ GUARDED_BY(mu_);  // most recently used first
  uint64_t gets_ GUARDED_BY(mu_) = 0;
  Stats stats_ GUARDED_BY(mu_);
};

}  // namespace pfsnet
