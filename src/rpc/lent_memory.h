// LentMemory: a caller's own memory lent to the RPC layer as Buffers -- a direct write's
// data (sent from where it is), a read's destination (CallOptions::reply_memory: its
// reply received straight into it) -- counting the pieces still held, so that the caller
// takes its memory back only once nothing holds it.
// Thread safety: any thread; give_back comes from whichever thread frees a Buffer.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/clock.h>

#include <functional>
#include <memory>
#include <utility>

#include "base/mutex.h"
#include "rpc/waiter.h"

namespace pfsnet {

class LentMemory final : public BufferPool {
 public:
  // `n` bytes at `p`, lent as a Buffer: the memory is the caller's again once the Buffer
  // (and every copy of its BulkData) is freed.
  static Buffer lend(const std::shared_ptr<LentMemory>& self, uint8_t* p, size_t n) {
    {
      MutexLock l(self->mu_);
      ++self->out_;
    }
    return Buffer::pooled(p, n, self);
  }
  void give_back(uint8_t*) override EXCLUDES(mu_) {
    MutexLock l(mu_);
    --out_;
    cv_.notify_all();
  }
  // Pieces still held.
  size_t out() const EXCLUDES(mu_) {
    MutexLock l(mu_);
    return out_;
  }
  // Whether every piece came back by `until`.
  bool wait_returned(Waiter& w, TimePoint until) EXCLUDES(mu_) {
    MutexLock l(mu_);
    return w.wait_until(l, cv_, until, [&]() REQUIRES(mu_) { return out_ == 0; });
  }
  // How whoever holds it now is made to let go (a reply being received into it: its
  // connection is closed), and doing so.
  void set_cancel(std::function<void()> f) EXCLUDES(mu_) {
    MutexLock l(mu_);
    cancel_ = std::move(f);
  }
  void cancel() EXCLUDES(mu_) {
    std::function<void()> f;
    {
      MutexLock l(mu_);
      f = std::move(cancel_);
    }
    if (f) f();
  }

 private:
  mutable Mutex mu_;
  CondVar cv_;
  size_t out_ GUARDED_BY(mu_) = 0;
  std::function<void()> cancel_ GUARDED_BY(mu_);
};

}  // namespace pfsnet
