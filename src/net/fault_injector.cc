#include "net/fault_injector.h"

#include <algorithm>

#include "base/log.h"
#include "base/mutex.h"

namespace pfsnet {

namespace {
Code code_for(HealthKind k) {
  switch (k) {
    case HealthKind::kLocalNiSendTimeout:
      return Code::kTimeout;
    case HealthKind::kPeerNiConnectionRejected:
      return Code::kRejected;
    default:
      return Code::kUnreachable;
  }
}
}  // namespace

std::string FaultRule::describe() const {
  std::string s = action == Action::kDrop ? "drop" : action == Action::kDelay ? "delay" : "corrupt";
  s += " src=" + (src ? src->to_string() : std::string("*"));
  s += " dst=" + (dst ? dst->to_string() : std::string("*"));
  s += " type=" + (msg_type ? std::to_string(msg_type) : std::string("any"));
  if (rate) s += " rate=" + std::to_string(rate);
  if (interval.count())
    s += " interval=" +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(interval).count()) +
         "ms";
  if (action == Action::kDelay)
    s += " latency=" +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(latency).count()) +
         "ms";
  else if (action == Action::kDrop)
    s += " health=" + std::string(health_kind_name(health));
  return s;
}

uint64_t FaultInjector::add(FaultRule rule) {
  MutexLock lk(mu_);
  rule.id = next_id_++;
  rule.matched = rule.injected = 0;
  PFS_LOG_WARN("fault injection: rule {} added: {}", rule.id, rule.describe());
  rules_.push_back(rule);
  count_.store(rules_.size());
  return rule.id;
}

bool FaultInjector::del(uint64_t id) {
  MutexLock lk(mu_);
  auto it =
      std::find_if(rules_.begin(), rules_.end(), [id](const FaultRule& r) { return r.id == id; });
  if (it == rules_.end()) return false;
  PFS_LOG_WARN("fault injection: rule {} removed after {} injections", id, it->injected);
  rules_.erase(it);
  next_fire_.erase(id);
  count_.store(rules_.size());
  return true;
}

std::vector<FaultRule> FaultInjector::rules() const {
  MutexLock lk(mu_);
  return rules_;
}

FaultInjector::Verdict FaultInjector::judge(FaultRule::Action action, const Nid& src,
                                            const Nid& dst, uint32_t type, bool reply,
                                            TimePoint now) {
  Verdict v;
  MutexLock lk(mu_);
  for (FaultRule& r : rules_) {
    if (r.action != action || (r.src && *r.src != src) || (r.dst && *r.dst != dst) ||
        (r.msg_type && r.msg_type != type))
      continue;
    ++r.matched;
    bool fire = false;
    if (r.rate > 0) {
      fire = r.matched % r.rate == 0;
    } else if (r.interval.count() > 0) {
      TimePoint& next = next_fire_[r.id];
      if (now >= next) {
        fire = true;
        next = now + r.interval;
      }
    }
    if (!fire) continue;
    ++r.injected;
    ++v.injected;
    std::string what = std::string(reply ? "reply" : "request") + " type " + std::to_string(type) +
                       " " + src.to_string() + " -> " + dst.to_string();
    if (r.action == FaultRule::Action::kDelay) {
      PFS_LOG_INFO("fault injection: rule {} delays {} by {} ms", r.id, what,
                   std::chrono::duration_cast<std::chrono::milliseconds>(r.latency).count());
      v.kind = Verdict::Kind::kDelay;
      v.hold_until = std::max(v.hold_until, now + r.latency);
      continue;
    }
    if (r.action == FaultRule::Action::kCorrupt) {
      PFS_LOG_INFO("fault injection: rule {} corrupts {}", r.id, what);
      v.kind = Verdict::Kind::kCorrupt;
      return v;
    }
    PFS_LOG_INFO("fault injection: rule {} drops {} ({})", r.id, what,
                 r.health == HealthKind::kNone ? "silently" : health_kind_name(r.health));
    v.kind = Verdict::Kind::kDrop;
    if (r.health != HealthKind::kNone)
      v.error = Status(code_for(r.health),
                       "fault injection (rule " + std::to_string(r.id) + ") dropped the " + what,
                       r.health);
    return v;
  }
  return v;
}

}  // namespace pfsnet
