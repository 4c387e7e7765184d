// The raw TCP baselines of pfsnet_bench (tcp_baseline.h).
#include "tcp_baseline.h"

#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

namespace pfsnet::bench {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

namespace {

int tcp_socket() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

sockaddr_in addr_of(const char* ip, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, ip, &sa.sin_addr);
  return sa;
}

bool read_full(int fd, void* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, static_cast<char*>(p) + got, n - got);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

bool write_full(int fd, const void* p, size_t n) {
  size_t off = 0;
  while (off < n) {
    ssize_t r = write(fd, static_cast<const char*>(p) + off, n - off);
    if (r <= 0) return false;
    off += static_cast<size_t>(r);
  }
  return true;
}

double median_us(std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

// Forked server: per connection, the first byte picks the mode: 'E' echo, 'P' echo that
// polls its socket, 'S' sink, 'R' source of 1 MiB writes.
pid_t TcpBaseline::start_server() const {
  int lfd = tcp_socket();
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa = addr_of(server.c_str(), port);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(lfd, 16) != 0) {
    std::perror("bench: tcp server bind");
    std::exit(1);
  }
  pid_t pid = fork();
  if (pid != 0) {
    close(lfd);
    return pid;
  }
  // Gone with the bench, however it ends (an exit on error left it holding the output).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (;;) {
    int fd = accept(lfd, nullptr, nullptr);
    if (fd < 0) continue;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char mode = 0;
    if (!read_full(fd, &mode, 1)) {
      close(fd);
      continue;
    }
    std::vector<char> buf(1 << 20);
    if (mode == 'E' || mode == 'P') {
      // 'P' polls: it never sleeps in read (see echo_rate).
      const int flags = mode == 'P' ? MSG_DONTWAIT : 0;
      for (;;) {
        ssize_t n = recv(fd, buf.data(), buf.size(), flags);
        if (n < 0 && errno == EAGAIN) continue;
        if (n <= 0 || !write_full(fd, buf.data(), static_cast<size_t>(n))) break;
      }
    } else if (mode == 'S') {
      while (read(fd, buf.data(), buf.size()) > 0) {
      }
    } else if (mode == 'R') {
      while (write_full(fd, buf.data(), buf.size())) {
      }
    }
    close(fd);
  }
}

int TcpBaseline::connect_mode(char mode) const {
  int fd = tcp_socket();
  sockaddr_in ca = addr_of(client.c_str(), 0);
  bind(fd, reinterpret_cast<sockaddr*>(&ca), sizeof(ca));
  sockaddr_in sa = addr_of(server.c_str(), port);
  for (int i = 0; i < 100; ++i) {
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
      write_full(fd, &mode, 1);
      return fd;
    }
    std::this_thread::sleep_for(10ms);  // the forked server may not listen yet
  }
  std::perror("bench: tcp connect");
  std::exit(1);
}

double TcpBaseline::pingpong_p50_us(int iters) const {
  int fd = connect_mode('E');
  char msg[64] = {};
  std::vector<double> t;
  for (int i = 0; i < iters + iters / 10; ++i) {
    auto s = SteadyClock::now();
    write_full(fd, msg, 64);
    read_full(fd, msg, 64);
    if (i >= iters / 10)
      t.push_back(std::chrono::duration<double, std::micro>(SteadyClock::now() - s).count());
  }
  close(fd);
  return median_us(t);
}

// fi_pingpong (fabtests) with the tcp provider and MSG endpoints, 64-byte messages: the
// round trip, twice its "usec/xfer" (two transfers per iteration). An average, not a p50.
double fi_pingpong_rtt_us(int iters, const std::string& server_addr, uint16_t port) {
  std::string common = "fi_pingpong -p tcp -e msg -S 64 -I " + std::to_string(iters);
  std::string server = common + " -B " + std::to_string(port);
  FILE* srv = popen((server + " 2>&1").c_str(), "r");
  std::this_thread::sleep_for(300ms);  // the server's listen; the client retries below too
  std::string out;
  for (int attempt = 0; attempt < 10 && out.find("usec/xfer") == std::string::npos; ++attempt) {
    std::string client = common + " -P " + std::to_string(port) + " " + server_addr;
    FILE* cl = popen((client + " 2>&1").c_str(), "r");
    out.clear();
    char buf[512];
    while (cl && fgets(buf, sizeof(buf), cl)) out += buf;
    if (cl) pclose(cl);
    if (out.find("usec/xfer") == std::string::npos) std::this_thread::sleep_for(200ms);
  }
  if (srv) pclose(srv);
  // The last line: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec.
  auto end = out.find_last_not_of('\n');
  auto start = out.rfind('\n', end);
  std::istringstream last(out.substr(start == std::string::npos ? 0 : start + 1));
  std::string col[8];
  for (auto& c : col) last >> c;
  if (out.find("usec/xfer") == std::string::npos || col[6].empty()) {
    std::fprintf(stderr, "bench: fi_pingpong failed: %s\n", out.c_str());
    return 0;
  }
  return 2 * std::stod(col[6]);
}

