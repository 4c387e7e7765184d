// RpcClient: the calling side of an RpcEngine (rpc_engine.h has the whole contract).
// Calls take a max_rpcs_in_flight slot of their target (or queue for one), go on the wire
// with an xid, are resent while their budget allows and complete once: with the reply,
// or an error. Not installed.
//
// Locks: one, mu_, the client's own -- the server side never takes it. It guards the xid
// table, the targets and the state of every call, and is taken three times per RPC: as
// the call is submitted (slot, xid, attempt armed), as its write completes and as its
// reply comes in (found, slot passed on, delivered once both are in).
//
// Files: rpc_client.cc (calls: slots, sends, resends, completion, run-time limits),
// rpc_replies.cc (what comes back: replies, damaged frames, closed connections, deadlines),
// rpc_call.h (a call's state).
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/rpc.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/free_list.h"
#include "base/mutex.h"
#include "net/net.h"
#include "rpc/op_tracker.h"
#include "rpc/reply_cache.h"
#include "rpc/rpc_options.h"
#include "stats/rpc_stats.h"

namespace pfsnet {

class RpcClient {
 public:
  using Callback = std::function<void(RpcReply&&)>;

  // `stats` (the engine's, switched at run time) and `names` outlive the client.
  RpcClient(Net& net, const RpcOptions& opts, const std::atomic<RpcStats*>& stats,
            const TypeNames& names, OpHistory& history);
  ~RpcClient();

  RpcReply call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk, CallOptions opts);
  // How call() waits; blocking callers above the engine wait the same way.
  Waiter& waiter() { return waiter_; }
  void call_async(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk, Callback cb,
                  CallOptions opts);

  // RpcEngine::expire's part for calls; returns how many it failed or resent.
  size_t expire(TimePoint now);
  // Fails every pending and queued call with kCancelled; new calls fail at once. True for
  // the call that shut it down (once).
  bool shutdown();

  void set_max_rpcs_in_flight(int64_t n);
  // What another part says of path local -> peer now ("" when it has nothing): a slow RPC
  // kept in the history with a network verdict gets it beside TCP's view. Clearing it
  // (nullptr) waits for a look under way, so its owner may go after.
  using PathView = std::function<std::string(const Nid& local, const Nid& peer)>;
  void set_path_view(PathView v) {
    MutexLock lk(view_mu_);
    path_view_ = std::move(v);
  }
  void set_peer_rpcs_in_flight(const std::vector<std::pair<Nid, int64_t>>& limits);
  size_t fail_calls_to(const std::vector<Nid>& nids, const Status& s, bool spare_recover);

  RpcCounters counters() const;
  int64_t max_rpcs_in_flight() const;
  int64_t max_rpcs_in_flight(const Nid& dst) const;
  struct TargetInfo {
    Nid dst;
    int64_t limit = 0;  // its max_rpcs_in_flight
    bool own_limit = false;
    int64_t in_flight = 0;
    size_t queued = 0;
    RpcCounters counters;
  };
  std::vector<TargetInfo> targets() const;
  size_t pending() const;
  std::pair<int64_t, size_t> target_load(const Nid& dst) const;
  std::vector<Nid> waiting_targets() const;
  uint64_t late_replies() const { return late_replies_.load(); }
  uint64_t dones_sent() const { return dones_sent_.load(); }
  uint64_t incarnation() const { return incarnation_; }
  // Calls in flight (rpc/op_tracker.h), each in its phase: from the calls' own state, under
  // mu_ once; an unsent one's wait in the net (Net::send_wait) asked after.
  std::vector<Op> ops() const;

  // What comes back (from the engine's NetRx).
  void on_reply(const Nid& from, InFrame&& f, RxCredit credit);
  // A reply that failed its data checksum (`s` says so), or one that says its request
  // arrived damaged and did not run (`not_run`): its RPC goes again.
  void resend_damaged(uint64_t xid, const Status& s, bool not_run = false);
  // The caller's memory for reply `hdr`'s bulk, when its call lent some
  // (CallOptions::reply_memory).
  std::optional<Buffer> reply_memory(const FrameHeader& hdr, std::function<void()> cancel);
  void on_connection_closed(uint64_t conn_id, const Nid& peer_nid, const Status& why);

  struct Call;
  struct Target;
  using CallPtr = std::shared_ptr<Call>;

