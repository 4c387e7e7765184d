// RequestScheduler (rpc/request_scheduler.h).
#include "rpc/request_scheduler.h"

namespace pfsnet {

void RequestScheduler::submit(NrsFlowKey flow, uint64_t bytes, Start start) {
  {
    MutexLock lk(mu_);
    uint64_t id;
    if (free_.empty()) {
      id = held_.size();
      held_.push_back({});
    } else {
      id = free_.back();
      free_.pop_back();
    }
    core_.push(flow, bytes, clock_.now(), id);
    held_[id] = Held{std::move(flow), std::move(start)};
  }
  pump();
}

RequestScheduler::Held RequestScheduler::take(uint64_t id) {
  Held h = std::move(held_[id]);
  held_[id].start = nullptr;
  free_.push_back(id);
  return h;
}

void RequestScheduler::set_options(FairShareOptions o) {
  MutexLock lk(mu_);
  core_.set_options(std::move(o));
}

void RequestScheduler::release_all() {
  MutexLock lk(mu_);
  unbounded_ = true;
}

void RequestScheduler::done(const NrsFlowKey& flow) {
  {
    MutexLock lk(mu_);
    core_.done(flow, clock_.now());
  }
  pump();
}

void RequestScheduler::drain() {
  release_all();
  pump();
}

void RequestScheduler::pump() {
  {
    MutexLock lk(mu_);
    if (pumping_) {
      again_ = true;
      return;
    }
    pumping_ = true;
  }
  // Only this thread touches ready_ until pumping_ is false again.
  for (;;) {
    ready_.clear();
    {
      MutexLock lk(mu_);
      again_ = false;
      const TimePoint now = clock_.now();
      if (unbounded_) {
        for (uint64_t id : core_.drain(now)) {
          ready_.push_back(take(id));
          ready_.back().waited = true;  // it was waiting when the policy went
        }
      } else {
        bool held = false;
        while (auto id = core_.pop(now, &held)) {
          ready_.push_back(take(*id));
          ready_.back().waited = held;
        }
      }
      if (ready_.empty()) {
        pumping_ = false;
        return;
      }
    }
    // A start that frees its slot at once (an inline handler) asks for another look.
    for (Held& h : ready_) h.start(Slot(this, std::move(h.flow), h.waited));
  }
}

RequestScheduler::Figures RequestScheduler::figures() const {
  MutexLock lk(mu_);
  return Figures{core_.options(), core_.waiting(), core_.active(), core_.flows()};
}

}  // namespace pfsnet
