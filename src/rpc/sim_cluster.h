// SimCluster: the deterministic in-process cluster for service tests (the models: seastar's
// rpc_test_env, capnp's TestNetwork, KJ's manual timer). Each node is a Net over the
// in-memory transport, a node core (rpc/node_core.h) whose engine runs every handler on the
// pumping thread (no workers), serving PING; every node shares one ManualClock and
// one MemHub. A service attaches to a node (built on its net, engine and the clock) and gives a
// tick function. Time moves only in run_for() and run_until(): the clock advances one step, every
// node's timers and ticks run, then the hub is pumped until nothing is left. Nothing runs on
// another thread, so a run is exact and repeats: a test asserts "declared dead within 2.35 s of
// manual time", which no load on the host can make it miss.
//
// kill() is a process gone: its engine and net shut down, its connections close at the
// peers, its NIDs refuse connects. A restart is add() again with the same NIDs. cut()
// silences the links between two nodes (a pulled cable: frames and connects wait, neither
// fails) until heal(); set_delay() gives them a round trip. Net's fault rules work as in
// the daemon (the same link-emulation decorator holds their delays).
// A blocking wait of the test's thread -- a synchronous call (RpcEngine::call), a striped
// file's write waiting for pagepool room -- runs the cluster itself (every node's engine has
// the cluster's waiter, rpc/waiter.h): what is queued, else a step of the clock, until it
// ends or its deadline passes. A blocking wait inside an event (a handler, a callback, a
// tick) is refused: it fails at once, with an error in the log (KJ's rule).
// Threads: one, the test's.
#pragma once

#include <pfsnet/clock.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/log.h"
#include "net/net.h"
#include "rpc/node_core.h"
#include "rpc/rpc_engine.h"
#include "transport/emulating_transport.h"
#include "transport/mem_transport.h"

namespace pfsnet {

// A node core's options over the in-memory transport on `hub`, under the link-emulation
// decorator that holds Net's fault delays (as in the daemon's transport stack; the links'
// own delays are the hub's), on `clock`, without statistics or a health monitor.
// `wire`: what its handshakes speak (a test plays an older release with less).
inline NodeCoreOptions mem_node_options(MemHub& hub, Clock& clock, const std::vector<Nid>& nids,
                                        NetOptions no, RpcOptions ro,
                                        const std::string& cluster_key, WireSpeaks wire = {}) {
  NodeCoreOptions o;
  for (const Nid& n : nids) o.cfg.nets.push_back(NetConfig{n});
  o.clock = &clock;
  o.timer_queue = &hub;  // on the manual clock
  o.stats = false;
  o.health = false;
  o.net = std::move(no);
  o.rpc = std::move(ro);
  o.make_transport = [&hub, nids, cluster_key, wire](TransportEvents& ev, NodeCore& core) {
    TransportOptions to;
    to.cluster_key = cluster_key;
    to.wire = wire;
    Clock& c = core.clock();
    return std::make_unique<EmulatingTransport>(
        std::vector<EmulationRule>{},
        [&core](const Connection& conn, const OutFrame& f) {
          return core.net().fault_hold(conn, f);
        },
        c, hub, ev,
        [&hub, &c, nids, to](TransportEvents& inner) {
          return std::make_unique<MemTransport>(hub, to, nids, c, inner);
        });
  };
  return o;
}

class SimNode {
 public:
  SimNode(MemHub& hub, Clock& clock, std::vector<Nid> nids, NetOptions no, RpcOptions ro,
          const std::string& cluster_key, WireSpeaks wire = {})
      : nids(nids),
        core(options(hub, clock, nids, std::move(no), ro, cluster_key, std::move(wire))),
        net(core.net()),
        rpc(core.rpc()),
        pinger(core.pinger()) {}
  SimNode(const SimNode&) = delete;
  SimNode& operator=(const SimNode&) = delete;
  // The services first (last attached, first gone), then the core.
  ~SimNode() {
    while (!parts_.empty()) parts_.pop_back();
    core.stop();
  }

  // A service of this node, constructed from `args` (typically its config, net, rpc and
  // the clock); it lives as long as the node.
  template <class T, class... A>
  T& attach(A&&... args) {
    auto p = std::make_shared<T>(std::forward<A>(args)...);
    parts_.push_back(p);
    return *p;
  }
  // `fn(now)` runs at every step after the node's timers: a service's periodic round.
  void on_tick(std::function<void(TimePoint)> fn) { ticks_.push_back(std::move(fn)); }
  void tick(TimePoint now) {
    core.tick(now);
    for (auto& fn : ticks_) fn(now);
  }

  const std::vector<Nid> nids;
  NodeCore core;  // no driver thread, no statistics or health monitor: ticked by the cluster
  Net& net;
  RpcEngine& rpc;
  RecoveryPinger& pinger;

 private:
  static NodeCoreOptions options(MemHub& hub, Clock& clock, const std::vector<Nid>& nids,
                                 NetOptions no, RpcOptions ro, const std::string& cluster_key,
                                 WireSpeaks wire) {
    ro.workers = 0;  // every handler on the pumping thread
    ro.spin = {};    // a reply comes only when the waiter runs the cluster
    return mem_node_options(hub, clock, nids, std::move(no), ro, cluster_key, std::move(wire));
  }
  std::vector<std::shared_ptr<void>> parts_;
  std::vector<std::function<void(TimePoint)>> ticks_;
};

class SimCluster {
 public:
  explicit SimCluster(std::string cluster_key = "sim-cluster-key-0123456789")
      : key_(std::move(cluster_key)) {
    hub_.set_clock(&clock_);
  }
  ~SimCluster() {
    while (!nodes_.empty()) kill(nodes_.begin()->first);
  }

