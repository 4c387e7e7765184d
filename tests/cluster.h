// Helpers for integration tests: real pfsnetd processes on loopback addresses, and an
// in-test client node with the real TCP transport. Every wait has a deadline; every
// process is killed by PID when its owner goes.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/sanitizers.h"
#include "net/net.h"
#include "rpc/node_core.h"
#include "rpc/rpc_engine.h"

namespace pfsnet::testing {

// Under a sanitizer the daemons' CPU, not an emulated link, bounds throughput (about
// 40 MiB/s of 64 KiB writes on this 2-core VM): a test asserts the shape of a performance
// result in the optimised build; the sanitized one checks that everything runs.
#if PFSNET_UNDER_ASAN || PFSNET_UNDER_TSAN
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

using namespace std::chrono_literals;

// A fresh directory, removed at the end.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/pfsnet-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

// The whole of a file ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The iproute2 `ip` binary ("" when missing).
inline std::string ip_bin() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (access(p, X_OK) == 0) return p;
  return "";
}

// A loopback block of addresses for this test process: 127.X.Y.1..254, X and Y derived
// from the PID so tests running in parallel never share an address.
inline std::string loopback(int host) {
  int pid = static_cast<int>(getpid());
  return "127." + std::to_string(20 + pid % 200) + "." + std::to_string((pid / 200) % 250) + "." +
         std::to_string(host);
}
inline Nid loopback_nid(int host) { return *Nid::parse(loopback(host) + "@tcp"); }

// A child process whose stdout+stderr are collected line by line.
class Process {
 public:
  Process(const std::vector<std::string>& argv) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      // The child dies with the test process, whatever happens to the test.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      execv(args[0], args.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    reader_ = std::thread([this] { read_loop(); });
  }
  ~Process() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      wait_exit(5s);
    }
    if (reader_.joinable()) reader_.join();
    if (fd_ >= 0) close(fd_);
  }

  pid_t pid() const { return pid_; }
  void kill(int sig) { ::kill(pid_, sig); }
  // SIGSTOP, returning once the process has really stopped.
  bool stop() {
    ::kill(pid_, SIGSTOP);
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(pid_), &info, WSTOPPED) == 0;
  }

  // Waits for the process to exit; returns its exit status (or -1 on timeout).
  int wait_exit(std::chrono::milliseconds limit) {
    if (exited_) return status_;
    int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
    pollfd p{pidfd, POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(limit.count()));
    close(pidfd);
    if (rc <= 0) return -1;
    int st = 0;
    waitpid(pid_, &st, 0);
    exited_ = true;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
  }

  // Waits until the process has closed its output (normally: it exited).
  bool wait_eof(std::chrono::milliseconds limit) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return eof_; });
  }

  // Waits until a line containing `text` has been printed (false when the process closed
  // its output first).
  bool wait_for_output(const std::string& text, std::chrono::milliseconds limit = 5000ms) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, limit, [&] { return eof_ || out_.find(text) != std::string::npos; });
    return out_.find(text) != std::string::npos;
  }
  std::string output() {
    std::lock_guard lk(mu_);
    return out_;
  }

 private:
  void read_loop() {
    char buf[4096];
    for (;;) {
      ssize_t n = read(fd_, buf, sizeof(buf));
      if (n <= 0) {
        std::lock_guard lk(mu_);
        eof_ = true;
        cv_.notify_all();
        break;
      }
      std::lock_guard lk(mu_);
      out_.append(buf, static_cast<size_t>(n));
      cv_.notify_all();
    }
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  bool eof_ = false;
  int status_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string out_;
};

// Polls `pred` every 50 ms until it holds or `limit` passes (bounded in count and time).
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  for (int i = 0; i < 2000 && std::chrono::steady_clock::now() < end; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);  // an observation's polling interval, not a sync
  }
  return pred();
}

// Runs a command to completion (bounded) and returns {exit status, output}.
inline std::pair<int, std::string> run(const std::vector<std::string>& argv,
                                       std::chrono::milliseconds limit = 30000ms) {
  Process p(argv);
  int st = p.wait_exit(limit);
  p.wait_eof(5000ms);
  return {st, p.output()};
}

