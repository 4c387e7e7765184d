#include "base/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <time.h>

#include <nlohmann/json.hpp>
#include <string>

#include "base/log_limiter.h"
#include "base/mutex.h"

namespace pfsnet {

bool detail::create_default_logger() { return spdlog::default_logger_raw() != nullptr; }

namespace {

thread_local const LogRpc* t_rpc = nullptr;
thread_local const ScopedLogFields* t_fields = nullptr;

// "2026-12-06T18:38:31.123Z"
std::string utc_ms(spdlog::log_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const time_t secs = static_cast<time_t>(ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[40];
  size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms % 1000));
  return buf;
}

std::string hex(std::span<const uint8_t> b) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (uint8_t x : b) {
    s.push_back(kDigits[x >> 4]);
    s.push_back(kDigits[x & 15]);
  }
  return s;
}

class JsonFormatter final : public spdlog::formatter {
 public:
  explicit JsonFormatter(std::string node) : node_(std::move(node)) {}

  void format(const spdlog::details::log_msg& m, spdlog::memory_buf_t& dest) override {
    nlohmann::ordered_json j;
    j["ts"] = utc_ms(m.time);
    const auto level = spdlog::level::to_string_view(m.level);
    j["level"] = std::string_view(level.data(), level.size());
    j["node"] = node_;
    j["component"] = log_component(m.source.filename);
    j["msg"] = std::string_view(m.payload.data(), m.payload.size());
    if (const LogRpc* r = t_rpc) {
      j["xid"] = r->xid;
      if (!r->job.empty()) j["job"] = r->job;
      if (r->trace) {
        j["trace_id"] = hex(r->trace->trace_id);
        j["span_id"] = hex(r->trace->parent_id);
      }
    }
    for (const ScopedLogFields* f = t_fields; f; f = f->outer())
      for (const LogField& x : f->fields())
        if (!j.contains(x.name)) {  // the innermost wins
          auto& v = j[std::string(x.name)];
          if (x.number)
            v = *x.number;
          else
            v = x.value;
        }
    // Bytes that are not UTF-8 (a peer's text in a message) become U+FFFD, not an exception.
    const std::string s = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    dest.append(s.data(), s.data() + s.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(node_);
  }

 private:
  std::string node_;
};

Mutex g_format_mu;
std::string g_format GUARDED_BY(g_format_mu) = "text";
std::string g_node GUARDED_BY(g_format_mu);

}  // namespace

ScopedLogRpc::ScopedLogRpc(const LogRpc& rpc) : rpc_(rpc), prev_(t_rpc) { t_rpc = &rpc_; }
ScopedLogRpc::~ScopedLogRpc() { t_rpc = prev_; }

ScopedLogFields::ScopedLogFields(std::span<const LogField> fields)
    : fields_(fields), prev_(t_fields) {
  t_fields = this;
}
ScopedLogFields::~ScopedLogFields() { t_fields = prev_; }

std::unique_ptr<spdlog::formatter> json_log_formatter(std::string node) {
  return std::make_unique<JsonFormatter>(std::move(node));
}

std::string_view log_component(const char* filename) {
  if (!filename || !*filename) return "pfsnet";
  std::string_view f(filename);
  for (std::string_view root : {std::string_view("src/"), std::string_view("apps/")}) {
    size_t at = f.rfind(root);
    if (at == std::string_view::npos || (at > 0 && f[at - 1] != '/')) continue;
    std::string_view rest = f.substr(at + root.size());
    size_t slash = rest.find('/');
    if (slash != std::string_view::npos && slash > 0) return rest.substr(0, slash);
  }
  return "pfsnet";
}

Status init_logging(std::string_view level, std::string_view format, std::string_view node) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") {
    return Status(Code::kInvalidArgument,
                  "unknown log level '" + std::string(level) +
                      "' (expected trace, debug, info, warn, error or off)");
  }
  if (format != "text" && format != "json")
    return Status(Code::kInvalidArgument,
                  "unknown log format '" + std::string(format) + "' (expected text or json)");
  auto logger = spdlog::get("pfsnet");
  const bool made = !logger;
  if (!logger) logger = spdlog::stderr_logger_mt("pfsnet");
  spdlog::set_default_logger(logger);
  {
    MutexLock lk(g_format_mu);
    if (made || g_format != format || g_node != node) {
      if (format == "json")
        logger->set_formatter(json_log_formatter(std::string(node)));
      else
        logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
      g_format = format;
      g_node = node;
    }
  }
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
    PFS_LOG_WARN("{}: {} more like this held back over {:.1f} s", h.key, h.count,
                 std::chrono::duration<double>(h.over).count());
}

}  // namespace pfsnet
