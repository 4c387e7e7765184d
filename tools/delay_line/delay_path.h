// DelayPath: a long path for kernel TCP, made and removed by a test or benchmark. Two
// network namespaces (their TCP buffers' maxima raised, as the WAN study raised them) joined
// by pfsnet_delay_line: 198.18.<subnet>.1 in the first, .2 in the second, every packet held
// `delay_ms` each way, optionally at a rate and with loss. Programs are run in a side's
// namespace through `ip netns exec` (in_ns). Everything goes when the object does: the
// line is stopped by PID and reaped, the namespaces deleted.
// Threads: one (the owner's). Needs root; error() says why the path is not there.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

extern char** environ;

namespace pfsnet {

struct DelayPathOptions {
  std::string delay_line;  // the pfsnet_delay_line binary
  double delay_ms = 25;    // one way: the RTT is twice it
  double rate_mbit = 0;    // 0: as fast as the line forwards
  double loss = 0;         // fraction of packets dropped, each way
  int mtu = 9000;
  bool gso = false;                          // hand TCP's segments over 64 KiB at a time
  int64_t tcp_mem_max = int64_t(256) << 20;  // net.ipv4.tcp_rmem/tcp_wmem maximum, bytes
  int subnet = 60;                           // 198.18.<subnet>.0/24
  std::string tag;                           // in the names; default: this process's PID
};

class DelayPath {
 public:
  explicit DelayPath(DelayPathOptions o) : o_(std::move(o)) {
    if (geteuid() != 0) {
      error_ = "needs root (network namespaces, TUN devices)";
      return;
    }
    std::string tag = o_.tag.empty() ? std::to_string(getpid() % 100000) : o_.tag;
    for (int i = 0; i < 2; ++i) {
      ns_[i] = std::string(i == 0 ? "pfsdlA" : "pfsdlB") + tag;
      dev_[i] = std::string(i == 0 ? "dla" : "dlb") + tag;
    }
    for (int i = 0; i < 2 && error_.empty(); ++i) {
      if (run({ip_path(), "netns", "add", ns_[i]}) != 0) {
        error_ = "ip netns add " + ns_[i] + " failed";
        break;
      }
      made_[i] = true;
      std::string mem = "4096 131072 " + std::to_string(o_.tcp_mem_max);
      if (run({ip_path(), "-n", ns_[i], "link", "set", "lo", "up"}) != 0 ||
          run({ip_path(), "netns", "exec", ns_[i], "sysctl", "-qw", "net.ipv4.tcp_rmem=" + mem,
               "net.ipv4.tcp_wmem=" + mem}) != 0)
        error_ = "setting up namespace " + ns_[i] + " failed";
    }
    if (!error_.empty()) return;
    std::vector<std::string> argv = {o_.delay_line,
                                     "--a",
                                     ns_[0] + ":" + dev_[0] + ":" + addr(0) + "/24",
                                     "--b",
                                     ns_[1] + ":" + dev_[1] + ":" + addr(1) + "/24",
                                     "--delay-ms",
                                     num(o_.delay_ms),
                                     "--rate-mbit",
                                     num(o_.rate_mbit),
                                     "--loss",
                                     num(o_.loss),
                                     "--mtu",
                                     std::to_string(o_.mtu)};
    if (o_.gso) argv.push_back("--gso");
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      error_ = "pipe failed";
      return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    std::vector<char*> args = cargs(argv);
    if (posix_spawn(&line_, args[0], &fa, nullptr, args.data(), environ) != 0) line_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    out_ = fds[0];
    if (line_ <= 0) {
      error_ = "cannot run " + o_.delay_line;
      return;
    }
    std::string first = read_line(std::chrono::seconds(10));
    if (first.rfind("delay line ready", 0) != 0) error_ = "the delay line did not start: " + first;
  }

  ~DelayPath() {
    if (line_ > 0) {
      kill(line_, SIGTERM);
      int st;
      // It stops within 100 ms of the signal; SIGKILL if it does not within 5 s.
      for (int i = 0; i < 500 && waitpid(line_, &st, WNOHANG) == 0; ++i) usleep(10000);
      if (waitpid(line_, &st, WNOHANG) == 0) {
        kill(line_, SIGKILL);
        waitpid(line_, &st, 0);
      }
    }
    if (out_ >= 0) close(out_);
    for (int i = 0; i < 2; ++i)
      if (made_[i]) run({ip_path(), "netns", "del", ns_[i]});  // the TUN device went with the line
  }
  DelayPath(const DelayPath&) = delete;
  DelayPath& operator=(const DelayPath&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& ns(int side) const { return ns_[side]; }
  std::string addr(int side) const {
    return "198.18." + std::to_string(o_.subnet) + "." + std::to_string(side + 1);
  }
  const DelayPathOptions& options() const { return o_; }
  // `argv` run in side's namespace (argv[0] of the result is iproute2's absolute path).
  std::vector<std::string> in_ns(int side, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {ip_path(), "netns", "exec", ns_[side]});
    return argv;
  }
  // iproute2's `ip` ("ip", for a PATH search, when none of the usual places has it).
  static std::string ip_path() {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
      if (access(p, X_OK) == 0) return p;
    return "ip";
  }
  // The line's counters now, a JSON line ({"a_to_b": {...}, "b_to_a": {...}}), or "".
  std::string counters() {
    if (line_ <= 0) return "";
    kill(line_, SIGUSR1);
    return read_line(std::chrono::seconds(5));
  }

  // Runs `argv` (PATH searched) and waits for it; returns its exit status (-1: did not run).
  static int run(std::vector<std::string> argv) {
    std::vector<char*> args = cargs(argv);
    pid_t pid;
    if (posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

 private:
  static std::vector<char*> cargs(std::vector<std::string>& argv) {
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    return a;
  }
  static std::string num(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
  }
  // One line of the line's output, waiting at most `limit`.
  std::string read_line(std::chrono::milliseconds limit) {
    auto end = std::chrono::steady_clock::now() + limit;
    std::string line;
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char b[4096];
      ssize_t n = read(out_, b, sizeof b);
      if (n <= 0) return "";
      buf_.append(b, size_t(n));
    }
  }

  DelayPathOptions o_;
  std::string error_;
  std::string ns_[2], dev_[2];
  bool made_[2] = {false, false};
  pid_t line_ = -1;
  int out_ = -1;
  std::string buf_;
};

}  // namespace pfsnet
