// A node starved of CPU (issue 34, the seventh fault class): its threads are runnable but
// wait for a processor -- a cgroup quota (systemd's CPUQuota=, a container's limit) or
// processes of higher priority -- so every request it serves waits before it is read, and
// its peers see a slow path where there is a slow server. The kernel counts that wait per
// thread (/proc/self/task/*/schedstat: time on the CPU, time waiting on a run queue,
// timeslices run; a throttled cgroup's threads wait there too), and the cgroup's cpu.stat
// counts the periods its quota ran out.
//
// Measured (2026-11-26, this 2-core machine, a daemon answering 200 pings a second):
//   idle host                              11 ms of wait a second, 0.05 ms per timeslice
//   8 busy daemons of the quiet cluster    at most 91 ms a second, 0.11 ms per timeslice
//   8 busy loops at nice 0 beside it       45 ms a second, 0.2 ms per timeslice
//   8 busy loops at nice -10               130-240 ms, 1.2-2.0 ms (its pings fell by 40%)
//   a cgroup of 1 ms per 100 ms            350-680 ms, 1.9-3.7 ms
//   a cgroup of 10 ms per second           640-1860 ms, 3.3-12 ms
// So a second is starved when its threads waited at least `min_wait_per_s` in all and
// `wait_per_slice` on average each time they were woken; three such seconds in a row make
// the node starved, and five in a row with either figure below a third of its threshold
// end it.
//
// Thread safety: the parsers and CpuStarvation are plain values (their owner serialises);
// read_cpu_wait() and read_cgroup_cpu() read /proc and /sys.
#pragma once

#include <pfsnet/clock.h>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace pfsnet {

// One thread's counters from its schedstat ("run_ns wait_ns slices").
struct ThreadCpu {
  int64_t run_ns = 0, wait_ns = 0, slices = 0;
};
std::optional<ThreadCpu> parse_schedstat(std::string_view text);

// Every thread of this process, by thread id.
std::map<int, ThreadCpu> read_cpu_wait();

// The cgroup's CPU limit and how often it bit: cgroup v2's cpu.max and cpu.stat
// (nr_periods, nr_throttled, throttled_usec) or v1's cpu.cfs_quota_us, cpu.cfs_period_us
// and cpu.stat (throttled_time in ns).
struct CgroupCpu {
  std::string path;       // "/system.slice/pfsnetd.service"
  int64_t quota_us = -1;  // per period; -1: none
  int64_t period_us = 0;
  int64_t periods = 0, throttled = 0;
  int64_t throttled_ns = 0;
};
// The path of this process's CPU cgroup from /proc/self/cgroup's text: the v1 line whose
// controllers include "cpu", else the v2 line ("0::/path"). Empty: none.
std::string parse_cgroup_path(std::string_view proc_self_cgroup, bool* v2);
// Fills the counters from cpu.stat's text (v1 or v2 keys).
void parse_cgroup_cpu_stat(std::string_view text, CgroupCpu& c);
// "max 100000", "1000 100000": the v2 cpu.max.
void parse_cgroup_cpu_max(std::string_view text, CgroupCpu& c);
// This process's, where /sys/fs/cgroup shows it (not inside `ip netns exec`, which mounts a
// sysfs of its own over /sys); nullopt when it cannot be read or has no counters.
std::optional<CgroupCpu> read_cgroup_cpu();

struct CpuStarvationOptions {
  Duration min_wait_per_s = std::chrono::milliseconds(100);  // all threads' wait, a second
  Duration wait_per_slice = std::chrono::milliseconds(1);    // zero: never starved
  int bad_to_start = 3;                                      // starved seconds in a row
  int good_to_end = 5;                                       // and fed ones in a row
};

// What the node's threads waited over one sample: all of them together, per timeslice.
struct CpuWaitFigures {
  double wait_ms_per_s = 0;  // summed over the threads
  double wait_per_slice_ms = 0;
  int64_t slices = 0;
};

// The rule, fed a snapshot of every thread's counters once a second or so. A starved second
// needs both figures at their thresholds; a fed one has either below a third of it (the
// gap between them keeps a node at the edge from flapping).
class CpuStarvation {
 public:
  explicit CpuStarvation(CpuStarvationOptions o) : o_(o) {}

  enum class Change { kNone, kStarted, kEnded };
  // The change this sample made, if any.
  Change sample(TimePoint now, const std::map<int, ThreadCpu>& threads);

  bool starved() const { return starved_; }
  TimePoint since() const { return since_; }
  // The last sample's figures, and those of the last kRecent samples together.
  const CpuWaitFigures& last() const { return last_; }
  CpuWaitFigures mean() const;
  // How long the state that just ended lasted (valid after kEnded).
  Duration lasted() const { return lasted_; }
  double total_wait_s() const { return total_wait_ns_ / 1e9; }

 private:
  CpuStarvationOptions o_;
  std::map<int, ThreadCpu> prev_;
  TimePoint prev_at_{};
  bool have_prev_ = false;
  bool starved_ = false;
  int run_ = 0;  // bad seconds in a row (fed), or fed ones in a row (starved)
  TimePoint since_{}, run_began_{};
  Duration lasted_{};
  CpuWaitFigures last_;
  struct Second {
    double wait_ns, seconds;
    int64_t slices;
  };
  static constexpr size_t kRecent = 10;
  std::deque<Second> recent_;
  double total_wait_ns_ = 0;
};

}  // namespace pfsnet
