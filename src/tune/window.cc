#include "tune/window.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "tune/text.h"
#include "tune/tune.h"

namespace pfsnet {

using namespace tune_text;

namespace {

// The `field`-th number (0-based) of a /proc/sys file; 0 when unreadable.
int64_t proc_number(const std::string& path, int field) {
  std::ifstream f(path);
  int64_t v = 0;
  for (int i = 0; i <= field; ++i)
    if (!(f >> v)) return 0;
  return v;
}

std::string proc_text(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  f >> s;
  return s;
}

// The sysctl line that sets the maximum of net.ipv4.tcp_rmem or tcp_wmem to `bytes`.
std::string sysctl_line(const char* key, double bytes) {
  const char* rest = std::string(key) == "net.ipv4.tcp_rmem" ? "4096 131072" : "4096 16384";
  // Rounded up to whole MiB.
  auto mib = static_cast<long long>(std::ceil(bytes / kMiB));
  return fmt("sysctl -w %s='%s %lld'", key, rest, mib << 20);
}

}  // namespace

HostTcp read_host_tcp(const std::string& proc_sys) {
  HostTcp h;
  h.tcp_rmem_max = proc_number(proc_sys + "/net/ipv4/tcp_rmem", 2);
  h.tcp_wmem_max = proc_number(proc_sys + "/net/ipv4/tcp_wmem", 2);
  h.rmem_max = proc_number(proc_sys + "/net/core/rmem_max", 0);
  h.wmem_max = proc_number(proc_sys + "/net/core/wmem_max", 0);
  h.congestion_control = proc_text(proc_sys + "/net/ipv4/tcp_congestion_control");
  h.netdev_max_backlog = proc_number(proc_sys + "/net/core/netdev_max_backlog", 0);
  std::ifstream f(proc_sys + "/net/ipv4/tcp_slow_start_after_idle");
  int v;
  if (f >> v) h.slow_start_after_idle = v;
  return h;
}

uint64_t read_backlog_drops(const std::string& softnet_stat) {
  std::ifstream f(softnet_stat);
  uint64_t sum = 0;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string processed, dropped;
    if (in >> processed >> dropped) sum += std::stoull(dropped, nullptr, 16);
  }
  return sum;
}

std::vector<WindowFinding> WindowWatch::update(const std::vector<ConnTcpSample>& now,
                                               double seconds) {
  std::unordered_map<std::string, TcpKernelInfo> next;
  std::vector<WindowFinding> out;
  for (const ConnTcpSample& s : now) {
    next[s.path] = s.k;
    auto it = last_.find(s.path);
    if (it == last_.end() || seconds <= 0) continue;
    const TcpKernelInfo& a = it->second;
    const TcpKernelInfo& b = s.k;
    if (b.busy_us < a.busy_us) continue;  // not the same socket's counters
    double busy = double(b.busy_us - a.busy_us) / 1e6;
    double rwnd = double(b.rwnd_limited_us - std::min(a.rwnd_limited_us, b.rwnd_limited_us)) / 1e6;
    double sndbuf =
        double(b.sndbuf_limited_us - std::min(a.sndbuf_limited_us, b.sndbuf_limited_us)) / 1e6;
    if (busy < min_busy_ * seconds || rwnd + sndbuf < min_limited_ * busy ||
        b.rtt_us < min_rtt_ms_ * 1000)
      continue;
    WindowFinding f;
    f.peer = s.peer;
    f.limited_share = (rwnd + sndbuf) / busy;
    f.rtt_ms = b.rtt_us / 1000.0;
    f.carried = double(b.bytes_sent - std::min(a.bytes_sent, b.bytes_sent)) / seconds;
    if (rwnd >= sndbuf) {
      f.limit = WindowLimit::kPeerReceiveWindow;
      f.window_bytes = b.snd_wnd;
    } else {
      // The kernel counts its bookkeeping in SO_SNDBUF too: about half is data.
      f.limit = WindowLimit::kSendBuffer;
      f.window_bytes = b.sndbuf / 2.0;
    }
    f.ceiling = f.rtt_ms > 0 ? f.window_bytes / (f.rtt_ms / 1000.0) : 0;
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const WindowFinding& o) { return o.peer == f.peer; });
    if (same == out.end()) {
      out.push_back(f);
    } else if (f.limited_share > same->limited_share) {
      *same = f;
    }
  }
  last_ = std::move(next);
  return out;
}

