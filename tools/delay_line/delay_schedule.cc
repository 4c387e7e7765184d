#include "delay_schedule.h"

#include <algorithm>

namespace pfsnet::delay_line {

DelaySchedule::DelaySchedule(const DirectionOptions& o) : o_(o), rng_(o.seed) {}

std::optional<Nanos> DelaySchedule::admit(Nanos now, size_t bytes) {
  if (o_.loss > 0 && uniform_(rng_) < o_.loss) {
    ++counters_.lost;
    return std::nullopt;
  }
  Nanos leaves = now;
  if (o_.rate_bps > 0) {
    Nanos start = std::max(now, busy_until_);
    // What waits ahead of this packet: the rest of the wire's backlog, in bytes.
    double waiting_s = std::chrono::duration<double>(start - now).count();
    auto waiting = static_cast<uint64_t>(waiting_s * o_.rate_bps / 8);
    if (o_.queue_bytes > 0 && waiting + bytes > o_.queue_bytes) {
      ++counters_.queue_drops;
      return std::nullopt;
    }
    counters_.max_queue_bytes = std::max(counters_.max_queue_bytes, waiting);
    auto serialise = Nanos(static_cast<int64_t>(double(bytes) * 8 * 1e9 / o_.rate_bps));
    busy_until_ = start + serialise;
    leaves = busy_until_;
  }
  Nanos at = std::max(leaves + o_.delay, last_delivery_);
  last_delivery_ = at;
  ++counters_.packets;
  counters_.bytes += bytes;
  return at;
}

}  // namespace pfsnet::delay_line
