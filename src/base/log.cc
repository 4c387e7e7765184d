#include "base/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <string>

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

}  // namespace pfsnet
