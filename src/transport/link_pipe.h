// LinkPipe: a long fat pipe, emulated. Frames leave one after another at `rate` (the
// link's serialisation) and arrive `delay` after their last byte left, so up to
// rate x delay bytes are in flight at once -- not a sleep per message. The transport
// holds each frame until its arrival time, then writes it.
// Thread safety: schedule() may be called from any thread.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/nid.h>

#include <algorithm>
#include <optional>

#include "base/mutex.h"

namespace pfsnet {

struct EmulationRule {
  std::optional<Nid> local, peer;  // nullopt: any
  Duration delay{0};               // one way
  double bits_per_second = 0;      // 0: unlimited
  // One link for the local NI, whatever the peer: a pipe for what it sends (rate and
  // delay) and one for what it receives (rate only: the sender's end has the delay).
  bool shared = false;
  bool matches(const Nid& l, const Nid& p) const {
    return (!local || *local == l) && (!peer || *peer == p);
  }
};

class LinkPipe {
 public:
  explicit LinkPipe(const EmulationRule& r) : delay_(r.delay), bps_(r.bits_per_second) {}

  // A frame of `bytes` handed over at `now`: when it arrives at the other end.
  TimePoint schedule(size_t bytes, TimePoint now) {
    MutexLock lk(mu_);
    TimePoint start = std::max(now, free_at_);
    Duration serialise{0};
    if (bps_ > 0) serialise = Duration(static_cast<int64_t>(double(bytes) * 8e9 / bps_));
    free_at_ = start + serialise;
    return free_at_ + delay_;
  }
  Duration delay() const { return delay_; }
  double bits_per_second() const { return bps_; }

 private:
  Mutex mu_;
  const Duration delay_;
  const double bps_;
  TimePoint free_at_ GUARDED_BY(mu_){};
};

}  // namespace pfsnet