double TcpBaseline::echo_rate(double seconds, bool poll) const {
  int fd = connect_mode(poll ? 'P' : 'E');
  const int flags = poll ? MSG_DONTWAIT : 0;
  std::vector<char> out(64 * 64, 'x'), in(1 << 16);
  write_full(fd, out.data(), out.size());  // 64 in flight
  uint64_t bytes = 0;
  auto start = SteadyClock::now();
  auto end = start + std::chrono::duration_cast<SteadyClock::duration>(
                         std::chrono::duration<double>(seconds));
  size_t pending = 0;  // partial message bytes
  while (SteadyClock::now() < end) {
    ssize_t n = recv(fd, in.data(), in.size(), flags);
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) break;
    bytes += static_cast<uint64_t>(n);
    pending += static_cast<size_t>(n);
    size_t msgs = pending / 64;
    pending %= 64;
    if (msgs) write_full(fd, out.data(), msgs * 64);
  }
  double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
  close(fd);
  return double(bytes / 64) / secs;
}

double TcpBaseline::stream_mib_s(double seconds) const {
  int fd = connect_mode('S');
  std::vector<char> buf(1 << 20, 'x');
  uint64_t bytes = 0;
  auto start = SteadyClock::now();
  auto end = start + std::chrono::duration_cast<SteadyClock::duration>(
                         std::chrono::duration<double>(seconds));
  while (SteadyClock::now() < end && write_full(fd, buf.data(), buf.size())) bytes += buf.size();
  double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
  close(fd);
  return double(bytes) / (1 << 20) / secs;
}

double TcpBaseline::zerocopy_stream_mib_s(double seconds, double* copied) const {
  *copied = 0;
  int fd = connect_mode('S');
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) != 0) {
    close(fd);
    return 0;
  }
  constexpr int kRing = 8;
  constexpr size_t kBuf = 1 << 20;
  std::vector<std::vector<char>> bufs(kRing, std::vector<char>(kBuf, 'x'));
  std::vector<int64_t> last_call(kRing, -1);  // the send call whose completion frees it
  int64_t calls = 0, done = -1;               // send calls made; completed up to `done`
  uint64_t notes = 0, copied_notes = 0;
  // Reaps completions: each names a range of send calls [ee_info, ee_data].
  auto reap = [&](int timeout_ms) {
    pollfd p{fd, 0, 0};  // POLLERR is always reported
    if (poll(&p, 1, timeout_ms) <= 0) return;
    for (int k = 0; k < 1024; ++k) {
      char control[128];
      msghdr m{};
      m.msg_control = control;
      m.msg_controllen = sizeof(control);
      if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return;
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        auto* e = reinterpret_cast<sock_extended_err*>(CMSG_DATA(c));
        if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
        ++notes;
        if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED) ++copied_notes;
        done = std::max<int64_t>(done, e->ee_data);
      }
    }
  };
  uint64_t bytes = 0;
  auto start = SteadyClock::now();
  auto end = start + std::chrono::duration_cast<SteadyClock::duration>(
                         std::chrono::duration<double>(seconds));
  bool ok = true;
  for (int64_t i = 0; ok && SteadyClock::now() < end; ++i) {
    int b = static_cast<int>(i % kRing);
    // Bounded: a completion that never comes ends the run (2 s).
    for (int wait = 0; last_call[b] > done && wait < 200; ++wait) reap(10);
    if (last_call[b] > done) break;
    size_t off = 0;
    while (ok && off < kBuf) {
      ssize_t r = send(fd, bufs[b].data() + off, kBuf - off, MSG_ZEROCOPY);
      if (r < 0 && errno == ENOBUFS) {  // too many notifications queued: reap, send again
        reap(10);
        continue;
      }
      if (r <= 0) ok = false;
      if (r > 0) {
        off += static_cast<size_t>(r);
        last_call[b] = calls++;
      }
    }
    if (ok) bytes += kBuf;
    reap(0);
  }
  double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
  for (int wait = 0; done < calls - 1 && wait < 200; ++wait) reap(10);
  close(fd);
  *copied = notes ? double(copied_notes) / double(notes) : 0;
  return double(bytes) / (1 << 20) / secs;
}

}  // namespace pfsnet::bench
