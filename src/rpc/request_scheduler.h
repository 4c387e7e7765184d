// RequestScheduler: a server's request scheduling policy in force (rpc/nrs.h holds its
// pure core): requests wait here between admission and their handler, and start as the
// policy lets them. A started request holds a Slot until its reply is sent; giving it
// back starts whatever the policy lets in next, on the thread that gave it back (a
// worker's, an I/O thread, a timer's) -- a request of a worker type only queues for a
// worker there.
//
// Threads: every function from any thread. The lock is never held while a request starts.
#pragma once

#include <pfsnet/clock.h>

#include <functional>
#include <vector>

#include "base/mutex.h"
#include "rpc/nrs.h"

namespace pfsnet {

class RequestScheduler {
 public:
  // A request in service; its slot is given back by release() or when this goes.
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& o) noexcept
        : s_(std::exchange(o.s_, nullptr)), key_(std::move(o.key_)), waited_(o.waited_) {}
    Slot& operator=(Slot&& o) noexcept {
      if (this != &o) {
        release();
        s_ = std::exchange(o.s_, nullptr);
        key_ = std::move(o.key_);
        waited_ = o.waited_;
      }
      return *this;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { release(); }
    // Whether it holds a slot (not under fifo, nor once released).
    bool held() const { return s_ != nullptr; }
    // Whether the policy held the request before it started (refused it a slot).
    bool waited() const { return waited_; }
    void release() {
      if (RequestScheduler* s = std::exchange(s_, nullptr)) s->done(key_);
    }

   private:
    friend class RequestScheduler;
    Slot(RequestScheduler* s, NrsFlowKey key, bool waited)
        : s_(s), key_(std::move(key)), waited_(waited) {}
    RequestScheduler* s_ = nullptr;
    NrsFlowKey key_;
    bool waited_ = false;
  };
  using Start = std::function<void(Slot)>;

  RequestScheduler(Clock& clock, FairShareOptions o) : clock_(clock), core_(std::move(o)) {}

  // A request of `flow` carrying `bytes`: `start` runs (here, or on the thread that frees
  // a slot) when the policy lets it into service.
  void submit(NrsFlowKey flow, uint64_t bytes, Start start);
  // New slots, idle time or weights, from the next start on: when a slot is given back or
  // a request comes (a request waits only while another is in service, whose end comes).
  // Runs no handler on the caller's thread, which may hold its own locks (a config
  // change's applier runs under the configuration's).
  void set_options(FairShareOptions o);
  // The policy is replaced: every request waiting starts, whatever the slots, when the
  // next slot is given back or request comes -- not on the caller's thread, as above.
  void release_all();
  // Every request waiting starts now, whatever the slots: the server stops. On this thread,
  // or on the one pumping at the time.
  void drain();

  struct Figures {
    FairShareOptions options;
    size_t waiting = 0;
    int active = 0;
    std::vector<NrsFlowStats> flows;
  };
  Figures figures() const;

 private:
  void done(const NrsFlowKey& flow);
  // Starts what the policy lets in; one thread at a time does (another's call just asks it
  // to look again).
  void pump();

  Clock& clock_;
  mutable Mutex mu_;
  FairShare core_ GUARDED_BY(mu_);
  struct Held {
    NrsFlowKey flow;
    Start start;
    bool waited = false;  // set as it leaves: the policy held it
  };
  // The requests waiting, by id: an index into held_, its entries reused (free_), so a
  // request costs no allocation here once the server has seen its peak.
  std::vector<Held> held_ GUARDED_BY(mu_);
  // The request `id` out of held_, its entry free for the next.
  Held take(uint64_t id) REQUIRES(mu_);
  std::vector<uint64_t> free_ GUARDED_BY(mu_);
  bool pumping_ GUARDED_BY(mu_) = false;
  bool again_ GUARDED_BY(mu_) = false;
  bool unbounded_ GUARDED_BY(mu_) = false;  // release_all(): no slots any more
  // The pumping thread's batch (one thread pumps at a time), kept for its capacity.
  std::vector<Held> ready_;
};

}  // namespace pfsnet
