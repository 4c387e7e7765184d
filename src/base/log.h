// Logging: one line per event on stderr, via spdlog, in one of two formats (node.log_format):
//   text: "TIME LEVEL message" (local time);
//   json: one object a line -- "ts" (UTC, ms), "level", "node", "component" (the source's
//         part: rpc, net, membership, probe, ...), "msg", and where the line is about one
//         RPC its "xid", "job" and "trace_id" (ScopedLogRpc), and an event's own fields
//         (ScopedLogFields: a health problem's "event" and "code"). docs/operations.md.
// Thread safety: logging functions may be called from any thread; the scopes are per thread.
#pragma once

#include <pfsnet/status.h>
#include <pfsnet/trace_context.h>
#include <spdlog/formatter.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace pfsnet {

// Sets the process-wide level ("trace", "debug", "info", "warn", "error", "off") and
// format ("text" or "json"; `node`: the "node" of every JSON line). Unknown level or
// format: returns an error and changes nothing.
Status init_logging(std::string_view level, std::string_view format = "text",
                    std::string_view node = "");

// The RPC a line is about, while a ScopedLogRpc lives on the thread that logs it.
struct LogRpc {
  uint64_t xid = 0;
  std::string_view job;                 // "" = none
  const TraceContext* trace = nullptr;  // null = none
};
// Named fields of an event (e.g. {"event", "health_problem_started"}, {"code", "LOSSY"}).
struct LogField {
  std::string_view name, value;
  std::optional<double> number;  // set: the field is this number (a JSON number), not `value`
};

// While alive, every line this thread logs carries `rpc` in the JSON format (the
// innermost scope's). What it points at must outlive it. Costs two pointer stores.
class ScopedLogRpc {
 public:
  explicit ScopedLogRpc(const LogRpc& rpc);
  ~ScopedLogRpc();
  ScopedLogRpc(const ScopedLogRpc&) = delete;
  ScopedLogRpc& operator=(const ScopedLogRpc&) = delete;

 private:
  LogRpc rpc_;
  const LogRpc* prev_;
};
// While alive, every line this thread logs carries `fields` too (JSON), outer scopes' as well.
class ScopedLogFields {
 public:
  explicit ScopedLogFields(std::span<const LogField> fields);
  ~ScopedLogFields();
  ScopedLogFields(const ScopedLogFields&) = delete;
  ScopedLogFields& operator=(const ScopedLogFields&) = delete;

  std::span<const LogField> fields() const { return fields_; }
  const ScopedLogFields* outer() const { return prev_; }

 private:
  std::span<const LogField> fields_;
  const ScopedLogFields* prev_;
};

// The JSON format's formatter (what init_logging installs for "json"); for tests.
std::unique_ptr<spdlog::formatter> json_log_formatter(std::string node);
// The component a source file belongs to: the directory under src/ (or apps/), else
// "pfsnet".
std::string_view log_component(const char* filename);

namespace detail {
bool create_default_logger();
}
// spdlog creates its default logger lazily, on whichever thread logs first, inside its
// shared library where ThreadSanitizer cannot see the creation's synchronisation. Every
// program that logs creates it here instead, during static initialisation on the main
// thread, before any other thread exists.
inline const bool kDefaultLoggerReady = detail::create_default_logger();

}  // namespace pfsnet

// Each line knows its source file (the JSON format's "component").
#define PFS_LOG_AT(level, ...)                                                               \
  spdlog::default_logger_raw()->log(spdlog::source_loc{__FILE__, __LINE__, SPDLOG_FUNCTION}, \
                                    level, __VA_ARGS__)
#define PFS_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define PFS_LOG_INFO(...) PFS_LOG_AT(spdlog::level::info, __VA_ARGS__)
#define PFS_LOG_WARN(...) PFS_LOG_AT(spdlog::level::warn, __VA_ARGS__)
#define PFS_LOG_ERROR(...) PFS_LOG_AT(spdlog::level::err, __VA_ARGS__)

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
#define PFS_LOG_LIMITED(level, key, fmt_str, ...)                              \
  do {                                                                         \
    std::string pfs_suffix_;                                                   \
    if (::pfsnet::admit_log_line((key), &pfs_suffix_))                         \
      PFS_LOG_AT(level, fmt_str "{}" __VA_OPT__(, ) __VA_ARGS__, pfs_suffix_); \
  } while (0)
#define PFS_LOG_WARN_LIMITED(key, ...) PFS_LOG_LIMITED(spdlog::level::warn, key, __VA_ARGS__)
#define PFS_LOG_ERROR_LIMITED(key, ...) PFS_LOG_LIMITED(spdlog::level::err, key, __VA_ARGS__)