struct DaemonOptions {
  int peer_credits = 8;
  int transaction_timeout = 50;
  std::string http;        // node.http, e.g. "127.0.0.2:9708"; empty: no HTTP
  std::string key_file;    // empty: the cluster's key
  std::string node_extra;  // TOML lines added to [node] (roles, mgs)
  std::string extra;       // TOML appended at the end (more sections)
  // The NI's net: "tcp" (sockets) or "o2ib" (libfabric, with its tcp provider: no RDMA
  // hardware needed).
  std::string net = "tcp";
  std::string provider = "tcp";  // o2ib only
  std::string binary;            // the pfsnetd to run; empty: this build's
};

// Options of an MGS (also a server) on loopback(2) and a client of it on loopback(3), for
// TwoDaemons: each with node.http on port 9708 where asked, both with `extra` TOML.
inline std::pair<DaemonOptions, DaemonOptions> mgs_and_client(bool mgs_http, bool client_http,
                                                              const std::string& extra = "") {
  DaemonOptions oa, ob;
  if (mgs_http) oa.http = loopback(2) + ":9708";
  oa.node_extra = "roles = [\"mgs\", \"server\"]\n";
  oa.extra = extra;
  if (client_http) ob.http = loopback(3) + ":9708";
  ob.node_extra = "roles = [\"client\"]\nmgs = [\"" + loopback(2) + "@tcp\"]\n";
  ob.extra = extra;
  return {oa, ob};
}

// A pfsnetd on one loopback NID, started and ready (its admin socket answers).
class Daemon {
 public:
  Daemon(const TempDir& dir, int host, const std::string& key_file, DaemonOptions o = {}) {
    nid_ = *Nid::parse(loopback(host) + "@" + o.net);
    name_ = "n" + std::to_string(host);
    socket_ = dir.file(name_ + ".sock");
    std::string cfg = dir.file(name_ + ".toml");
    write_file(cfg, "[node]\nname = \"" + name_ + "\"\ncluster_key_file = \"" +
                        (o.key_file.empty() ? key_file : o.key_file) + "\"\nadmin_socket = \"" +
                        socket_ + "\"\nhttp = \"" + o.http + "\"\n" + o.node_extra +
                        "\n[[net]]\nnid = \"" + nid_.to_string() + "\"\n" +
                        (nid_.is_verbs() ? "provider = \"" + o.provider + "\"\n" : "") +
                        "[lnet]\npeer_credits = " + std::to_string(o.peer_credits) +
                        "\ntransaction_timeout = " + std::to_string(o.transaction_timeout) + "\n" +
                        o.extra);
    proc_ = std::make_unique<Process>(std::vector<std::string>{
        o.binary.empty() ? std::string(PFSNETD_BIN) : o.binary, "--config", cfg});
    ready_ = proc_->wait_for_output("pfsnetd started", 5000ms);
  }
  bool ready() const { return ready_; }
  const Nid& nid() const { return nid_; }
  const std::string& socket() const { return socket_; }
  Process& process() { return *proc_; }

 private:
  Nid nid_;
  std::string name_, socket_;
  std::unique_ptr<Process> proc_;
  bool ready_ = false;
};

// The last line of a command's output, parsed as JSON (the CLI's --json answer).
inline nlohmann::json last_json_line(const std::string& out) {
  auto end = out.find_last_not_of('\n');
  auto start = out.rfind('\n', end);
  return nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end - start));
}

// The count of a `diag rpc --json` statistic over its `granularity` intervals; 0 for a
// statistic the reply left out (it had no record).
inline int64_t total(const nlohmann::json& stat, const char* granularity = "second") {
  int64_t n = 0;
  if (stat.is_object() && stat.contains(granularity))
    for (const nlohmann::json& i : stat[granularity]) n += i["count"].get<int64_t>();
  return n;
}

// Polls `diag rpc all --json` of the daemon at `socket` until `done(reply)` (the daemon
// processes its raw buffers once a second); bounded in count and time.
inline nlohmann::json diag_until(const std::string& socket,
                                 const std::function<bool(const nlohmann::json&)>& done) {
  nlohmann::json r;
  auto limit = std::chrono::steady_clock::now() + 10s;
  for (int i = 0; i < 200 && std::chrono::steady_clock::now() < limit; ++i) {
    auto [rc, out] = run({PFSNET_BIN, "--socket", socket, "diag", "rpc", "all", "--json"});
    if (rc != 0) return nlohmann::json();
    r = last_json_line(out);
    if (done(r)) return r;
    std::this_thread::sleep_for(100ms);  // next poll of the once-a-second processing
  }
  return r;
}

