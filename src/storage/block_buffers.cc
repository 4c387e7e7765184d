#include "storage/block_buffers.h"

#include <cstdlib>
#include <new>

namespace pfsnet {

namespace {
constexpr size_t kAlign = 4096;
}

std::shared_ptr<BlockBuffers> BlockBuffers::make(size_t count, size_t buffer_size,
                                                 const Clock& clock) {
  return std::shared_ptr<BlockBuffers>(new BlockBuffers(count, buffer_size, clock));
}

BlockBuffers::BlockBuffers(size_t count, size_t buffer_size, const Clock& clock)
    : count_(count), size_((buffer_size + kAlign - 1) / kAlign * kAlign), clock_(clock) {
  memory_ = static_cast<uint8_t*>(std::aligned_alloc(kAlign, count_ * size_));
  if (!memory_) throw std::bad_alloc();
  MutexLock lk(mu_);
  for (size_t i = count_; i-- > 0;) free_.push_back(memory_ + i * size_);
  st_.buffers = count_;
  st_.buffer_size = size_;
}

BlockBuffers::~BlockBuffers() { std::free(memory_); }

void BlockBuffers::acquire(Ready ready, const std::function<void(size_t ahead)>& on_queue) {
  uint8_t* p = nullptr;
  {
    MutexLock lk(mu_);
    if (!stopped_) {
      if (free_.empty() || !waiters_.empty()) {
        if (on_queue) on_queue(waiters_.size());
        waiters_.push_back({std::move(ready), clock_.now()});
        st_.waiting_max = std::max(st_.waiting_max, waiters_.size());
        return;
      }
      p = free_.back();
      free_.pop_back();
      ++st_.acquired;
      st_.in_use_max = std::max(st_.in_use_max, count_ - free_.size());
    }
  }
  ready(p ? wrap(p) : Buffer(), Duration(0));
}

void BlockBuffers::give_back(uint8_t* p) {
  Waiter w;
  Duration waited{0};
  {
    MutexLock lk(mu_);
    if (stopped_ || waiters_.empty()) {
      free_.push_back(p);
      return;
    }
    // Straight to the first waiter: the buffer stays in use.
    w = std::move(waiters_.front());
    waiters_.pop_front();
    waited = clock_.now() - w.since;
    ++st_.acquired;
    ++st_.waited;
    st_.wait_total += waited;
    st_.wait_max = std::max(st_.wait_max, waited);
  }
  w.ready(wrap(p), waited);
}

void BlockBuffers::stop() {
  std::deque<Waiter> w;
  {
    MutexLock lk(mu_);
    stopped_ = true;
    w.swap(waiters_);
  }
  for (Waiter& x : w) x.ready(Buffer(), Duration(0));
}

BlockBufferStats BlockBuffers::stats() const {
  MutexLock lk(mu_);
  BlockBufferStats s = st_;
  s.in_use = count_ - free_.size();
  s.waiting = waiters_.size();
  return s;
}

}  // namespace pfsnet
