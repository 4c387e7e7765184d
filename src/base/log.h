// Logging: one line per event on stderr, "TIME LEVEL [component] message", via spdlog.
// Thread safety: logging functions may be called from any thread.
#pragma once

#include <pfsnet/status.h>
#include <spdlog/spdlog.h>

#include <string_view>

namespace pfsnet {

// Sets the process-wide log pattern and level ("trace", "debug", "info", "warn",
// "error", "off"). Unknown level: returns an error and changes nothing.
Status init_logging(std::string_view level);

namespace detail {
bool create_default_logger();
}
// spdlog creates its default logger lazily, on whichever thread logs first, inside its
// shared library where ThreadSanitizer cannot see the creation's synchronisation. Every
// program that logs creates it here instead, during static initialisation on the main
// thread, before any other thread exists.
inline const bool kDefaultLoggerReady = detail::create_default_logger();

}  // namespace pfsnet

#define PFS_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define PFS_LOG_INFO(...) spdlog::info(__VA_ARGS__)
#define PFS_LOG_WARN(...) spdlog::warn(__VA_ARGS__)
#define PFS_LOG_ERROR(...) spdlog::error(__VA_ARGS__)

namespace pfsnet {
class LogLimiter;
// The process-wide limiter of repeated lines (10 s, one line per key per interval).
LogLimiter& log_limiter();
// Whether a line of `key` goes out now (on the monotonic clock); when it does, `suffix`
// gets " (N more like this held back)" if lines were held back since the last one.
bool admit_log_line(const std::string& key, std::string* suffix);
// Logs "KEY: N more like this held back over S s" for every key whose interval ended with
// lines held back. NodeTimers calls it every round.
void log_held_lines();
}  // namespace pfsnet

// A line that may repeat per subject: `key` names its kind and subject (a string); the
// format's arguments are evaluated only when the line goes out.
#define PFS_LOG_LIMITED(level, key, fmt_str, ...)                               \
  do {                                                                          \
    std::string pfs_suffix_;                                                    \
    if (::pfsnet::admit_log_line((key), &pfs_suffix_))                          \
      spdlog::log(level, fmt_str "{}" __VA_OPT__(, ) __VA_ARGS__, pfs_suffix_); \
  } while (0)
#define PFS_LOG_WARN_LIMITED(key, ...) PFS_LOG_LIMITED(spdlog::level::warn, key, __VA_ARGS__)
#define PFS_LOG_ERROR_LIMITED(key, ...) PFS_LOG_LIMITED(spdlog::level::err, key, __VA_ARGS__)