  // A node named `name` with `nids`, listening (Net::start) before it returns.
  // REQUIRES: no live node of that name. Returns null when the net cannot start (a NID
  // taken by a live node). `wire`: what its handshakes speak.
  SimNode* add(const std::string& name, std::vector<Nid> nids, NetOptions no = {},
               RpcOptions ro = {}, WireSpeaks wire = {}) {
    ro.waiter = &waiter_;
    auto n = std::make_unique<SimNode>(hub_, clock_, std::move(nids), std::move(no), ro, key_,
                                       std::move(wire));
    if (!n->core.start(Duration::zero()).ok()) return nullptr;
    SimNode* p = n.get();
    nodes_[name] = std::move(n);
    settle();
    return p;
  }
  SimNode* find(const std::string& name) {
    auto it = nodes_.find(name);
    return it == nodes_.end() ? nullptr : it->second.get();
  }
  // The process is gone: what it had queued runs out (its connections close at the
  // peers, frames to it fail), then it is destroyed.
  void kill(const std::string& name) {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) return;
    it->second->core.stop();
    settle();
    for (const Nid& n : it->second->nids) hub_.drop_held_from(n);
    nodes_.erase(it);
    settle();
  }

  // Cuts (or heals) every link between nodes `a` and `b`: frames and connects between them
  // wait, both ways, until healed (MemHub::set_cut). Other links are untouched.
  void cut(const std::string& a, const std::string& b, bool cut = true) {
    SimNode *x = find(a), *y = find(b);
    if (!x || !y) return;
    for (const Nid& m : x->nids)
      for (const Nid& n : y->nids) hub_.set_cut(m, n, cut);
    settle();
  }
  void heal(const std::string& a, const std::string& b) { cut(a, b, false); }
  // Every frame between nodes `a` and `b` (both ways) arrives `one_way` after it was sent:
  // a round trip of twice that (MemHub::set_delay). Zero takes the delay away. Time moves
  // in steps: use steps shorter than the delay.
  void set_delay(const std::string& a, const std::string& b, Duration one_way) {
    SimNode *x = find(a), *y = find(b);
    if (!x || !y) return;
    for (const Nid& m : x->nids)
      for (const Nid& n : y->nids) {
        hub_.set_delay(m, n, one_way);
        hub_.set_delay(n, m, one_way);
      }
  }

  // Runs queued events until none is left. False when they never run out (a livelock:
  // events that keep queueing more), after a bound far beyond any real round.
  bool settle() {
    Running r(*this);
    for (int round = 0; round < 1000; ++round)
      if (hub_.pump() == 0) return true;
    return false;
  }
  // `d` of manual time in steps of `step`: each step advances the clock, ticks every node
  // (in name order), and settles. False when a step did not settle.
  bool run_for(Duration d, Duration step = std::chrono::milliseconds(100)) {
    for (Duration t{}; t < d; t += step)
      if (!one_step(step)) return false;
    return true;
  }
  // Steps until `done()` holds (checked before each step) or `limit` has passed. Returns
  // the manual time it took, or nullopt when it never held (or a step did not settle).
  std::optional<Duration> run_until(const std::function<bool()>& done, Duration limit,
                                    Duration step = std::chrono::milliseconds(100)) {
    for (Duration t{}; t <= limit; t += step) {
      if (done()) return t;
      if (!one_step(step)) return std::nullopt;
    }
    return std::nullopt;
  }

  ManualClock& clock() { return clock_; }
  MemHub& hub() { return hub_; }
  // The step a blocking wait moves the clock by when nothing is queued (10 ms).
  void set_wait_step(Duration d) { wait_step_ = d; }

 private:
  bool one_step(Duration step) {
    clock_.advance(step);
    TimePoint now = clock_.now();
    {
      Running r(*this);
      for (auto& [name, n] : nodes_) n->tick(now);
    }
    return settle();
  }
  // Marks events running (settle, ticks): a blocking wait then is refused.
  struct Running {
    explicit Running(SimCluster& c) : c(c), was(c.running_) { c.running_ = true; }
    ~Running() { c.running_ = was; }
    SimCluster& c;
    bool was;
  };
  // The waiter of every node's engine: runs the cluster for a blocking wait of the test's
  // thread. Each round: the events queued, else one step of the clock (not past the
  // deadline), then the condition again.
  class StepWaiter final : public Waiter {
   public:
    explicit StepWaiter(SimCluster& c) : c_(c) {}
    // `lk` is held on entry and on return, let go while the cluster runs (the analysis
    // cannot follow a scoped lock passed in).
    bool wait_until(MutexLock& lk, CondVar&, TimePoint deadline,
                    const std::function<bool()>& pred) override NO_THREAD_SAFETY_ANALYSIS {
      if (!pred() && c_.running_) {
        PFS_LOG_ERROR(
            "a blocking wait inside an event of the simulated cluster (a handler, callback or "
            "tick): refused -- use the asynchronous call");
        return false;
      }
      while (!pred()) {
        TimePoint now = c_.clock_.now();
        if (now >= deadline) return false;
        lk.unlock();
        bool ok;
        {
          Running r(c_);
          ok = c_.hub_.pump() > 0;
        }
        if (!ok) ok = c_.one_step(std::min<Duration>(c_.wait_step_, deadline - now));
        lk.lock();
        if (!ok) return pred();  // a step did not settle: a livelock
      }
      return true;
    }

   private:
    SimCluster& c_;
  };

  std::string key_;
  ManualClock clock_;
  MemHub hub_;
  bool running_ = false;
  Duration wait_step_ = std::chrono::milliseconds(10);
  StepWaiter waiter_{*this};
  std::map<std::string, std::unique_ptr<SimNode>> nodes_;
};

}  // namespace pfsnet
