// LogLimiter: holds back log lines that repeat. A line has a key -- its kind and its
// subject, e.g. "connect 127.0.0.2@tcp -> 127.0.0.5@tcp failed" -- and at most `burst`
// lines of one key are logged per `interval`; the rest are counted. The first line of a
// key logged after some were held back says how many; a key whose interval ended with
// lines held back and nothing since is reported by take_held() ("N more like this"), so
// a count is never lost to silence. Against a dead server under load this turns one
// warning per failed connect (hundreds a minute) into one per peer per interval.
//
// Pure logic on the times the caller passes: no clock is read here. The process-wide
// instance behind PFS_LOG_WARN_LIMITED reads the monotonic clock (base/log.h).
//
// Memory: at most `max_keys` keys (about 100 bytes each plus the key); a new key beyond
// that evicts the key idle longest, its held count reported by the next take_held().
// Threads: every function from any thread (one internal mutex; nothing logs under it).
#pragma once

#include <pfsnet/clock.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"

namespace pfsnet {

class LogLimiter {
 public:
  struct Options {
    Duration interval = std::chrono::seconds(10);
    int burst = 1;  // lines logged per key per interval
    size_t max_keys = 1024;
  };
  struct Verdict {
    bool log = false;
    uint64_t held = 0;  // when logging: lines of this key held back before this one
  };
  struct Held {
    std::string key;
    uint64_t count = 0;
    Duration over{};  // from the first held line to the last
  };

  LogLimiter() : LogLimiter(Options{}) {}
  explicit LogLimiter(Options o) : opts_(o) {}

  // A line of `key` at `now`: log it or hold it back.
  Verdict admit(std::string_view key, TimePoint now);
  // Keys whose interval has ended with lines held back since their last logged line:
  // their counts, reset (each held line is reported once, here or by admit()).
  std::vector<Held> take_held(TimePoint now);

  size_t keys() const;

 private:
  struct Entry {
    TimePoint window_start{};
    int logged = 0;  // in the current window
    uint64_t held = 0;
    TimePoint first_held{}, last_seen{};
  };
  void evict_one_locked() REQUIRES(mu_);

  const Options opts_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ GUARDED_BY(mu_);
  std::vector<Held> evicted_ GUARDED_BY(mu_);
};

// " (3 more like this held back)" for a verdict that held lines back, "" otherwise.
std::string held_suffix(const LogLimiter::Verdict& v);

}  // namespace pfsnet
