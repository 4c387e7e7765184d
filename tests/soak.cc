// pfsnet_soak: a cluster under mixed load while random faults are injected from outside
// pfsnet, checked RPC by RPC (issue 15 item 5).
//
//   pfsnet_soak [--seconds N] [--seed S] [--threads T] [--json]
//
// The cluster: two soak servers (this binary's `serve` mode: a libpfsnet Node whose
// SOAK_WRITE runs once and reports any second run of a request as a DUPLICATE line -- also
// one run again after a kill, as the ids that ran are kept in a file shared by the server's
// runs -- and whose SOAK_READ answers a seeded pattern) and two pfsnetd daemons (PING echo,
// BRW_READ, BRW_WRITE); one of each on loopback (@tcp), one of each in a network namespace behind a
// veth (@tcp1, 198.19.N.0/24). The client is this process: a Node with an NI on each net,
// T threads each calling one RPC at a time, every reply checked byte for byte against its
// request.
// The faults, one at a time, each held 1-3 s: SIGKILL a server (restarted after the
// hold), SIGSTOP it (SIGCONT after), the veth down (up after), the veth throttled by tbf
// (queueing delay), nftables dropping 10 % of the client's packets, garbage connections
// (random bytes, a frame header with absurd lengths, a silent connection) to a server's
// port, a daemon's config rewritten and reloaded with SIGHUP.
// Once, after 5 s, one soak server is killed for 12 s and the client's connects to it are
// counted each second (reconnect backoff: at most 3 a second in its last 3 seconds).
// It passes when every RPC completed or failed with a named error within its timeout
// (+1 s), none failed NOT_FOUND (a starting server's "no handler": issue 38), none was a
// write reported failed that may have run (a reply not kept, OUTCOME_UNKNOWN of a live
// server, refused over the reply window: issue 67) -- OUTCOME_UNKNOWN for a copy that may
// have reached a server before its restart is the truth, counted apart -- the client backed
// off, no reply differed from what its request asked for, no request ran twice on one server
// (across its restarts too), no call is still
// out at the end (lost), every server's memory and descriptors stayed within bounds, and every
// server answers at the end. It prints the totals; exit 0 on pass, 1 on failure, 77 when it cannot
// run (not root, no netns). Needs root (network namespaces, tc, nftables).
#include "soak.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pfsnet/node.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/log.h"
#include "cluster.h"
#include "rpc/ping.h"
#include "wire/frame.h"

namespace pfsnet::testing {
namespace {

using SteadyClock = std::chrono::steady_clock;

// ---- the driver ----

struct Server {
  std::string name;
  bool daemon;     // pfsnetd (else a soak server)
  std::string ns;  // network namespace ("": the root one)
  Nid nid;
  std::string config;
  std::unique_ptr<Process> proc;
  int incarnations = 0;
  int duplicates = 0;  // DUPLICATE lines of earlier incarnations
  long max_rss_kb = 0, max_fds = 0;
};

long proc_rss_kb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}
long proc_fds(pid_t pid) {
  std::error_code ec;
  long n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}
int count_lines(const std::string& out, const std::string& prefix) {
  int n = 0;
  for (size_t at = out.find(prefix); at != std::string::npos; at = out.find(prefix, at + 1)) ++n;
  return n;
}

class Soak {
 public:
  Soak(int seconds, uint32_t seed, int threads, long max_rss_mib)
      : seconds_(seconds), threads_(threads), max_rss_mib_(max_rss_mib), rng_(seed), seed_(seed) {}
  ~Soak() {
    for (Server& s : servers_) s.proc.reset();  // SIGKILL by PID, reaped
    if (!ns_.empty()) sh({ip_, "netns", "del", ns_});
  }

  // Returns the exit code.
  int run(bool json_out) {
    if (geteuid() != 0 || ip_.empty()) {
      std::printf("soak: skipped (needs root and iproute2)\n");
      return 77;
    }
    if (!setup()) return 1;
    load_and_faults();
    return report(json_out);
  }

