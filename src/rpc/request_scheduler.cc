// RequestScheduler (rpc/request_scheduler.h).
#include "rpc/request_scheduler.h"

namespace pfsnet {

void RequestScheduler::submit(NrsFlowKey flow, uint64_t bytes, Start start) {
  {
    MutexLock lk(mu_);
    const uint64_t id = next_id_++;
    core_.push(flow, bytes, clock_.now(), id);
    held_.emplace(id, Held{std::move(flow), std::move(start)});
  }
  pump();
}

void RequestScheduler::set_options(FairShareOptions o) {
  {
    MutexLock lk(mu_);
    core_.set_options(std::move(o));
  }
  pump();
}

void RequestScheduler::done(const NrsFlowKey& flow) {
  {
    MutexLock lk(mu_);
    core_.done(flow, clock_.now());
  }
  pump();
}

void RequestScheduler::drain() {
  std::vector<Held> ready;
  {
    MutexLock lk(mu_);
    for (uint64_t id : core_.drain(clock_.now())) {
      auto it = held_.find(id);
      ready.push_back(std::move(it->second));
      held_.erase(it);
    }
  }
  for (Held& h : ready) h.start(Slot(this, std::move(h.flow)));
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
  for (;;) {
    std::vector<Held> ready;
    {
      MutexLock lk(mu_);
      again_ = false;
      const TimePoint now = clock_.now();
      while (auto id = core_.pop(now)) {
        auto it = held_.find(*id);
        ready.push_back(std::move(it->second));
        held_.erase(it);
      }
      if (ready.empty()) {
        pumping_ = false;
        return;
      }
    }
    // A start that frees its slot at once (an inline handler) asks for another look.
    for (Held& h : ready) h.start(Slot(this, std::move(h.flow)));
  }
}

RequestScheduler::Figures RequestScheduler::figures() const {
  MutexLock lk(mu_);
  return Figures{core_.options(), core_.waiting(), core_.active(), core_.flows()};
}

}  // namespace pfsnet
