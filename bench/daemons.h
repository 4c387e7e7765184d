// pfsnetd processes for a benchmark: a fresh directory under /tmp holding one cluster key,
// each daemon started from a config whose [node] header (name, key, admin socket) is
// written here, ready once its admin socket appears (bounded), stopped with SIGTERM and
// reaped at the end, the directory removed. Threads: one (the benchmark's main thread).
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace pfsnet {

class BenchDaemons {
 public:
  // `what` names the directory: /tmp/pfsnet-<what>-XXXXXX.
  BenchDaemons(std::string pfsnetd, const std::string& what) : pfsnetd_(std::move(pfsnetd)) {
    std::string tmpl = "/tmp/pfsnet-" + what + "-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      std::perror("mkdtemp");
      std::exit(1);
    }
    dir_ = tmpl;
    std::ofstream(dir_ + "/key") << what << "-bench-cluster-key-0123456789";
    chmod((dir_ + "/key").c_str(), 0600);
  }
  ~BenchDaemons() {
    for (pid_t p : pids_) kill(p, SIGTERM);
    for (pid_t p : pids_) {
      int st;
      waitpid(p, &st, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  BenchDaemons(const BenchDaemons&) = delete;
  BenchDaemons& operator=(const BenchDaemons&) = delete;

  // Starts daemon `name`: its [node] header, then `node_lines` (more [node] keys), then
  // `rest` (its [[net]] and other sections). `wrapper`: a command it runs under (e.g. `ip
  // netns exec NS`, which execs it: the PID stays the daemon's).
  void start(const std::string& name, const std::string& node_lines, const std::string& rest,
             const std::vector<std::string>& wrapper = {}) {
    std::string cfg = dir_ + "/" + name + ".toml";
    std::ofstream(cfg) << "[node]\nname = \"" << name << "\"\ncluster_key_file = \"" << dir_
                       << "/key\"\nadmin_socket = \"" << socket(name) << "\"\n"
                       << node_lines << rest;
    std::vector<std::string> args = wrapper;
    for (std::string a :
         {pfsnetd_, std::string("--config"), cfg, std::string("--log-level"), std::string("warn")})
      args.push_back(a);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ)) {
      std::perror(("spawn " + pfsnetd_).c_str());
      std::exit(1);
    }
    pids_.push_back(pid);
    names_.push_back(name);
  }

  // Waits until every daemon started answers on its admin socket's path (at most 10 s).
  void wait_ready() const {
    using namespace std::chrono_literals;
    auto end = std::chrono::steady_clock::now() + 10s;
    for (const std::string& n : names_)
      for (int k = 0; k < 1000 && !std::filesystem::exists(socket(n)) &&
                      std::chrono::steady_clock::now() < end;
           ++k)
        std::this_thread::sleep_for(10ms);  // pfsnetd starting: bounded
  }

  std::string socket(const std::string& name) const { return dir_ + "/" + name + ".sock"; }
  size_t size() const { return pids_.size(); }

  // CPU seconds (user + system) daemon `name` has used so far (/proc/PID/stat); 0 when
  // it cannot be read.
  double cpu_seconds(const std::string& name) const {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] != name) continue;
      std::ifstream f("/proc/" + std::to_string(pids_[i]) + "/stat");
      std::string line;
      std::getline(f, line);
      size_t close = line.rfind(')');  // the command may hold spaces; the fields follow it
      if (close == std::string::npos) return 0;
      std::istringstream rest(line.substr(close + 2));
      std::string field;
      unsigned long long utime = 0, stime = 0;
      for (int k = 3; k <= 15 && rest >> field; ++k) {  // fields 14 and 15 (man 5 proc)
        if (k == 14) utime = std::stoull(field);
        if (k == 15) stime = std::stoull(field);
      }
      return double(utime + stime) / double(sysconf(_SC_CLK_TCK));
    }
    return 0;
  }

 private:
  std::string pfsnetd_, dir_;
  std::vector<pid_t> pids_;
  std::vector<std::string> names_;
};

}  // namespace pfsnet
