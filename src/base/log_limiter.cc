#include "base/log_limiter.h"

#include <fmt/format.h>

namespace pfsnet {

LogLimiter::Verdict LogLimiter::admit(std::string_view key, TimePoint now) {
  MutexLock lk(mu_);
  auto it = entries_.find(std::string(key));
  if (it == entries_.end()) {
    if (entries_.size() >= opts_.max_keys) evict_one_locked();
    it = entries_.emplace(std::string(key), Entry{}).first;
    it->second.window_start = now;
  }
  Entry& e = it->second;
  e.last_seen = now;
  if (now - e.window_start >= opts_.interval) {
    e.window_start = now;
    e.logged = 0;
  }
  if (e.logged < opts_.burst) {
    ++e.logged;
    Verdict v{true, e.held};
    e.held = 0;
    return v;
  }
  if (e.held++ == 0) e.first_held = now;
  return Verdict{false, 0};
}

std::vector<LogLimiter::Held> LogLimiter::take_held(TimePoint now) {
  MutexLock lk(mu_);
  std::vector<Held> out = std::move(evicted_);
  evicted_.clear();
  for (auto& [key, e] : entries_) {
    if (e.held == 0 || now - e.window_start < opts_.interval) continue;
    out.push_back(Held{key, e.held, e.last_seen - e.first_held});
    e.held = 0;
  }
  // Keys idle for a whole interval with nothing held are forgotten: a line of theirs is
  // logged at once anyway.
  std::erase_if(entries_, [&](const auto& kv) {
    return kv.second.held == 0 && now - kv.second.last_seen >= opts_.interval;
  });
  return out;
}

size_t LogLimiter::keys() const {
  MutexLock lk(mu_);
  return entries_.size();
}

void LogLimiter::evict_one_locked() {
  auto victim = entries_.begin();
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->second.last_seen < victim->second.last_seen) victim = it;
  if (victim == entries_.end()) return;
  const Entry& e = victim->second;
  if (e.held > 0 && evicted_.size() < opts_.max_keys) {
    evicted_.push_back(Held{victim->first, e.held, e.last_seen - e.first_held});
  } else if (e.held > 0) {  // bounded too: the rest add up under one key
    if (evicted_.back().key != "(other lines)") evicted_.push_back(Held{"(other lines)", 0, {}});
    evicted_.back().count += e.held;
  }
  entries_.erase(victim);
}

std::string held_suffix(const LogLimiter::Verdict& v) {
  if (v.held == 0) return {};
  return fmt::format(" ({} more like this held back)", v.held);
}

}  // namespace pfsnet
