// DiskModel: an emulated disk of a given rate, so one machine can stand in for the paper's
// SSA adapters (180 MB/s per server). The disk does one transfer at a time, in the order
// they come: a transfer of n bytes queued at t completes at max(t, the end of the one
// before) + n / rate. Pure: the caller gives the time (an injected clock) and waits.
// Thread safety: none; the block service holds one per target under its lock.
#pragma once

#include <pfsnet/clock.h>

#include <algorithm>
#include <cstdint>

namespace pfsnet {

class DiskModel {
 public:
  // `bytes_per_s` > 0; 0 or less: no emulation (every transfer completes at once).
  explicit DiskModel(double bytes_per_s = 0) : rate_(bytes_per_s) {}

  bool emulated() const { return rate_ > 0; }
  // When a transfer of `bytes` queued at `now` completes; the disk is busy until then.
  TimePoint schedule(TimePoint now, uint64_t bytes) {
    if (!emulated()) return now;
    auto service = std::chrono::duration_cast<Duration>(
        std::chrono::duration<double>(static_cast<double>(bytes) / rate_));
    TimePoint start = std::max(now, busy_until_);
    busy_until_ = start + service;
    busy_ += service;
    return busy_until_;
  }
  // The time the disk has spent transferring, in all.
  Duration busy() const { return busy_; }

 private:
  double rate_;
  TimePoint busy_until_{};
  Duration busy_{0};
};

}  // namespace pfsnet
