// RpcEngine: requests and replies over Net, matched by xid.
//
// Client side: call() blocks until the reply or an error; call_async() runs a callback.
// Every RPC ends with a reply or a clear error -- timeout (its deadline, by default
// transaction_timeout), unreachable or rejected peer, connection closed before the reply,
// or cancelled at shutdown. At most max_rpcs_in_flight RPCs per target are on the wire --
// the node's value, or the target's own (Lustre's per-OSC max_rpcs_in_flight: a peer
// across a WAN needs more than one in the next rack); the rest queue (their channel wait
// grows) and keep their deadline.
//
// Server side: a handler per message type runs inline on the I/O thread (kInline: must
// not block; the fastest path) or on the worker pool (kWorker). Execution time runs from
// the request being completely received until the reply is handed to the network; it
// travels in the reply header. A request runs once however often the network delivers it
// (a resend keeps its xid; requests carry the client's incarnation): a copy of one that
// ran gets its saved reply (rpc/reply_cache.h), unless its type is Execution::kRepeatable.
//
// Bulk: a write carries its data with the request (one round trip), a read returns it
// with the reply; 0 to 2 x maxBlockSize bytes either way.
//
// Timers: the engine has none of its own. expire(now) applies the RPC deadlines; a node's
// one periodic driver (rpc/node_timers.h) calls it beside Net::expire, the statistics'
// tick and the recovery pinger.
//
// Threads: call/call_async/expire/shutdown from any thread. Async callbacks run on an I/O
// thread, a worker, or the thread of expire()/shutdown(); they must not block. Register
// handlers before traffic starts.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/config.h>
#include <pfsnet/rpc.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "net/net.h"
#include "rpc/reply_cache.h"
#include "rpc/worker_pool.h"
#include "stats/rpc_stats.h"

namespace pfsnet {

struct RpcOptions {
  int64_t max_rpcs_in_flight = 8;
  int workers = 2;
  Duration default_timeout = std::chrono::seconds(50);
  uint32_t max_bulk = 2 * 1024 * 1024;
  // A blocking call() spins this long for its reply before sleeping (one caller at a
  // time); a reply within it costs no thread wake-up. 0 disables spinning.
  std::chrono::microseconds spin{100};
  // Exactly-once execution (rpc/reply_cache.h): what the server keeps per client
  // incarnation, and this engine's own incarnation as a client (0: a random one).
  ReplyCacheOptions replay;
  uint64_t incarnation = 0;
  // Resends (LNet health): a request whose attempt fails on the network (send failed,
  // connection closed before the reply, no reply within the attempt's deadline) is sent
  // again -- on another path when there is a healthier one -- up to retry_count times
  // within its timeout. Each attempt gets timeout / (retry_count + 1).
  int64_t retry_count = 2;
  // Targets with a max_rpcs_in_flight of their own (rpc.peer_rpcs_in_flight), by the NID
  // RPCs are addressed to.
  std::vector<std::pair<Nid, int64_t>> peer_rpcs_in_flight;

  // max_rpcs_in_flight (and per peer), the default timeout (transaction_timeout), max_bulk
  // (2 x maxBlockSize) and retry_count of a node's config.
  static RpcOptions from(const Config& cfg);
  // One attempt's share of the default timeout: what a single ping (recovery, probe) gets.
  Duration attempt_timeout() const { return default_timeout / (retry_count + 1); }
};

class RpcEngine final : public NetRx {
 public:
  using Callback = std::function<void(RpcReply&&)>;

  // Attaches itself to `net` as its receiver. `net` must outlive the engine. With
  // `stats`, every reply received and every request executed is recorded there; it must
  // outlive the engine.
  RpcEngine(Net& net, RpcOptions opts, RpcStats* stats = nullptr);
  ~RpcEngine() override;

  // Names a message type (for statistics and errors); optional for types only called.
  // pfsnet's own types (rpc/msg_types.h) are named from the start. REQUIRES: `type` is
  // not one of them under another name.
  void define_type(uint32_t type, std::string name);
  // Serves `type`; a resent copy of a request runs again only when `exec` says it may.
  // REQUIRES: before any traffic; `type` not served already.
  void handle(uint32_t type, std::string name, Handler h, HandlerMode mode,
              Execution exec = Execution::kOnce);
  // Serves one of pfsnet's own types, under its registered name.
  void handle(uint32_t type, Handler h, HandlerMode mode, Execution exec = Execution::kOnce);
  // Serves `type` with a handler that answers through a Responder, now or later (a request
  // that waits holds no thread, and its receive credit unless `credit` says otherwise;
  // execution time runs to the reply).
  // REQUIRES: as handle(); every Responder answered or gone before the engine is.
  void handle_async(uint32_t type, std::string name, AsyncHandler h,
                    Execution exec = Execution::kOnce, AsyncCredit credit = AsyncCredit::kHeld);
  // "PING", or "type-N" for an unnamed type.
  std::string type_name(uint32_t type) const;
  // The type named `name` (defined or handled here), or 0.
  uint32_t type_by_name(std::string_view name) const;

