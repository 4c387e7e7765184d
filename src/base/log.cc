#include "base/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <string>

#include "base/log_limiter.h"

namespace pfsnet {

bool detail::create_default_logger() { return spdlog::default_logger_raw() != nullptr; }

Status init_logging(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") {
    return Status(Code::kInvalidArgument,
                  "unknown log level '" + std::string(level) +
                      "' (expected trace, debug, info, warn, error or off)");
  }
  auto logger = spdlog::get("pfsnet");
  if (!logger) logger = spdlog::stderr_logger_mt("pfsnet");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
  spdlog::set_level(lvl);
  return Status::Ok();
}

LogLimiter& log_limiter() {
  static LogLimiter limiter;
  return limiter;
}

namespace {
TimePoint monotonic_now() { return MonotonicClock().now(); }
}  // namespace

bool admit_log_line(const std::string& key, std::string* suffix) {
  auto v = log_limiter().admit(key, monotonic_now());
  if (v.log) *suffix = held_suffix(v);
  return v.log;
}

void log_held_lines() {
  for (const auto& h : log_limiter().take_held(monotonic_now()))
    spdlog::warn("{}: {} more like this held back over {:.1f} s", h.key, h.count,
                 std::chrono::duration<double>(h.over).count());
}

}  // namespace pfsnet
