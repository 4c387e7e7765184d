// FaultInjector: fault injection like `lnetctl fault drop|delay`, and corruption. A rule
// matches messages (requests and replies) leaving this node by source and destination NID
// and message type, and drops, delays or corrupts the ones it selects: every `rate`-th match, or
// the first match in each `interval`. A drop with a health kind fails the send with that kind (the
// sender sees the failure and demerits an NI); without one the message vanishes as into a black
// hole (the sender sees a completed send and no reply). A delayed message is held by the
// transport until its time (the link-emulation decorator), keeping its credit, as a
// message in a slow network would. A corrupted message has one byte of its bulk (or else
// payload) changed after it was sealed (wire/data_crc.h), as a bad link would: the
// receiver's check catches it -- unless the sender sends no checksum (lnet.checksum off),
// and then the damage is delivered. Every injection is counted and logged.
// Pure logic on the time the caller passes.
// Threads: every function from any thread; empty() is a relaxed atomic load, so the send
// path pays nothing while no rule is set.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"

namespace pfsnet {

struct FaultRule {
  enum class Action { kDrop, kDelay, kCorrupt };
  uint64_t id = 0;  // assigned by add()
  Action action = Action::kDrop;
  std::optional<Nid> src, dst;            // nullopt = any
  uint32_t msg_type = 0;                  // 0 = any
  uint64_t rate = 0;                      // every rate-th matching message; 1 = all
  Duration interval{0};                   // or the first matching message in each interval
  Duration latency{0};                    // kDelay: how long the message is held
  HealthKind health = HealthKind::kNone;  // kDrop: the failure reported to the sender
  // Counters, filled by rules().
  uint64_t matched = 0, injected = 0;

  // "drop src=* dst=198.18.1.2@tcp type=any rate=1 health=NONE".
  std::string describe() const;
};

class FaultInjector {
 public:
  // What happens to one message.
  struct Verdict {
    enum class Kind { kPass, kDelay, kDrop, kCorrupt } kind = Kind::kPass;
    TimePoint hold_until{};  // kDelay: not written before
    Status error;            // kDrop: the send's failure; ok = it vanishes silently
    int injected = 0;        // rules that fired on it (each is a fault counted on its NIs)
  };

  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }
  uint64_t add(FaultRule rule);
  bool del(uint64_t id);
  std::vector<FaultRule> rules() const;

  // A message of `type` (`reply` or request) from `src` to `dst` at `now`, judged by the
  // rules of `action`: every rule that matches counts it; drops and corruption: the first
  // that fires decides; delays: those that fire add up (the longest hold wins). Net judges drops as
  // it sends; the link-emulation decorator asks for delays (Net::fault_hold) as it writes.
  Verdict judge(FaultRule::Action action, const Nid& src, const Nid& dst, uint32_t type, bool reply,
                TimePoint now);

 private:
  mutable Mutex mu_;
  std::vector<FaultRule> rules_ GUARDED_BY(mu_);
  std::map<uint64_t, TimePoint> next_fire_ GUARDED_BY(mu_);  // interval rules: id -> next firing
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::atomic<size_t> count_{0};
};

}  // namespace pfsnet
