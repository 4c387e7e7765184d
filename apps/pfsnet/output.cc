#include <cctype>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "admin/admin_client.h"
#include "cli.h"

namespace pfsnet::cli {

int fail(const std::string& msg) {
  std::fprintf(stderr, "pfsnet: %s\n", msg.c_str());
  return 2;
}

int request(const Invocation& inv, const json& req, std::chrono::milliseconds timeout,
            const std::function<void(const json&)>& human,
            const std::function<void(const json&)>& on_event) {
  auto r = admin_request(inv.socket, req, timeout, on_event);
  if (!r.ok()) return fail(r.status().message());
  if (inv.json)
    std::cout << r->dump() << "\n";
  else
    human(*r);
  return 0;
}

void add_json_flag(CLI::App* sub, Invocation& inv) {
  sub->add_flag("--json", inv.json, "print JSON");
}

std::string fmt_ms(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f", v);
  return b;
}

std::string human_bytes(uint64_t v) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double d = double(v);
  int i = 0;
  while (d >= 1024 && i < 4) {
    d /= 1024;
    ++i;
  }
  char b[32];
  std::snprintf(b, sizeof(b), i ? "%.1f%s" : "%.0f%s", d, u[i]);
  return b;
}

std::string utc(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

std::optional<int64_t> size_with_unit(const std::string& text) {
  try {
    size_t used = 0;
    int64_t size = std::stoll(text, &used);
    std::string unit = text.substr(used);
    if (size < 0) return std::nullopt;
    if (unit == "K" || unit == "k") return size << 10;
    if (unit == "M" || unit == "m") return size << 20;
    if (unit == "G" || unit == "g") return size << 30;
    if (unit.empty()) return size;
  } catch (...) {
  }
  return std::nullopt;
}

std::optional<double> seconds_with_unit(const std::string& text) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    std::string unit = text.substr(used);
    if (!(v >= 0) || text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])))
      return std::nullopt;
    if (unit.empty() || unit == "s") return v;
    if (unit == "m") return v * 60;
    if (unit == "h") return v * 3600;
    if (unit == "d") return v * 86400;
  } catch (...) {
  }
  return std::nullopt;
}

}  // namespace pfsnet::cli
