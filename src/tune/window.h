// The TCP window of each path, as the kernel sees it (the LNET WAN study: the BDP rule applies to
// TCP's buffers as much as to RPCs in flight). Two judgements, pure functions of numbers:
//
// WindowWatch: from two readings of each connection's TCP_INFO an interval apart, whether
// the connection spent most of its busy time held back by a window -- the peer's receive
// window (rwnd-limited) or its own send buffer (sndbuf-limited) -- rather than by the
// network. Such a path carries at most window / RTT, whatever the credits say; the
// finding names that ceiling and the cure.
//
// host_cc_problems: whether the host's congestion control regains a long path's window
// after a loss within seconds (Reno needs a round trip per segment of it).
//
// host_window_problems: whether the host's TCP settings (net.ipv4.tcp_rmem/tcp_wmem
// maxima, and lnet.rx_buffer_size/tx_buffer_size when set) leave room for a window of
// 2 x BDP on each path whose BDP is known: the kernel's autotuning never grows a buffer
// past them, and it takes a buffer of about twice the window it advertises.
//
// Threads: WindowWatch is a plain value (the caller serialises); the functions are pure.
#pragma once

#include <pfsnet/ni_info.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace pfsnet {

struct TuneProblem;

// The host's TCP settings (the WAN study's listing), read from /proc/sys. 0: unknown.
struct HostTcp {
  int64_t tcp_rmem_max = 0, tcp_wmem_max = 0;  // third field of net.ipv4.tcp_rmem / tcp_wmem
  int64_t rmem_max = 0, wmem_max = 0;          // net.core.rmem_max / wmem_max
  std::string congestion_control;              // net.ipv4.tcp_congestion_control
  int slow_start_after_idle = -1;              // net.ipv4.tcp_slow_start_after_idle
  int64_t netdev_max_backlog = 0;              // net.core.netdev_max_backlog
};
// Reads them under `proc_sys` (tests pass a directory of their own).
HostTcp read_host_tcp(const std::string& proc_sys = "/proc/sys");
// Packets the receive backlog queues dropped since boot, summed over the CPUs (the second
// column of /proc/net/softnet_stat, hexadecimal); 0 when unreadable.
uint64_t read_backlog_drops(const std::string& softnet_stat = "/proc/net/softnet_stat");

// The TCP connection that carries a path to `peer` (the peer node's name), read now.
struct ConnTcpSample {
  std::string path;  // names the path ("local -> peer NID"): its counters are compared
  std::string peer;
  TcpKernelInfo k;
};

enum class WindowLimit { kNone, kPeerReceiveWindow, kSendBuffer };

struct WindowFinding {
  std::string peer;
  WindowLimit limit = WindowLimit::kNone;
  double limited_share = 0;  // of the busy time, held back by the window
  double window_bytes = 0;   // the window that held it back
  double rtt_ms = 0;         // the kernel's smoothed RTT
  double ceiling = 0;        // bytes/s: window / RTT
  double carried = 0;        // bytes/s sent over the interval
};

class WindowWatch {
 public:
  // A connection counts as held back when it was busy (sending) at least `min_busy_share`
  // of the interval and a window held it back at least `min_limited_share` of that, on a
  // path of at least `min_rtt_ms`: below it a full window is a receiver that does not
  // read fast enough (the server), not a window too small for the path.
  explicit WindowWatch(double min_busy_share = 0.2, double min_limited_share = 0.5,
                       double min_rtt_ms = 1.0)
      : min_busy_(min_busy_share), min_limited_(min_limited_share), min_rtt_ms_(min_rtt_ms) {}

  // `now`: every path's TCP connection, `seconds` after the previous call. Returns the
  // paths held back by a window over the interval (one per peer: the most held back). A
  // path first seen now, or whose counters went back (a new connection), is only
  // remembered.
  std::vector<WindowFinding> update(const std::vector<ConnTcpSample>& now, double seconds);

 private:
  double min_busy_, min_limited_, min_rtt_ms_;
  std::unordered_map<std::string, TcpKernelInfo> last_;
};

// The problem (code "tcp_window") a finding makes, with its ceiling and its cure;
// `bdp_bytes` (0: unknown) sizes the cure, `host` and `tx_buffer_size` say what holds this
// node's send buffers.
TuneProblem window_problem(const WindowFinding& f, double bdp_bytes, const HostTcp& host,
                           int64_t tx_buffer_size);

// What a connection's send (`send`) or receive buffer can grow to: twice a fixed size
// (lnet.tx_buffer_size / rx_buffer_size: the kernel doubles it), else the host's
// net.ipv4.tcp_wmem / tcp_rmem maximum; 0 bytes when neither is known. `what` names the
// setting ("lnet.tx_buffer_size = 262144", "net.ipv4.tcp_wmem's maximum of 4.0 MiB").
struct BufferCap {
  double bytes = 0;
  std::string what;
};
BufferCap buffer_cap(bool send, int64_t fixed_size, int64_t host_max);

// Problems (code "host_tcp_buffers", peer empty) when this host's settings cap a
// connection's window below what the paths need: `bdp_bytes` is the largest BDP of any
// path, `peer` the one that has it.
std::vector<TuneProblem> host_window_problems(const HostTcp& host, int64_t tx_buffer_size,
                                              int64_t rx_buffer_size, double bdp_bytes,
                                              const std::string& peer);

// How long congestion control `cc` takes to bring a path back to its rate after one lost
// segment halves the window: Reno adds one segment per round trip, so BDP / MSS / 2
// round trips (at 50 ms and 1 Gbit/s with 9000-byte packets, 17 s; with 1500, 107 s).
// CUBIC (the kernel's default), BBR and the other high-speed controls regain a long
// path's window in a few seconds or do not halve it: 0. 0 when anything is unknown.
double loss_recovery_seconds(const std::string& cc, double bdp_bytes, double rtt_ms, double mss);
// A recovery this long or longer makes a problem: on a long path every loss costs tens of
// seconds at a fraction of the rate.
inline constexpr double kSlowRecoverySeconds = 10;

// The problem (code "host_tcp_cc", peer empty) when the host's congestion control takes
// kSlowRecoverySeconds or more to recover from one loss on the path to `peer` (BDP
// `bdp_bytes`, TCP's RTT `rtt_ms`, segments of `mss` bytes), with the cure; none else.
std::vector<TuneProblem> host_cc_problems(const HostTcp& host, double bdp_bytes, double rtt_ms,
                                          double mss, const std::string& peer);

}  // namespace pfsnet