 private:
  std::string type_name(uint32_t type) const { return names_.name(type); }
  // ops()' part under mu_: every call's phase and detail from its own state.
  std::vector<Op> ops_of_calls() const EXCLUDES(mu_);
  CallPtr start_call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk, Callback cb,
                     CallOptions o);
  void submit(const CallPtr& c);
  // An attempt of a call ready to go on the wire: its deadline, done_lag and flags were
  // decided under mu_ as it was armed (arm_locked), so sending it takes no lock.
  struct Armed {
    CallPtr c;
    TimePoint deadline;
    uint32_t done_lag = 0;
    uint8_t flags = 0;  // the call's, and kFlagResend on a copy of one written before
  };
  // Arms the current attempt of `c` (on the wire, xid given) at `now`: its attempt
  // deadline, the done_lag and flags its request carries, and tx_keep until its write
  // completes.
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
    Nid sent_on, sent_to;         // the write's path (Nid() = none)
    bool received_verbs = false;  // the reply came from a verbs (RDMA) NI
  };
  // Nothing when `c` was delivered already.
  std::optional<Delivery> complete_locked(Call& c) REQUIRES(mu_);
  void complete(const CallPtr& c, const Delivery& d);
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
  // `now`, the clock's reading when not given) when `t` is below its max_rpcs_in_flight.
  // Returns it (to be sent after unlocking), or one with a null call.
  Armed grant_slot_locked(Target& t, std::optional<TimePoint> now = std::nullopt) REQUIRES(mu_);
  // Gives `c` its xid and files it as awaiting its reply (slot granted, or urgent).
  void on_wire_locked(const CallPtr& c) REQUIRES(mu_);
  // `c` left the wire: its slot goes to the next queued call (returned armed, to be sent
  // after unlocking; null call when none).
  Armed finish_slot_locked(Call& c) REQUIRES(mu_);
  // `f` is the reply of `c`, resolved by it: its status, data and times into c's reply.
  void take_reply(Call& c, const Nid& from, InFrame& f) REQUIRES(mu_);

  // Acknowledgements (rpc/reply_cache.h): `c` left the wire; its target may owe its
  // server a DONE.
  void left_wire_locked(Call& c) REQUIRES(mu_);
  void want_done_locked(Target& t) REQUIRES(mu_);
  // What a DONE says now: every xid below the next one is finished but those on the wire.
  DoneAck done_ack_locked() const REQUIRES(mu_);
  // Sends a DONE to every target that owes one and has none out.
  void send_dones() EXCLUDES(mu_);
  void on_done_reply(const Nid& dst, const DoneAck& sent, const Status& s) EXCLUDES(mu_);
  // A call that ended, into the history when it is among the slowest lately.
  void keep_if_slow(const Call& c);
  // Hands `c`'s reply to its callback (once: after keep_if_slow and the debug line).
  void deliver(Call& c);
  // The debug line of a call that carried a job id or a trace, as it completes.
  void log_call(const Call& c) const;
  static Op op_of(const Call& c);

  Net& net_;
  const RpcOptions opts_;  // max_rpcs_in_flight: the live value is max_in_flight_
  const std::atomic<RpcStats*>& stats_;
  const TypeNames& names_;
  Clock& clock_;
  OpHistory& history_;
  // Taken alone, and before the view's own locks; never while mu_ is held.
  Mutex view_mu_;
  PathView path_view_ GUARDED_BY(view_mu_);
  CondVarWaiter cv_waiter_{clock_};
  Waiter& waiter_;  // opts_.waiter, else cv_waiter_
  const uint64_t incarnation_;

  mutable Mutex mu_;
  int64_t max_in_flight_ GUARDED_BY(mu_);
  // xid -> call on the wire; ordered, so the oldest is at hand (a request's done_lag). Its
  // nodes come from the thread's free list (one per RPC).
  std::map<uint64_t, CallPtr, std::less<>, FreeListAllocator<std::pair<const uint64_t, CallPtr>>>
      pending_ GUARDED_BY(mu_);
  // Packed NID -> target; a Target is reached only through this map, under mu_.
  std::unordered_map<Nid, std::unique_ptr<Target>> targets_ GUARDED_BY(mu_);
  // Packed NID -> its own max_rpcs_in_flight (targets made later take theirs from here).
  std::unordered_map<Nid, int64_t> peer_limits_ GUARDED_BY(mu_);
  uint64_t next_xid_ GUARDED_BY(mu_) = 1;
  // A target's unacknowledged xids: at most cap (half the server's window, so two NIDs
  // of one server fit in it); a DONE goes once trigger of them are off the wire.
  const size_t unacked_cap_, done_trigger_;
  std::atomic<bool> dones_due_{false};  // some target owes a DONE: send_dones()
  std::atomic<uint64_t> dones_sent_{0};
  bool shut_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> late_replies_{0};
  std::atomic<int> spinners_{0};
  std::atomic<uint64_t> completed_{0}, round_trip_ns_{0}, bytes_{0}, slot_waits_{0};
};

}  // namespace pfsnet