// How many requests of `type` the daemon at `socket` has run (its execution statistics),
// read once the statistics have been processed twice more after they reached `at_least`:
// a second run of a request would show by then. -1 if they never reach it.
inline int64_t executions(const std::string& socket, const std::string& type, int64_t at_least) {
  auto count =
      [&](const nlohmann::json& r) -> std::pair<int64_t, int64_t> {  // (runs, newest second)
    int64_t n = 0, newest = 0;
    for (const nlohmann::json& m : r.value("messages", nlohmann::json::array())) {
      if (m["type"] != type) continue;
      n += total(m["execution"]);
      for (const nlohmann::json& i : m["execution"].value("second", nlohmann::json::array()))
        newest = std::max(newest, i["start"].get<int64_t>());
    }
    return {n, newest};
  };
  nlohmann::json first =
      diag_until(socket, [&](const nlohmann::json& r) { return count(r).first >= at_least; });
  const auto seen = count(first);  // no structured binding: clang cannot capture one
  const int64_t newest = seen.second;
  if (seen.first < at_least) return -1;
  nlohmann::json later =
      diag_until(socket, [&](const nlohmann::json& r) { return count(r).second >= newest + 2; });
  return count(later).first;
}

// A daemon's reply cache figures (diag rpc --json: reply_cache); null when not answered.
inline nlohmann::json reply_cache(const std::string& socket) {
  auto [rc, out] = run({PFSNET_BIN, "--socket", socket, "diag", "rpc", "message", "--json"});
  return rc == 0 ? last_json_line(out)["reply_cache"] : nlohmann::json();
}

// Two daemons (hosts 2 and 3) sharing a fresh cluster key: the usual test cluster.
struct TwoDaemons {
  explicit TwoDaemons(DaemonOptions oa = {}, DaemonOptions ob = {})
      : key(write_key(dir)), a(dir, 2, key, oa), b(dir, 3, key, ob) {}
  static std::string write_key(const TempDir& d) {
    std::string k = d.file("cluster.key");
    write_file(k, "two-daemons-test-cluster-key-0001", 0600);
    return k;
  }
  bool ready() const { return a.ready() && b.ready(); }
  TempDir dir;
  std::string key;
  Daemon a, b;
};

// The test process as a cluster node: the node core pfsnetd runs (rpc/node_core.h) over
// real TCP sockets, without a health monitor.
class ClientNode {
 public:
  // `reconnect`: the reconnect backoff's interval, fixed (lnet.min/max_reconnect_ms); 0: the
  // defaults.
  ClientNode(Nid nid, std::string key, int peer_credits = 8, int64_t max_in_flight = 8,
             Duration timeout = 30s, Duration reconnect = Duration::zero())
      : core_(options(nid, std::move(key), peer_credits, max_in_flight, timeout, reconnect)) {
    start_status_ = core_.start(50ms);
  }
  ~ClientNode() { core_.stop(); }
  Status start_status() const { return start_status_; }
  RpcEngine& rpc() { return core_.rpc(); }
  Net& net() { return core_.net(); }

 private:
  static NodeCoreOptions options(Nid nid, std::string key, int peer_credits, int64_t max_in_flight,
                                 Duration timeout, Duration reconnect) {
    NodeCoreOptions o;
    if (reconnect > Duration::zero())
      o.cfg.lnet.min_reconnect_ms = o.cfg.lnet.max_reconnect_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(reconnect).count();
    o.cfg.nets.push_back(NetConfig{nid});
    o.cfg.lnet.peer_credits = peer_credits;
    o.cfg.lnet.transaction_timeout =
        std::chrono::duration_cast<std::chrono::seconds>(timeout).count();
    o.cfg.rpc.max_rpcs_in_flight = max_in_flight;
    o.cfg.rpc.workers = 1;
    o.transport.cluster_key = std::move(key);
    o.health = false;
    return o;
  }
  NodeCore core_;
  Status start_status_;
};

// Counts async completions; wait() is bounded.
class Completions {
 public:
  void add(RpcReply&& r) {
    std::lock_guard lk(mu_);
    replies_.push_back(std::move(r));
    cv_.notify_all();
  }
  bool wait_for(size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return replies_.size() >= n; });
  }
  std::vector<RpcReply> take() {
    std::lock_guard lk(mu_);
    return std::move(replies_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RpcReply> replies_;
};

}  // namespace pfsnet::testing