  RpcReply call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk = nullptr,
                CallOptions opts = {});
  void call_async(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk, Callback cb,
                  CallOptions opts = {});

  // Applies the RPC deadlines at `now`: an RPC past its deadline fails (queued for a slot
  // or on the wire); an attempt written and unanswered past its attempt deadline is a
  // remote timeout, reported to the net and resent while the budget allows. Returns how
  // many RPCs it failed or resent.
  size_t expire(TimePoint now);
  // The worker pool's queue and wait (rpc.workers threads).
  WorkerStats worker_stats() const { return workers_.stats(); }
  // The reply cache's figures (exactly-once execution of the requests served here).
  ReplyCacheStats replay_stats() const;
  // This engine's incarnation as a client (in every request it sends).
  uint64_t incarnation() const { return incarnation_; }
  // Fails every pending and queued RPC with kCancelled and stops the workers. New calls
  // fail at once. Idempotent.
  void shutdown();

  // Changes max_rpcs_in_flight at run time: raised, queued RPCs go at once; lowered,
  // RPCs on the wire finish and no new one starts until a target is below the limit.
  void set_max_rpcs_in_flight(int64_t n);
  // Gives the targets in `limits` their own max_rpcs_in_flight (replacing every earlier
  // one; a target not named goes back to the node's), with the same effect at once.
  void set_peer_rpcs_in_flight(const std::vector<std::pair<Nid, int64_t>>& limits);

  // Turns statistics recording on (a RpcStats that outlives the engine) or off (null).
  void set_stats(RpcStats* stats) { stats_.store(stats, std::memory_order_release); }

  // Fails every RPC to any of `nids`, on the wire or queued, with `s` (no resend): the
  // MGS declared that node dead.
  size_t fail_calls_to(const std::vector<Nid>& nids, const Status& s);

  RpcCounters counters() const;
  int64_t max_rpcs_in_flight() const;
  // What RPCs to `dst` get: its own value, else the node's.
  int64_t max_rpcs_in_flight(const Nid& dst) const;

  // One target of this engine as a client: its slots and what its RPCs did so far.
  struct TargetInfo {
    Nid dst;
    int64_t limit = 0;  // its max_rpcs_in_flight
    bool own_limit = false;
    int64_t in_flight = 0;
    size_t queued = 0;
    RpcCounters counters;
  };
  // Every target called so far.
  std::vector<TargetInfo> targets() const;
  // The most bulk a request or reply may carry (RpcOptions::max_bulk).
  uint32_t max_bulk() const { return opts_.max_bulk; }

  size_t pending() const;
  // RPCs to `dst` on the wire and waiting for a slot.
  std::pair<int64_t, size_t> target_load(const Nid& dst) const;
  // The targets with RPCs waiting for a max_rpcs_in_flight slot now.
  std::vector<Nid> waiting_targets() const;
  uint64_t late_replies() const { return late_replies_.load(); }
  Net& net() { return net_; }

  // NetRx.
  void on_message(const Nid& from, InFrame&& f, RxCredit credit) override;
  void on_connection_closed(uint64_t conn_id, const Nid& peer_nid, const Status& why) override;
  // A corrupt request gets a CORRUPT error reply (not run, not recorded by the reply
  // cache); a corrupt reply -- or that error -- has its RPC sent again, as a failed send
  // is (within retry_count and the deadline; then it fails with Code::kCorrupt).
  void on_corrupt(const Nid& from, const FrameHeader& hdr, RxCredit credit) override;

  struct Call;
  struct Target;
  using CallPtr = std::shared_ptr<Call>;

