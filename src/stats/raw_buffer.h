// RawBuffer: the bounded raw statistics buffers of GPFS (rpcPerfRawStatBufferSize,
// rpcPerfRawExecBufferSize). Many producers (the RPC path, on any thread) push records
// without locks or allocation; one consumer (the once-a-second processing) drains them.
// A push into a full buffer is dropped and counted, never blocks.
// Capacity: slots are a power of two >= limit; at most `limit` records are held.
// Threads: push() from any thread; drain() from one thread at a time.
#pragma once

#include <pfsnet/nid.h>

#include <atomic>
#include <cstdint>
#include <memory>

namespace pfsnet {

// One RPC as its client saw it, saved as the reply is completely received.
struct RawStatRecord {
  int64_t channel_wait_ns = 0;
  int64_t send_ns = 0;
  int64_t receive_ns = 0;
  int64_t latency_ns = 0;  // round trip - server execution time
  Nid node;                // target node
  // The path the request took (Nid() = unknown) and the server's execution time
  // from the reply: what health's slowness judgement takes per path.
  Nid local_ni, peer_ni;
  int64_t exec_ns = 0;
  // Submitted to reply received: what SLOW_OPS sets an RPC in flight against (its type's
  // p99, RpcStats::type_p99).
  int64_t total_ns = 0;
  uint32_t msg_type = 0;
  uint32_t bytes_sent = 0;
  uint32_t bytes_received = 0;
  bool sent_verbs = false;
  bool received_verbs = false;
};

// One request as its server saw it, saved as it finishes executing.
struct RawExecRecord {
  int64_t exec_ns = 0;
  uint32_t msg_type = 0;
  // A request's time queued for a worker before its handler ran; -1: not a request's record
  // (a phase's own: time queued, a block buffer's wait, the disk's).
  int64_t queue_ns = -1;
};

template <class T>
class RawBuffer {
 public:
  explicit RawBuffer(size_t limit) : limit_(limit ? limit : 1) {
    size_t cap = 1;
    while (cap < limit_) cap <<= 1;
    mask_ = cap - 1;
    slots_ = std::make_unique<Slot[]>(cap);
    for (size_t i = 0; i < cap; ++i) slots_[i].seq.store(i, std::memory_order_relaxed);
  }

  size_t limit() const { return limit_; }
  uint64_t drops() const { return drops_.load(std::memory_order_relaxed); }

  // Returns false (and counts a drop) when `limit` records are already held.
  bool push(const T& v) {
    uint64_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
      if (pos - tail_.load(std::memory_order_acquire) >= limit_) {
        drops_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      Slot& s = slots_[pos & mask_];
      uint64_t seq = s.seq.load(std::memory_order_acquire);
      int64_t dif = static_cast<int64_t>(seq - pos);
      if (dif == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          s.value = v;
          s.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (dif < 0) {
        drops_.fetch_add(1, std::memory_order_relaxed);
        return false;
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

  // Calls f(record) for every record pushed and not yet drained; returns how many.
  template <class F>
  size_t drain(F&& f) {
    uint64_t pos = tail_.load(std::memory_order_relaxed);
    size_t n = 0;
    for (;;) {
      Slot& s = slots_[pos & mask_];
      if (s.seq.load(std::memory_order_acquire) != pos + 1) break;
      f(static_cast<const T&>(s.value));
      s.seq.store(pos + mask_ + 1, std::memory_order_release);
      ++pos;
      ++n;
      tail_.store(pos, std::memory_order_release);
    }
    return n;
  }

 private:
  struct Slot {
    std::atomic<uint64_t> seq{0};
    T value{};
  };
  size_t limit_;
  uint64_t mask_ = 0;
  std::unique_ptr<Slot[]> slots_;
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) std::atomic<uint64_t> tail_{0};
  alignas(64) std::atomic<uint64_t> drops_{0};
};

}  // namespace pfsnet