TuneProblem window_problem(const WindowFinding& f, double bdp_bytes, const HostTcp& host,
                           int64_t tx_buffer_size) {
  std::string what =
      f.limit == WindowLimit::kPeerReceiveWindow ? "the peer's receive window" : "the send buffer";
  std::string text =
      fmt("the path to %s is held back by %s %.0f%% of its busy time: it carries at most %s "
          "with a %s window at %.1f ms (carrying %s)",
          f.peer.c_str(), what.c_str(), 100 * f.limited_share, rate_text(f.ceiling).c_str(),
          bytes_text(f.window_bytes).c_str(), f.rtt_ms, rate_text(f.carried).c_str());
  // A buffer of twice the window: the kernel keeps its bookkeeping in the same budget.
  double need = bdp_bytes > 0 ? 2 * bdp_bytes : 4 * f.window_bytes;
  std::string cure;
  if (f.limit == WindowLimit::kPeerReceiveWindow) {
    cure =
        fmt("; on %s set lnet.rx_buffer_size = 0 (the kernel's autotuning) or at least %s, and "
            "net.ipv4.tcp_rmem's maximum to at least %s (%s)",
            f.peer.c_str(), bytes_text(need).c_str(), bytes_text(need).c_str(),
            sysctl_line("net.ipv4.tcp_rmem", need).c_str());
  } else if (tx_buffer_size > 0) {
    cure =
        fmt("; here lnet.tx_buffer_size = %lld fixes it: set 0 (the kernel's autotuning) or at "
            "least %s",
            static_cast<long long>(tx_buffer_size), bytes_text(need).c_str());
  } else {
    cure = fmt("; here net.ipv4.tcp_wmem's maximum is %s: set it to at least %s (%s)",
               bytes_text(double(host.tcp_wmem_max)).c_str(), bytes_text(need).c_str(),
               sysctl_line("net.ipv4.tcp_wmem", need).c_str());
  }
  if (bdp_bytes > 0) cure += fmt(" -- the path's BDP is %s", bytes_text(bdp_bytes).c_str());
  return TuneProblem{"tcp_window", f.peer, text + cure};
}

BufferCap buffer_cap(bool send, int64_t fixed_size, int64_t host_max) {
  if (fixed_size > 0)
    return {2.0 * double(fixed_size), fmt("lnet.%s_buffer_size = %lld", send ? "tx" : "rx",
                                          static_cast<long long>(fixed_size))};
  if (host_max > 0)
    return {double(host_max), fmt("net.ipv4.tcp_%smem's maximum of %s", send ? "w" : "r",
                                  bytes_text(double(host_max)).c_str())};
  return {};
}

std::vector<TuneProblem> host_window_problems(const HostTcp& host, int64_t tx_buffer_size,
                                              int64_t rx_buffer_size, double bdp_bytes,
                                              const std::string& peer) {
  std::vector<TuneProblem> v;
  if (!(bdp_bytes > 0)) return v;
  double need = 2 * bdp_bytes;
  std::string path = fmt("the path to %s has a BDP of %s, so a connection's buffers need %s",
                         peer.c_str(), bytes_text(bdp_bytes).c_str(), bytes_text(need).c_str());
  for (bool send : {true, false}) {
    int64_t fixed = send ? tx_buffer_size : rx_buffer_size;
    BufferCap cap = buffer_cap(send, fixed, send ? host.tcp_wmem_max : host.tcp_rmem_max);
    if (!(cap.bytes > 0) || cap.bytes >= need) continue;
    const char* which = send ? "send" : "receive";
    std::string text =
        fixed > 0
            ? fmt("%s fixes the %s buffers at %s: %s; set 0 (autotuning) or at least %s",
                  cap.what.c_str(), which, bytes_text(cap.bytes).c_str(), path.c_str(),
                  bytes_text(need / 2).c_str())
            : fmt("%s caps the %s buffers autotuning grows: %s (%s)", cap.what.c_str(), which,
                  path.c_str(),
                  sysctl_line(send ? "net.ipv4.tcp_wmem" : "net.ipv4.tcp_rmem", need).c_str());
    v.push_back({"host_tcp_buffers", "", text});
  }
  return v;
}

double loss_recovery_seconds(const std::string& cc, double bdp_bytes, double rtt_ms, double mss) {
  if (cc != "reno" || !(bdp_bytes > 0) || !(rtt_ms > 0) || !(mss > 0)) return 0;
  return bdp_bytes / mss / 2 * rtt_ms / 1000.0;
}

std::vector<TuneProblem> host_cc_problems(const HostTcp& host, double bdp_bytes, double rtt_ms,
                                          double mss, const std::string& peer) {
  double secs = loss_recovery_seconds(host.congestion_control, bdp_bytes, rtt_ms, mss);
  if (secs < kSlowRecoverySeconds) return {};
  return {{"host_tcp_cc", "",
           fmt("net.ipv4.tcp_congestion_control is %s, which regains a halved window one segment "
               "per round trip: after one lost segment the path to %s (BDP %s, RTT %.1f ms, "
               "segments of %.0f B) takes %.0f s to reach its rate again; set it to cubic (the "
               "kernel's default) or bbr (sysctl -w net.ipv4.tcp_congestion_control=cubic)",
               host.congestion_control.c_str(), peer.c_str(), bytes_text(bdp_bytes).c_str(), rtt_ms,
               mss, secs)}};
}

}  // namespace pfsnet