 private:
  bool sh(std::vector<std::string> argv) {
    auto [rc, out] = pfsnet::testing::run(argv, 10000ms);
    if (rc != 0)
      std::fprintf(stderr, "soak: %s failed (%d): %s\n", argv[0].c_str(), rc, out.c_str());
    return rc == 0;
  }
  bool in_ns(std::vector<std::string> argv) {
    argv.insert(argv.begin(), {ip_, "netns", "exec", ns_});
    return sh(std::move(argv));
  }

  bool setup() {
    int n = static_cast<int>(getpid() % 200) + 20;
    subnet_ = "198.19." + std::to_string(n) + ".";
    std::string tag = std::to_string(getpid() % 100000);
    ns_ = "soak" + tag;
    host_if_ = "sh" + tag;
    ns_if_ = "sn" + tag;
    if (!sh({ip_, "netns", "add", ns_})) {
      ns_.clear();
      return false;
    }
    bool ok =
        sh({ip_, "link", "add", host_if_, "type", "veth", "peer", "name", ns_if_, "netns", ns_}) &&
        sh({ip_, "addr", "add", subnet_ + "1/24", "dev", host_if_}) &&
        sh({ip_, "link", "set", host_if_, "up"}) &&
        sh({ip_, "-n", ns_, "addr", "add", subnet_ + "2/24", "dev", ns_if_}) &&
        sh({ip_, "-n", ns_, "addr", "add", subnet_ + "3/24", "dev", ns_if_}) &&
        sh({ip_, "-n", ns_, "link", "set", ns_if_, "up"}) &&
        sh({ip_, "-n", ns_, "link", "set", "lo", "up"});
    for (int i = 0; ok && i < 100; ++i) {  // carrier on the new veth: bounded wait (5 s)
      auto [rc, out] = pfsnet::testing::run({ip_, "link", "show", "dev", host_if_}, 5000ms);
      if (rc == 0 && out.find("LOWER_UP") != std::string::npos) break;
      std::this_thread::sleep_for(50ms);
    }
    if (!ok) return false;
    key_ = dir_.file("cluster.key");
    write_file(key_, "pfsnet-soak-test-cluster-key-0001", 0600);
    std::string exe = std::filesystem::read_symlink("/proc/self/exe");
    servers_.push_back({"s1", false, "", loopback_nid(10), "", nullptr});
    servers_.push_back({"d1", true, "", loopback_nid(11), "", nullptr});
    servers_.push_back({"s2", false, ns_, *Nid::parse(subnet_ + "2@tcp1"), "", nullptr});
    servers_.push_back({"d2", true, ns_, *Nid::parse(subnet_ + "3@tcp1"), "", nullptr});
    exe_ = exe;
    for (Server& s : servers_) {
      s.config = dir_.file(s.name + ".toml");
      write_config(s, 8);
      if (!start(s)) return false;
    }
    Config cfg;
    cfg.node.name = "soak-client";
    cfg.nets.push_back({loopback_nid(1), 7988});
    cfg.nets.push_back({*Nid::parse(subnet_ + "1@tcp1"), 7988});
    cfg.lnet.transaction_timeout = kTimeoutS;
    cfg.lnet.recovery_interval = 1;
    auto node = Node::start(cfg, "pfsnet-soak-test-cluster-key-0001");
    if (!node.ok()) {
      std::fprintf(stderr, "soak: client: %s\n", node.status().to_string().c_str());
      return false;
    }
    client_ = std::move(*node);
    return true;
  }

  void write_config(const Server& s, int peer_credits) {
    write_file(
        s.config,
        "[node]\nname = \"" + s.name + "\"\ncluster_key_file = \"" + key_ +
            "\"\nadmin_socket = \"" + dir_.file(s.name + ".sock") + "\"\n[[net]]\nnid = \"" +
            s.nid.to_string() + "\"\n[lnet]\ntransaction_timeout = " + std::to_string(kTimeoutS) +
            "\nrecovery_interval = 1\npeer_credits = " + std::to_string(peer_credits) + "\n");
  }

