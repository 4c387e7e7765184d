#include "base/job_id.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace pfsnet {

namespace {

constexpr size_t kMaxJobId = 64;  // FrameExt's (wire/frame.h)

std::string as_job_id(std::string s) {
  if (s.size() > kMaxJobId) s.resize(kMaxJobId);
  for (char& c : s)
    if (c < 0x21 || c > 0x7e) c = '_';
  return s;
}

}  // namespace

ProcessFacts this_process() {
  ProcessFacts p;
  std::ifstream comm("/proc/self/comm");
  std::getline(comm, p.exe);
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) p.host = host;
  p.uid = getuid();
  p.gid = getgid();
  p.pid = getpid();
  p.env = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
  return p;
}

Status check_job_name(std::string_view tmpl) {
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] != '%') continue;
    if (i + 1 == tmpl.size())
      return Status(Code::kInvalidArgument, "a '%' at the end (write %% for a '%')");
    const char c = tmpl[++i];
    if (std::string_view("eughHpj%").find(c) == std::string_view::npos)
      return Status(Code::kInvalidArgument,
                    std::string("unknown code %") + c + " (%e %u %g %h %H %p %j %%)");
  }
  return Status::Ok();
}

std::string expand_job_name(std::string_view tmpl, const ProcessFacts& p,
                            std::string_view var_value) {
  std::string out;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] != '%' || i + 1 == tmpl.size()) {
      out += tmpl[i];
      continue;
    }
    switch (const char c = tmpl[++i]) {
      case 'e':
        out += p.exe;
        break;
      case 'u':
        out += std::to_string(p.uid);
        break;
      case 'g':
        out += std::to_string(p.gid);
        break;
      case 'h':
        out += p.host;
        break;
      case 'H':
        out += p.host.substr(0, p.host.find('.'));
        break;
      case 'p':
        out += std::to_string(p.pid);
        break;
      case 'j':
        out += var_value;
        break;
      case '%':
        out += '%';
        break;
      default:
        out += '%';
        out += c;
    }
  }
  return out;
}

std::string resolve_job_id(const JobIdRule& rule, const ProcessFacts& facts) {
  if (!rule.enabled()) return {};
  if (rule.var == "procname_uid") return as_job_id(expand_job_name("%e.%u", facts, {}));
  if (rule.var == "nodelocal") return as_job_id(expand_job_name(rule.name, facts, {}));
  std::optional<std::string> v = facts.env ? facts.env(rule.var) : std::nullopt;
  const bool names_var = rule.name.find("%j") != std::string::npos;
  if (v && !v->empty()) return as_job_id(names_var ? expand_job_name(rule.name, facts, *v) : *v);
  return names_var ? std::string() : as_job_id(expand_job_name(rule.name, facts, {}));
}

std::string resolve_job_id(const JobIdRule& rule) {
  return rule.enabled() ? resolve_job_id(rule, this_process()) : std::string();
}

}  // namespace pfsnet
