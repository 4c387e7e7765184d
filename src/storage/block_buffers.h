// BlockBuffers: the block server's bounded pool of block-size buffers -- the paper's buddy
// buffers, which a VSD server needs for each request it serves. A request is admitted
// only when a buffer is free; until then it waits here, holding its receive credit, so a
// client that has all its credits waiting sends nothing more: credits, not retries, push
// back (the paper's clients retried, and its write throughput fell as nodes were added).
// The memory is one 4 KiB-aligned allocation (O_DIRECT can use it); a buffer handed out
// is a Buffer that comes back here when it is destroyed -- also when it went out as a
// read's reply bulk, so it is free again once the data is on the wire.
//
// Sizing (the paper's rule): throughput x a request's turnaround, x3 for margin --
// 130 MB/s x 40 ms = 5.2 MB = 21 buffers of 256 KiB, so 63 (src/tune/ gives the advice).
//
// Threads: acquire() and stats() from any thread. A waiter's function runs on the thread
// that gives a buffer back (a transport or storage thread, or acquire's own when one is
// free); it must not block. Owned by a shared_ptr (its Buffers keep it alive).
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/clock.h>

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "base/mutex.h"

namespace pfsnet {

struct BlockBufferStats {
  size_t buffers = 0, buffer_size = 0;
  size_t in_use = 0, in_use_max = 0;
  size_t waiting = 0, waiting_max = 0;  // requests waiting for a buffer, now and at most
  uint64_t acquired = 0, waited = 0;    // buffers handed out; of them, after a wait
  Duration wait_total{0}, wait_max{0};
};

class BlockBuffers final : public BufferPool, public std::enable_shared_from_this<BlockBuffers> {
 public:
  // What a waiter gets: a buffer of buffer_size() bytes, or an empty one after stop().
  // `waited` is how long it waited for it.
  using Ready = std::function<void(Buffer, Duration waited)>;

  static std::shared_ptr<BlockBuffers> make(size_t count, size_t buffer_size, const Clock& clock);
  ~BlockBuffers() override;

  // Runs `ready` with a free buffer now, or when one comes back (first come, first served);
  // in that case first `on_queue(ahead)` (under the pool's lock, before `ready` can run:
  // it must not call the pool), `ahead` the requests waiting before this one.
  void acquire(Ready ready, const std::function<void(size_t ahead)>& on_queue = nullptr);
  size_t count() const { return count_; }
  // Waiters get an empty buffer; later acquires too. Buffers out stay valid.
  void stop();

  size_t buffer_size() const { return size_; }
  BlockBufferStats stats() const;

  // BufferPool.
  void give_back(uint8_t* p) override;

 private:
  BlockBuffers(size_t count, size_t buffer_size, const Clock& clock);
  Buffer wrap(uint8_t* p) { return Buffer::pooled(p, size_, shared_from_this()); }

  struct Waiter {
    Ready ready;
    TimePoint since;
  };
  const size_t count_, size_;
  const Clock& clock_;
  uint8_t* memory_;
  mutable Mutex mu_;
  std::vector<uint8_t*> free_ GUARDED_BY(mu_);
  std::deque<Waiter> waiters_ GUARDED_BY(mu_);
  BlockBufferStats st_ GUARDED_BY(mu_);
  bool stopped_ GUARDED_BY(mu_) = false;
};

}  // namespace pfsnet