  bool start(Server& s) {
    if (s.proc) {
      s.duplicates += count_lines(s.proc->output(), "DUPLICATE ");
      s.proc.reset();
    }
    std::vector<std::string> argv;
    if (!s.ns.empty()) argv = {ip_, "netns", "exec", s.ns};
    if (s.daemon) {
      argv.insert(argv.end(), {PFSNETD_BIN, "--config", s.config});
    } else {
      argv.insert(argv.end(), {exe_, "serve", "--config", s.config});
    }
    s.proc = std::make_unique<Process>(argv);
    ++s.incarnations;
    bool ok = s.proc->wait_for_output(s.daemon ? "pfsnetd started" : "soak server ready", 10000ms);
    if (!ok)
      std::fprintf(stderr, "soak: %s did not start: %s\n", s.name.c_str(),
                   s.proc->output().c_str());
    return ok;
  }

  // ---- load ----

  struct Tally {
    std::mutex mu;
    uint64_t rpcs = 0, ok = 0, mismatched = 0, late = 0, unnamed = 0;
    // NOT_FOUND: every type the soak sends is served by its target, so this is a starting
    // server's answer before its handlers were in (issue 38) -- a permanent error its
    // client does not resend.
    uint64_t not_found = 0;
    uint64_t reply_lost = 0;  // "reply not kept", OUTCOME_UNKNOWN, refused over the window
    // OUTCOME_UNKNOWN for a copy that may have reached a server before its restart (its
    // earlier run may have run it): the truth, not a lost reply.
    uint64_t unknown_after_restart = 0;
    std::map<std::string, uint64_t> failures;    // "CODE (HEALTH_KIND)" -> count
    std::map<std::string, std::string> example;  // "CODE (HEALTH_KIND)" -> a message
    double max_failed_s = 0;
  };

  void load_thread(int t) {
    std::mt19937_64 rng(seed_ * 7919 + static_cast<uint64_t>(t));
    Server& target = servers_[static_cast<size_t>(t) % servers_.size()];
    Nid dst = target.nid;
    bool daemon = target.daemon;
    while (!stop_load_) {
      uint64_t id = next_id_.fetch_add(1);
      size_t size = rng() % 4 == 0 ? 0 : rng() % kMaxBulk;
      uint32_t type;
      Buffer payload;
      BulkData bulk;
      Buffer expect;  // the reply's bulk
      int op = static_cast<int>(rng() % 2);
      if (!daemon) {
        Buffer p(16);
        uint32_t s32 = static_cast<uint32_t>(size), seed = static_cast<uint32_t>(rng());
        std::memcpy(p.data(), &id, 8);
        std::memcpy(p.data() + 8, &s32, 4);
        std::memcpy(p.data() + 12, &seed, 4);
        payload = std::move(p);
        if (op == 0) {
          type = kSoakWrite;
          expect = soak_pattern(size, seed ^ 0x5a5a);
          bulk = make_bulk(Buffer::copy_of(expect.span()));
        } else {
          type = kSoakRead;
          expect = soak_pattern(size, seed);
        }
      } else if (op == 0) {
        type = kMsgPing;  // echo: the reply's bulk is the request's
        expect = soak_pattern(size, static_cast<uint32_t>(id));
        bulk = make_bulk(Buffer::copy_of(expect.span()));
      } else {
        type = kMsgBrwRead;
        payload = ping_payload(static_cast<uint32_t>(size));
        expect = make_ping_pattern(size);
      }
      Buffer sent_payload = Buffer::copy_of(payload.span());
      CallOptions co;
      co.timeout = std::chrono::seconds(kTimeoutS);
      co.reply_bulk = size;
      auto t0 = SteadyClock::now();
      in_call_since_[t].store(t0.time_since_epoch().count());
      RpcReply r = client_->call(dst, type, std::move(payload), bulk, co);
      in_call_since_[t].store(0);
      double took = std::chrono::duration<double>(SteadyClock::now() - t0).count();
      std::lock_guard lk(tally_.mu);
      ++tally_.rpcs;
      if (took > kTimeoutS + 1.0) ++tally_.late;
      if (r.status.ok()) {
        bool same_payload = daemon || (r.payload.size() == sent_payload.size() &&
                                       std::memcmp(r.payload.data(), sent_payload.data(),
                                                   sent_payload.size()) == 0);
        bool same_bulk =
            r.bulk.size() == expect.size() &&
            (expect.empty() || std::memcmp(r.bulk.data(), expect.data(), expect.size()) == 0);
        if (same_payload && same_bulk) {
          ++tally_.ok;
        } else {
          if (tally_.mismatched++ < 5)
            std::fprintf(stderr, "soak: MISMATCH %s type %u id %llu: %zu bytes back, %zu asked\n",
                         target.name.c_str(), type, static_cast<unsigned long long>(id),
                         r.bulk.size(), expect.size());
        }
      } else {
        std::string kind = std::string(code_name(r.status.code())) +
                           (r.status.health_kind() != HealthKind::kNone
                                ? " (" + std::string(health_kind_name(r.status.health_kind())) + ")"
                                : "");
        if (tally_.failures[kind]++ == 0) tally_.example[kind] = r.status.message();
        if (r.status.message().empty() || r.status.code() == Code::kInternal) ++tally_.unnamed;
        if (r.status.code() == Code::kNotFound) ++tally_.not_found;
        // A request whose reply the server could not give again, or that it refused over
        // its window: a write that ran reported failed (issue 67). Never, from a correct
        // client.
        if (r.status.code() == Code::kOutcomeUnknown &&
            r.status.message().find("before it started") != std::string::npos)
          ++tally_.unknown_after_restart;
        else if (r.status.code() == Code::kOutcomeUnknown ||
                 r.status.message().find("ran already") != std::string::npos ||
                 r.status.message().find("not acknowledged") != std::string::npos)
          ++tally_.reply_lost;
        tally_.max_failed_s = std::max(tally_.max_failed_s, took);
      }
    }
  }

