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
