#include "base/cpu_wait.h"

#include <dirent.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace pfsnet {

namespace {

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

bool to_i64(std::string_view w, int64_t& out) {
  auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), out);
  return ec == std::errc() && p == w.data() + w.size();
}

}  // namespace

std::optional<ThreadCpu> parse_schedstat(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string a, b, c;
  ThreadCpu t;
  if (!(in >> a >> b >> c) || !to_i64(a, t.run_ns) || !to_i64(b, t.wait_ns) ||
      !to_i64(c, t.slices) || t.run_ns < 0 || t.wait_ns < 0 || t.slices < 0)
    return std::nullopt;
  return t;
}

std::map<int, ThreadCpu> read_cpu_wait() {
  std::map<int, ThreadCpu> out;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    int64_t tid = 0;
    if (!to_i64(e->d_name, tid)) continue;
    auto text = slurp(std::string("/proc/self/task/") + e->d_name + "/schedstat");
    if (!text) continue;  // the thread ended meanwhile
    if (auto t = parse_schedstat(*text)) out[static_cast<int>(tid)] = *t;
  }
  ::closedir(d);
  return out;
}

std::string parse_cgroup_path(std::string_view text, bool* v2) {
  std::istringstream in{std::string(text)};
  std::string line, unified;
  while (std::getline(in, line)) {
    // "hierarchy-id:controllers:path"
    size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string ctrls = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (ctrls.empty()) {
      unified = path;
      continue;
    }
    std::istringstream cs(ctrls);
    std::string c;
    while (std::getline(cs, c, ','))
      if (c == "cpu") {
        if (v2) *v2 = false;
        return path;
      }
  }
  if (v2) *v2 = !unified.empty();
  return unified;
}

void parse_cgroup_cpu_stat(std::string_view text, CgroupCpu& c) {
  std::istringstream in{std::string(text)};
  std::string key, value;
  while (in >> key >> value) {
    int64_t v = 0;
    if (!to_i64(value, v)) continue;
    if (key == "nr_periods")
      c.periods = v;
    else if (key == "nr_throttled")
      c.throttled = v;
    else if (key == "throttled_time")  // v1: ns
      c.throttled_ns = v;
    else if (key == "throttled_usec")  // v2
      c.throttled_ns = v * 1000;
  }
}

void parse_cgroup_cpu_max(std::string_view text, CgroupCpu& c) {
  std::istringstream in{std::string(text)};
  std::string quota, period;
  if (!(in >> quota >> period)) return;
  int64_t q = -1, p = 0;
  if (quota != "max" && !to_i64(quota, q)) return;
  if (!to_i64(period, p)) return;
  c.quota_us = q;
  c.period_us = p;
}

std::optional<CgroupCpu> read_cgroup_cpu() {
  auto self = slurp("/proc/self/cgroup");
  if (!self) return std::nullopt;
  bool v2 = false;
  CgroupCpu c;
  c.path = parse_cgroup_path(*self, &v2);
  if (c.path.empty()) return std::nullopt;
  if (v2) {
    std::string dir = "/sys/fs/cgroup" + (c.path == "/" ? std::string() : c.path);
    auto stat = slurp(dir + "/cpu.stat");
    if (!stat) return std::nullopt;
    parse_cgroup_cpu_stat(*stat, c);
    if (auto max = slurp(dir + "/cpu.max")) parse_cgroup_cpu_max(*max, c);
    return c;
  }
  for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    std::string dir = mount + (c.path == "/" ? std::string() : c.path);
    auto stat = slurp(dir + "/cpu.stat");
    if (!stat) continue;
    parse_cgroup_cpu_stat(*stat, c);
    int64_t q = -1, p = 0;
    auto quota = slurp(dir + "/cpu.cfs_quota_us"), period = slurp(dir + "/cpu.cfs_period_us");
    if (quota && period) {
      std::istringstream qs(*quota), ps(*period);
      if (qs >> q && ps >> p) {
        c.quota_us = q;
        c.period_us = p;
      }
    }
    return c;
  }
  return std::nullopt;
}

CpuStarvation::Change CpuStarvation::sample(TimePoint now,
                                            const std::map<int, ThreadCpu>& threads) {
  if (!have_prev_ || now <= prev_at_) {
    have_prev_ = true;
    prev_ = threads;
    prev_at_ = now;
    return Change::kNone;
  }
  // Threads in both snapshots only: one that began or ended meanwhile has no delta.
  double wait_ns = 0;
  int64_t slices = 0;
  for (const auto& [tid, t] : threads)
    if (auto it = prev_.find(tid); it != prev_.end()) {
      wait_ns += double(std::max<int64_t>(0, t.wait_ns - it->second.wait_ns));
      slices += std::max<int64_t>(0, t.slices - it->second.slices);
    }
  const double seconds = std::chrono::duration<double>(now - prev_at_).count();
  const TimePoint began = prev_at_;
  prev_ = threads;
  prev_at_ = now;
  total_wait_ns_ += wait_ns;
  last_.wait_ms_per_s = wait_ns / 1e6 / seconds;
  // A thread that waited the whole second without running once has no slice: count one.
  last_.wait_per_slice_ms = wait_ns / 1e6 / double(std::max<int64_t>(slices, 1));
  last_.slices = slices;
  const double min_ms = std::chrono::duration<double, std::milli>(o_.min_wait_per_s).count();
  const double slice_ms = std::chrono::duration<double, std::milli>(o_.wait_per_slice).count();
  if (slice_ms <= 0) return Change::kNone;
  const bool bad = last_.wait_ms_per_s >= min_ms && last_.wait_per_slice_ms >= slice_ms;
  const bool fed = last_.wait_ms_per_s < min_ms / 3 || last_.wait_per_slice_ms < slice_ms / 3;
  recent_.push_back({wait_ns, seconds, slices});
  if (recent_.size() > kRecent) recent_.pop_front();
  if (!starved_) {
    if (!bad) {
      run_ = 0;
      return Change::kNone;
    }
    if (run_++ == 0) run_began_ = began;
    if (run_ < o_.bad_to_start) return Change::kNone;
    starved_ = true;
    since_ = run_began_;
    run_ = 0;
    return Change::kStarted;
  }
  run_ = fed ? run_ + 1 : 0;
  if (run_ < o_.good_to_end) return Change::kNone;
  starved_ = false;
  run_ = 0;
  lasted_ = now - since_;
  return Change::kEnded;
}

CpuWaitFigures CpuStarvation::mean() const {
  CpuWaitFigures f;
  double wait_ns = 0, seconds = 0;
  for (const Second& s : recent_) {
    wait_ns += s.wait_ns;
    seconds += s.seconds;
    f.slices += s.slices;
  }
  if (seconds <= 0) return f;
  f.wait_ms_per_s = wait_ns / 1e6 / seconds;
  f.wait_per_slice_ms = wait_ns / 1e6 / double(std::max<int64_t>(f.slices, 1));
  return f;
}

}  // namespace pfsnet