 private:
  CallPtr start_call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk, Callback cb,
                     CallOptions o);
  void submit(const CallPtr& c);
  // An attempt of a call ready to go on the wire: its deadline and done_lag were decided
  // under mu_ as it was armed (arm_locked), so sending it takes no lock.
  struct Armed {
    CallPtr c;
    TimePoint deadline;
    uint32_t done_lag = 0;
  };
  // Arms the current attempt of `c` (on the wire, xid given) at `now`: its attempt
  // deadline, the done_lag its request carries, and tx_keep until its write completes.
  Armed arm_locked(const CallPtr& c, TimePoint now) REQUIRES(mu_);
  void send_call(const Armed& a);
  // The net is done with a write of `c` (Call::on_tx_done).
  void on_tx_done(Call& c, const Status& s, const TxTimes& t);
  // Fails `c` with `s` unless it is resolved already; its callback runs at once.
  void resolve_error(const CallPtr& c, const Status& s);
  // Delivers `c`'s reply once both it and its write's completion are in: the part under
  // mu_ (the write's times into the reply, the target's counters) and, after unlocking,
  // the rest (statistics record, counters, callback). Once.
  struct Delivery {
    uint64_t sent_on = 0, sent_to = 0;  // the write's path (packed NIDs)
    bool received_verbs = false;        // the reply came from a verbs (RDMA) NI
  };
  // Nothing when `c` was delivered already.
  std::optional<Delivery> complete_locked(Call& c) REQUIRES(mu_);
  void complete(const CallPtr& c, const Delivery& d);
  // Sends `c` again after a failed attempt when its budget allows.
  // What became of a failed attempt: sent again; not to be resent (the caller fails the
  // RPC); or no longer current -- another thread (the deadline timer, a connection's close,
  // the write's completion) already acted on attempt `attempt`, so this caller does nothing.
  // Without that check two threads could resend one attempt: two writes of one call out at
  // once, where tx_keep keeps the call for one only.
  enum class Resend { kSent, kGiveUp, kStale };
  Resend try_resend(const CallPtr& c, const Status& s, const TxTimes& failed_path, int attempt);
  // The error a call ends with once it cannot be resent.
  Status final_error(const Call& c, const Status& s);
  // The target RPCs to `dst` queue in, made on first use with its limit.
  Target& target_locked(const Nid& dst) REQUIRES(mu_);
  int64_t limit_locked(const Target& t) const REQUIRES(mu_);
  // The slot grant: the first call queued for `t` goes on the wire (xid, pending_, armed at
  // `now`, the clock's reading when not given) when `t` is below its max_rpcs_in_flight. Returns it
  // (to be sent after unlocking), or one with a null call.
  Armed grant_slot_locked(Target& t, std::optional<TimePoint> now = std::nullopt) REQUIRES(mu_);
  // Gives `c` its xid and files it as awaiting its reply (slot granted, or urgent).
  void on_wire_locked(const CallPtr& c) REQUIRES(mu_);
  // `c` left the wire: its slot goes to the next queued call (returned armed, to be sent
  // after unlocking; null call when none).
  Armed finish_slot_locked(Call& c) REQUIRES(mu_);
  void serve(const Nid& from, InFrame&& f, RxCredit credit);
  struct TypeInfo;
  void serve_async(const TypeInfo& t, const Nid& from, InFrame&& f, RxCredit credit, bool saved);
  void on_reply(const Nid& from, InFrame&& f, RxCredit credit);
  // `f` is the reply of `c`, resolved by it: its status, data and times into c's reply.
  void take_reply(Call& c, const Nid& from, InFrame& f) REQUIRES(mu_);
  // The reply to `xid` was damaged on the way (`s`): the RPC is sent again once its write
  // has completed.
  void resend_damaged(uint64_t xid, const Status& s);
  // `counted`: a handler ran, so its execution time goes into the statistics. `saved`:
  // the request was admitted by the reply cache, which keeps the reply and may name a
  // later path for it.
  void send_reply(const Nid& to, const FrameHeader& req, TimePoint received, RpcResponse&& r,
                  bool counted, bool saved = false);
  // Sends `reply` to `to` back on the NI `local` (packed; 0: any), resent on the best path
  // left when that send fails; its deadline runs from `now`.
  void send_reply_frame(const Nid& to, uint64_t local, std::shared_ptr<const SavedReply> reply,
                        TimePoint now);
  // A request of an incarnation: runs (true) unless the reply cache has seen it, in which
  // case it is answered or dropped here (false).
  bool admit(const Nid& from, const FrameHeader& h);

  Net& net_;
  RpcOptions opts_;
  std::atomic<RpcStats*> stats_{nullptr};
  Clock& clock_;
  WorkerPool workers_;

  struct TypeInfo {
    std::string name;
    Handler handler;
    AsyncHandler async;  // instead of handler
    HandlerMode mode = HandlerMode::kInline;
    bool once = true;         // Execution::kOnce
    bool hold_credit = true;  // AsyncCredit::kHeld
  };
  std::unordered_map<uint32_t, TypeInfo> types_;

  const uint64_t incarnation_;
  // The server's memory of requests run (exactly-once); its own lock, not mu_.
  mutable Mutex replay_mu_;
  ReplyCache replay_ GUARDED_BY(replay_mu_);
  TimePoint replay_swept_ GUARDED_BY(replay_mu_);  // idle incarnations: every 10 s

  mutable Mutex mu_;
  // xid -> call on the wire; ordered, so the oldest is at hand (a request's done_lag).
  std::map<uint64_t, CallPtr> pending_ GUARDED_BY(mu_);
  // Packed NID -> target; a Target is reached only through this map, under mu_.
  std::unordered_map<uint64_t, std::unique_ptr<Target>> targets_ GUARDED_BY(mu_);
  // Packed NID -> its own max_rpcs_in_flight (targets made later take theirs from here).
  std::unordered_map<uint64_t, int64_t> peer_limits_ GUARDED_BY(mu_);
  uint64_t next_xid_ GUARDED_BY(mu_) = 1;
  bool shut_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> late_replies_{0};
  std::atomic<int> spinners_{0};
  std::atomic<uint64_t> completed_{0}, round_trip_ns_{0}, bytes_{0}, slot_waits_{0};
};

}  // namespace pfsnet
