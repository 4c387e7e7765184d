// DelaySchedule: what one direction of a delay line does to each packet, as pure logic on
// times the caller gives -- the loss, the bottleneck's serialisation at a rate with a
// tail-drop queue in front of it, and the propagation delay. The forwarder
// (delay_line.cc) asks it once per packet; tests drive it with made-up times.
//
// A packet of B bytes arriving at t is lost with probability `loss`; else it waits for
// the packets ahead of it on the wire (the queue), is serialised in B x 8 / rate seconds,
// and is delivered `delay` after its last bit left. A packet that would find more than
// `queue_bytes` waiting ahead of it is dropped (a router's tail drop). rate 0: no
// serialisation and no queue, only the delay.
//
// Threads: one object per direction, used by one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>

namespace pfsnet::delay_line {

using Nanos = std::chrono::nanoseconds;

struct DirectionOptions {
  Nanos delay{0};          // one way, after serialisation
  double rate_bps = 0;     // bits per second on the wire; 0: unlimited
  size_t queue_bytes = 0;  // tail drop beyond this many bytes waiting; 0: no limit
  double loss = 0;         // fraction of packets dropped at random, 0..1
  uint64_t seed = 1;       // of the loss's random numbers (a run is repeatable)
};

struct DirectionCounters {
  uint64_t packets = 0, bytes = 0;  // delivered (scheduled for delivery)
  uint64_t lost = 0;                // dropped at random (`loss`)
  uint64_t queue_drops = 0;         // dropped by the tail-drop queue
  uint64_t max_queue_bytes = 0;     // the most bytes that waited ahead of a packet
};

class DelaySchedule {
 public:
  explicit DelaySchedule(const DirectionOptions& o);

  // A packet of `bytes` arrived at `now` (times never go back). Returns when it is to be
  // delivered at the far end, or nullopt when it is dropped. Delivery times never go back
  // either: packets leave in the order they came.
  std::optional<Nanos> admit(Nanos now, size_t bytes);

  const DirectionCounters& counters() const { return counters_; }

 private:
  DirectionOptions o_;
  Nanos busy_until_{0};  // when the wire has sent every packet admitted so far
  Nanos last_delivery_{0};
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  DirectionCounters counters_;
};

}  // namespace pfsnet::delay_line
