// The op tracker (issue 70; Ceph's op tracker, Storage Scale's `mmdiag --waiters`, Lustre's
// req_history): what an RPC is doing now, on the node that called it and on the one that
// serves it, and the slowest of those that ended lately, each with its timeline.
//
// An op is one RPC as one node sees it. A client's calls are the RPC client's own state
// (rpc_call.h): listing them adds nothing to the RPC path. A server's requests that wait for
// a worker or run on one, or whose asynchronous handler has not answered, are on an OpBoard
// for as long as they are in flight; one that runs inline, on arrival, is never in flight
// between two looks. OpHistory keeps the slowest ops of a window; an op too fast to enter it
// costs one comparison.
//
// Thread safety: OpBoard and OpHistory lock their own mutex; any thread may call them.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>
#include <pfsnet/trace_context.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/mutex.h"
#include "net/send_wait.h"
#include "wire/frame.h"

namespace pfsnet {

// Where an op is: a client's call, or a server's request.
enum class OpPhase : uint8_t {
  kSlot,       // client: queued for a max_rpcs_in_flight slot of its target
  kNetwork,    // client: handed to the net -- a connection, credits, the write under way
  kReply,      // client: written, waiting for the reply
  kResend,     // client: an attempt failed, waiting to send it again
  kQueued,     // server: arrived, waiting for a worker
  kExecuting,  // server: its handler runs (or has not answered yet)
  kDone,       // ended (history)
  kWaiting,    // server: its handler waits for a resource it names (a block buffer)
};
const char* op_phase_name(OpPhase p);  // "slot", "network", "reply", ...

struct OpEvent {
  TimePoint at;
  std::string what;  // "submitted", "written", "reply received", "resent: ...", ...
};

struct Op {
  bool client = true;  // this node called it; false: this node serves it
  uint64_t xid = 0;
  uint32_t type = 0;
  Nid peer;                           // the server called, or the client served
  std::string job;                    // the request's job id ("" when none)
  std::optional<TraceContext> trace;  // its W3C trace context, where it had one
  TimePoint started;                  // submitted (client), arrived (server)
  TimePoint handler_at;               // server: a worker started its handler (none: {})
  OpPhase phase = OpPhase::kSlot;
  TimePoint phase_since;
  int attempts = 1;    // client: attempts so far
  std::string detail;  // what the phase waits for ("slot 8 of 8 in use", the resend's cause)
  // client, `network` phase: what the net holds its frame for (Net::send_wait).
  SendWait::Kind net_wait = SendWait::Kind::kNone;
  // client, `reply` phase: what TCP says of what went to the server (Net::reply_wait).
  ReplyWait reply_wait;
  uint64_t reply_bulk = 0;  // client: the bulk its reply may carry (a read's), bytes
  // History: when it ended, how, and its timeline (built as it enters the history).
  TimePoint ended;
  Status status;
  std::vector<OpEvent> events;
  // A client's ended RPC: where its time went, and who is to blame (op_blame()).
  struct Blame {
    Duration slot{0};          // client: queued for a max_rpcs_in_flight slot
    Duration net_wait{0};      // client: slot held, waiting for a connection, credits, the write
    Duration wire{0};          // network: the round trip less the server's own time
    Duration server_queue{0};  // server: waiting for a worker
    Duration server_exec{0};   // server: its handler (queue time not included)
    std::string verdict;       // "server: 2.900 s of 3.000 s queued for a worker", ...
  };
  std::optional<Blame> blame;
};

// What an ended client RPC's times say of where its time went: `submit` -> `granted` (a slot)
// -> `write_start` -> reply at `end`, of which the server's own `exec` (including `queue`,
// where it said); `attempts` made; `slot_limit` its target's max_rpcs_in_flight. The verdict
// names the largest part: "client: waited X of T for a max_rpcs_in_flight slot (N)",
// "client: waited X of T for a connection or credits", "network: X of T on the wire
// (the round trip less the server's time; N attempts)", "server: X of T queued for a worker",
// "server: X of T executing". Pure.
Op::Blame op_blame(TimePoint submit, TimePoint granted, TimePoint write_start, TimePoint end,
                   Duration exec, std::optional<Duration> queue, int attempts, int64_t slot_limit);

// Whose an op still in flight is, from its phase, with how long it has been in it: "server:
// queued 41.2 s for a worker (...)", "server: executing for 41.2 s (...)", "client: waiting
// 3.1 s for a max_rpcs_in_flight slot (...)", "client: waiting 2.0 s for credits (waiting for
// peer_credits on L -> P ...)", "network: waiting 2.0 s to connect to P (...)", "network or
// server: waiting 41.2 s for the reply from NID" (the client cannot
// tell which; the server's own list can), "network: attempt 3 failed, resending (...)". Pure.
std::string op_verdict_now(const Op& op, TimePoint now);

// Ceph's SLOW_OPS: the ops in flight at `now` for at least `threshold` -- or for at least
// `p99_factor` x their type's p99 (`type_p99(client, type)`; none: not known) and
// `p99_min` -- and the oldest of them.
struct SlowOpsRule {
  Duration threshold{0};  // health.slow_ops_s; 0: that trigger off
  double p99_factor = 0;  // health.slow_ops_p99_factor; 0: that trigger off
  Duration p99_min{0};    // health.slow_ops_p99_min_s
  std::function<std::optional<Duration>(bool client, uint32_t type)> type_p99;
  // How long `op` may be in flight before it is slow (none: never), and its type's p99
  // where that made the limit.
  struct Limit {
    Duration after;
    std::optional<Duration> p99;
  };
  std::optional<Limit> limit(const Op& op) const;
};
struct SlowOps {
  size_t count = 0;
  Op oldest;
  TimePoint since;       // when the first of them crossed its limit
  std::string evidence;  // "2 RPC(s) in flight over 30.000 s; the oldest: BLOCK_WRITE ..."
};
// None when no op is that old (or both triggers are off). `type_name` names a message type
// ("BLOCK_WRITE"). Pure.
std::optional<SlowOps> find_slow_ops(const std::vector<Op>& ops, TimePoint now,
                                     const SlowOpsRule& rule,
                                     const std::function<std::string(uint32_t)>& type_name);

// The slowest ops that ended within the last `window`, at most `capacity`, slowest first.
struct OpHistoryOptions {
  size_t capacity = 20;  // 0: none kept
  Duration window = std::chrono::minutes(10);
  Duration min_duration = std::chrono::milliseconds(1);  // faster ones never enter
};

class OpHistory {
 public:
  explicit OpHistory(OpHistoryOptions o = {}) : o_(o), capacity_(o.capacity) {}
  // Whether an op of `duration` ending at `now` could enter: cheap, no lock (the RPC path
  // asks before it builds the op). A true may still be turned away by add().
  bool wants(Duration duration, TimePoint now) const {
    if (capacity_.load(std::memory_order_relaxed) == 0 || duration < o_.min_duration) return false;
    return duration.count() >= floor_ns_.load(std::memory_order_relaxed) ||
           now.time_since_epoch().count() >= refresh_ns_.load(std::memory_order_relaxed);
  }
  // Keeps `op` (ended at op.ended) if it is among the slowest of the window.
  void add(Op op);
  // The ops kept as of `now`, slowest first.
  std::vector<Op> slowest(TimePoint now);
  // At run time: keep at most `capacity` (0: none; the slowest stay). The benchmark turns
  // the history off and on in one client, to weigh its cost without a second client.
  void set_capacity(size_t capacity);
  size_t capacity() const { return capacity_.load(std::memory_order_relaxed); }