  // ---- faults ----

  std::map<std::string, int> faults_;
  void fault(const std::string& name) {
    ++faults_[name];
    if (getenv("SOAK_VERBOSE")) std::fprintf(stderr, "soak: fault %s\n", name.c_str());
  }

  void hold(double seconds) {
    auto until = SteadyClock::now() + std::chrono::duration<double>(seconds);
    while (SteadyClock::now() < until) {
      sample();
      std::this_thread::sleep_for(100ms);  // the fault's duration: sampling as it lasts
    }
  }

  void sample() {
    for (Server& s : servers_) {
      if (!s.proc) continue;
      s.max_rss_kb = std::max(s.max_rss_kb, proc_rss_kb(s.proc->pid()));
      s.max_fds = std::max(s.max_fds, proc_fds(s.proc->pid()));
    }
  }

  void garbage(const Server& s) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(7988);
    a.sin_addr.s_addr = htonl(s.nid.ipv4());
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      int kind = static_cast<int>(rng_() % 3);
      std::vector<uint8_t> junk(1 + rng_() % 65536);
      for (auto& b : junk) b = static_cast<uint8_t>(rng_());
      if (kind == 1) {  // a frame header claiming the most of everything
        FrameHeader h;
        h.kind = FrameKind::kHello;
        h.payload_len = 0xffffffff;
        h.bulk_len = 0xffffffff;
        EncodedHeader e;
        encode_header(h, &e);
        std::memcpy(junk.data(), e.data(), std::min(junk.size(), e.size()));
      }
      if (kind != 2) (void)!send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
      // kind 2: a silent connection, held open a while
      if (kind == 2) hold(0.5);
    }
    close(fd);
  }

  uint64_t connects_to(const Nid& nid) const {
    for (const NiInfo& p : client_->peers())
      if (p.nid == nid) return p.connects;
    return 0;
  }

  // Once per soak: a server killed for kLongOutageS, the client's connects to it counted
  // each second -- what backoff makes of a client's reconnects while a server is down.
  static constexpr int kLongOutageS = 12;
  void long_outage() {
    Server& s = servers_[0];  // a soak server on loopback
    fault("kill " + s.name + " for " + std::to_string(kLongOutageS) + " s");
    s.proc->kill(SIGKILL);
    uint64_t last = connects_to(s.nid);
    for (int i = 0; i < kLongOutageS; ++i) {
      hold(1.0);
      uint64_t now = connects_to(s.nid);
      outage_connects_.push_back(now - last);
      last = now;
    }
    if (!start(s)) restart_failures_++;
  }

  void one_fault() {
    if (!long_outage_done_ && SteadyClock::now() - start_ > 5s) {
      long_outage_done_ = true;
      long_outage();
      return;
    }
    double secs = 1.0 + static_cast<double>(rng_() % 2000) / 1000.0;
    Server& s = servers_[rng_() % servers_.size()];
    switch (rng_() % 7) {
      case 0:
        fault("kill " + s.name);
        s.proc->kill(SIGKILL);
        hold(secs);
        if (!start(s)) restart_failures_++;
        break;
      case 1:
        fault("stop " + s.name);
        s.proc->stop();
        hold(secs);
        s.proc->kill(SIGCONT);
        break;
      case 2:
        fault("link down/up");
        sh({ip_, "link", "set", host_if_, "down"});
        hold(secs);
        sh({ip_, "link", "set", host_if_, "up"});
        break;
      case 3:
        fault("tbf delay");
        sh({tc_, "qdisc", "add", "dev", host_if_, "root", "tbf", "rate", "20mbit", "burst",
            "32kbit", "latency", "300ms"});
        hold(secs);
        sh({tc_, "qdisc", "del", "dev", host_if_, "root"});
        break;
      case 4: {
        fault("nft drop 10%");
        std::string f = dir_.file("drop.nft");
        write_file(f,
                   "table inet soakdrop {\n chain in {\n  type filter hook input priority 0; "
                   "policy accept;\n  ip saddr " +
                       subnet_ + "1 numgen random mod 100 < 10 drop\n }\n}\n");
        in_ns({"nft", "-f", f});
        hold(secs);
        in_ns({"nft", "delete", "table", "inet", "soakdrop"});
        break;
      }
      case 5:
        fault("garbage connection");
        for (int i = 0; i < 3; ++i) garbage(s);
        hold(0.2);
        break;
      default: {
        Server& d = servers_[rng_() % 2 == 0 ? 1 : 3];  // a daemon
        fault("config reload " + d.name);
        write_config(d, 4 << (rng_() % 3));
        d.proc->kill(SIGHUP);
        hold(0.5);
        break;
      }
    }
  }

  void load_and_faults() {
    start_ = SteadyClock::now();
    in_call_since_ = std::vector<std::atomic<int64_t>>(static_cast<size_t>(threads_));
    std::vector<std::thread> load;
    for (int t = 0; t < threads_; ++t) load.emplace_back([this, t] { load_thread(t); });
    auto end = start_ + std::chrono::seconds(seconds_);
    hold(1.0);  // traffic first
    while (SteadyClock::now() < end) {
      one_fault();
      hold(0.5 + static_cast<double>(rng_() % 1000) / 1000.0);  // recovery between faults
    }
    // Quiet: every call out now must end within its timeout.
    stop_load_ = true;
    auto limit = SteadyClock::now() + std::chrono::seconds(kTimeoutS + 5);
    for (int t = 0; t < threads_; ++t) {
      while (in_call_since_[static_cast<size_t>(t)].load() != 0 && SteadyClock::now() < limit)
        std::this_thread::sleep_for(50ms);  // the calls' own deadlines bound this
    }
    for (int t = 0; t < threads_; ++t) {
      if (in_call_since_[static_cast<size_t>(t)].load() != 0) {
        ++lost_;
        load[static_cast<size_t>(t)].detach();  // stuck in a call: reported as lost
      } else {
        load[static_cast<size_t>(t)].join();
      }
    }
    elapsed_ = std::chrono::duration<double>(SteadyClock::now() - start_).count();
    // Every server answers now (the faults are over; bounded retries).
    for (Server& s : servers_) {
      bool up = s.proc && ::kill(s.proc->pid(), 0) == 0;
      // Bounded in time (a restarted server and the client's view of it may take a few
      // recovery intervals to come back; much longer in a sanitizer build) and in count.
      bool answered = false;
      auto until = SteadyClock::now() + 30s;
      for (int i = 0; up && !answered && i < 300 && SteadyClock::now() < until; ++i) {
        answered = client_->call(s.nid, kMsgPing, Buffer(), nullptr).status.ok();
        if (!answered) std::this_thread::sleep_for(100ms);  // the next try, not a sync
      }
      if (!answered) down_.push_back(s.name);
      s.duplicates += count_lines(s.proc ? s.proc->output() : "", "DUPLICATE ");
    }
  }

  int report(bool json_out) {
    uint64_t duplicated = 0;
    nlohmann::json servers = nlohmann::json::array();
    bool bounded = true;
    for (const Server& s : servers_) {
      duplicated += static_cast<uint64_t>(s.duplicates);
      // Bounds: a node with a handful of peers and 256 KiB messages.
      bool ok = s.max_rss_kb < max_rss_mib_ * 1024 && s.max_fds < kMaxFds;
      bounded = bounded && ok;
      servers.push_back({{"name", s.name},
                         {"nid", s.nid.to_string()},
                         {"incarnations", s.incarnations},
                         {"max_rss_mib", s.max_rss_kb / 1024},
                         {"max_fds", s.max_fds},
                         {"duplicates", s.duplicates}});
    }
    int total_faults = 0;
    for (const auto& [k, v] : faults_) total_faults += v;
    uint64_t failed = 0;
    for (const auto& [k, v] : tally_.failures) failed += v;
    // Backoff: at most a few connects a second in the long outage's last 3 seconds (its
    // 10th to 12th), whatever the load (two threads call that server without pause).
    uint64_t late_connects = 0;
    for (size_t i = outage_connects_.size() >= 3 ? outage_connects_.size() - 3 : 0;
         i < outage_connects_.size(); ++i)
      late_connects = std::max(late_connects, outage_connects_[i]);
    const bool backed_off = outage_connects_.size() == size_t(kLongOutageS) && late_connects <= 3;
    bool pass = lost_ == 0 && duplicated == 0 && tally_.mismatched == 0 && tally_.late == 0 &&
                tally_.reply_lost == 0 && backed_off && tally_.unnamed == 0 &&
                tally_.not_found == 0 && down_.empty() && bounded && restart_failures_ == 0 &&
                tally_.ok > 0 && total_faults > 0;
    nlohmann::json j = {{"seconds", elapsed_},
                        {"seed", seed_},
                        {"rpcs", tally_.rpcs},
                        {"completed", tally_.ok},
                        {"failed", failed},
                        {"failures", tally_.failures},
                        {"failure_examples", tally_.example},
                        {"longest_failed_call_s", tally_.max_failed_s},
                        {"faults", faults_},
                        {"faults_total", total_faults},
                        {"lost", lost_},
                        {"duplicated", duplicated},
                        {"mismatched", tally_.mismatched},
                        {"late", tally_.late},
                        {"unnamed", tally_.unnamed},
                        {"not_found_while_starting", tally_.not_found},
                        {"reply_lost", tally_.reply_lost},
                        {"unknown_after_restart", tally_.unknown_after_restart},
                        {"outage_connects_per_s", outage_connects_},
                        {"outage_backed_off", backed_off},
                        {"down_at_end", down_},
                        {"servers", servers},
                        {"pass", pass}};
    if (json_out) {
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("soak: %.0f s, seed %u: %llu RPCs, %llu completed, %llu failed, %d faults\n",
                  elapsed_, seed_, static_cast<unsigned long long>(tally_.rpcs),
                  static_cast<unsigned long long>(tally_.ok),
                  static_cast<unsigned long long>(failed), total_faults);
      for (const auto& [k, v] : faults_) std::printf("  fault %-22s %d\n", k.c_str(), v);
      for (const auto& [k, v] : tally_.failures)
        std::printf("  failed %-38s %llu  e.g. %s\n", k.c_str(), static_cast<unsigned long long>(v),
                    tally_.example[k].c_str());
      std::printf("  longest failed call %.2f s (timeout %d s)\n", tally_.max_failed_s, kTimeoutS);
      for (const Server& s : servers_)
        std::printf("  server %s %s: %d incarnation(s), max RSS %ld MiB, max fds %ld\n",
                    s.name.c_str(), s.nid.to_string().c_str(), s.incarnations, s.max_rss_kb / 1024,
                    s.max_fds);
      for (const std::string& d : down_) std::printf("  DOWN at the end: %s\n", d.c_str());
      std::string series;
      for (uint64_t n : outage_connects_) series += (series.empty() ? "" : " ") + std::to_string(n);
      std::printf("  connects per second to %s while it was down %d s: %s (%s)\n",
                  servers_[0].name.c_str(), kLongOutageS, series.c_str(),
                  backed_off ? "backed off" : "NOT BACKED OFF");
      std::printf(
          "lost %llu, duplicated %llu, mismatched %llu, late %llu, unnamed %llu, not found "
          "while starting %llu, replies lost %llu, outcome unknown after a restart %llu, down "
          "%zu: %s\n",
          static_cast<unsigned long long>(lost_), static_cast<unsigned long long>(duplicated),
          static_cast<unsigned long long>(tally_.mismatched),
          static_cast<unsigned long long>(tally_.late),
          static_cast<unsigned long long>(tally_.unnamed),
          static_cast<unsigned long long>(tally_.not_found),
          static_cast<unsigned long long>(tally_.reply_lost),
          static_cast<unsigned long long>(tally_.unknown_after_restart), down_.size(),
          pass ? "PASS" : "FAIL");
    }
    std::fflush(stdout);
    return pass ? 0 : 1;
  }

  static constexpr long kMaxFds = 256;
  int seconds_, threads_;
  long max_rss_mib_;
  std::mt19937_64 rng_;
  uint32_t seed_;
  std::string ip_ = ip_bin();
  std::string tc_ = access("/usr/sbin/tc", X_OK) == 0 ? "/usr/sbin/tc" : "/sbin/tc";
  TempDir dir_;
  std::string ns_, host_if_, ns_if_, subnet_, key_, exe_;
  std::vector<Server> servers_;
  std::unique_ptr<Node> client_;
  Tally tally_;
  std::atomic<bool> stop_load_{false};
  std::atomic<uint64_t> next_id_{1};
  std::vector<std::atomic<int64_t>> in_call_since_;
  SteadyClock::time_point start_;
  double elapsed_ = 0;
  uint64_t lost_ = 0;
  int restart_failures_ = 0;
  bool long_outage_done_ = false;
  std::vector<uint64_t> outage_connects_;  // per second of the long outage
  std::vector<std::string> down_;
};

}  // namespace
}  // namespace pfsnet::testing

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "serve") {
    CLI::App app{"pfsnet_soak serve: a soak server"};
    std::string config;
    app.add_option("--config", config)->required();
    CLI11_PARSE(app, argc - 1, argv + 1);
    return pfsnet::testing::soak_serve(config);
  }
  CLI::App app{"pfsnet_soak: a cluster under mixed load and random faults, checked RPC by RPC"};
  int seconds = 60, threads = 8;
  uint32_t seed = static_cast<uint32_t>(time(nullptr));
  bool json = false;
  long max_rss_mib = 512;
  app.add_option("--max-rss-mib", max_rss_mib,
                 "the most memory a server may hold (default 512; sanitizer builds need more)");
  app.add_option("--seconds", seconds, "how long faults are injected (default 60)");
  app.add_option("--seed", seed, "the faults' and the load's random seed (default: the time)");
  app.add_option("--threads", threads, "client threads, each with one RPC out (default 8)");
  app.add_flag("--json", json, "the totals as one JSON line");
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);
  (void)pfsnet::init_logging("error");
  pfsnet::testing::Soak soak(seconds, seed, threads, max_rss_mib);
  return soak.run(json);
}