 private:
  static Duration length(const Op& op) { return op.ended - op.started; }
  // Drops what left the window; resets the floor (the fastest kept when full, else the
  // minimum) and when it must be looked at again (the oldest's leaving).
  void trim_locked(TimePoint now) REQUIRES(mu_);

  const OpHistoryOptions o_;  // its capacity the first; capacity_ the one in force
  std::atomic<size_t> capacity_;
  Mutex mu_;
  std::vector<Op> ops_ GUARDED_BY(mu_);
  std::atomic<int64_t> floor_ns_{0};
  std::atomic<int64_t> refresh_ns_{INT64_MAX};
};

// A server's requests in flight. enter() files one; the Ticket it returns moves it to
// executing and, when destroyed (the reply sent), takes it off -- into `history` when slow.
class OpBoard {
 public:
  OpBoard(Clock& clock, OpHistory& history) : clock_(clock), history_(history) {}

  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& o) noexcept : board_(o.board_), it_(o.it_) { o.board_ = nullptr; }
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket();
    // Its handler starts (a worker took it up).
    void executing();
    // It waits to start, for `why` ("" : for a worker, as rpc.workers says).
    void queued(std::string why);
    // Its handler waits for `what` ("a block buffer: ..."); resumed() when it has it.
    // Both are in its timeline.
    void waiting(std::string what);
    void resumed();
    // How it ends (kept in the history): the reply's status.
    void ended(const Status& s);

   private:
    friend class OpBoard;
    using It = std::list<Op>::iterator;
    Ticket(OpBoard* b, It it) : board_(b), it_(it) {}
    OpBoard* board_ = nullptr;
    It it_;
  };

  // `op` (server side) arrived at op.started and waits in `phase` (queued for a worker, or
  // executing at once: an asynchronous handler).
  Ticket enter(Op op, OpPhase phase);
  std::vector<Op> in_flight() const;

 private:
  Clock& clock_;
  OpHistory& history_;
  mutable Mutex mu_;
  std::list<Op> ops_ GUARDED_BY(mu_);
};

// "12.345 s" / "850 ms" / "42 us": an op's ages in the views.
std::string op_duration_text(Duration d);

// The RPC of an xid and its frame's extension fields, for the lines logged about it
// (base/log.h: the JSON format's xid, job and trace_id). Points into `e`.
inline LogRpc log_rpc(uint64_t xid, const FrameExt& e) {
  return LogRpc{xid, e.job(), e.has_trace ? &e.trace : nullptr};
}

}  // namespace pfsnet
