// RpcServer: the serving side of an RpcEngine (rpc_engine.h has the whole contract).
// Requests are served by their type's handler -- inline on the I/O thread, on the worker
// pool, or answered later through a Responder -- run once however often the network
// delivers them (the reply cache), and answered on the path they came in on; a reply
// whose send fails is sent again on the best path left. Not installed.
//
// Locks: the reply cache's (replay_mu_) and the worker pool's; never the client side's.
// Handlers are registered before traffic starts and only read after.
#pragma once

#include <pfsnet/rpc.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "base/mutex.h"
#include "net/net.h"
#include "rpc/op_tracker.h"
#include "rpc/reply_cache.h"
#include "rpc/request_scheduler.h"
#include "rpc/rpc_options.h"
#include "rpc/worker_pool.h"
#include "stats/rpc_stats.h"

namespace pfsnet {

class RpcServer {
 public:
  // `stats` (the engine's, switched at run time) and `names` outlive the server.
  RpcServer(Net& net, const RpcOptions& opts, const std::atomic<RpcStats*>& stats, TypeNames& names,
            OpHistory& history);

  // As RpcEngine::handle / handle_async. REQUIRES: before any traffic; `type` not served.
  void handle(uint32_t type, std::string name, Handler h, HandlerMode mode, Execution exec);
  void handle_async(uint32_t type, std::string name, AsyncHandler h, Execution exec,
                    AsyncCredit credit);

  // A request from `from` (the engine's NetRx).
  void serve(const Nid& from, InFrame&& f, RxCredit credit);
  // A request that failed its data checksum: a CORRUPT error reply, not run; the reply
  // cache notes that it did not run (ReplyCache::refused), so its copy runs.
  void refuse_corrupt(const Nid& from, const FrameHeader& hdr, RxCredit credit);
  // Forgets idle client incarnations (every 10 s of `now`).
  void expire(TimePoint now);
  // Stops the workers (a request after it is answered kCancelled); requests a scheduling
  // policy holds start first.
  void stop();

  // The request scheduling policy (rpc/nrs.h) at run time: fifo (none: each request
  // starts as it arrives), or fair with `o`. Requests a policy going away holds start as
  // its requests in service end; a policy kept takes its new options from its next start.
  // Runs no handler on the caller's thread.
  void set_policy(NrsPolicyKind kind, const FairShareOptions& o);
  NrsPolicyKind policy() const;
  // The policy's figures, of the asynchronous and inline handlers' requests and of the
  // worker handlers' (their slots: rpc.workers); nullopt under fifo.
  struct PolicyFigures {
    RequestScheduler::Figures handlers, workers;
  };
  std::optional<PolicyFigures> policy_figures() const;

  // A reply as sent and, when its send fails, resent: shared with the reply cache when it
  // keeps it, else owned (one allocation less per reply of a repeatable request).
  struct ReplyRef {
    std::shared_ptr<const SavedReply> shared;
    SavedReply own;
    const SavedReply& get() const { return shared ? *shared : own; }
  };

  WorkerStats worker_stats() const { return workers_.stats(); }
  ReplyCacheStats replay_stats() const;
  // Requests in flight: waiting for a worker, on one, or not answered by an asynchronous
  // handler (rpc/op_tracker.h).
  std::vector<Op> ops() const;
  // An evicted client: its requests' records go; a copy of one is answered OUTCOME_UNKNOWN.
  size_t forget_client(const Nid& client);

 private:
  struct TypeInfo {
    Handler handler;
    AsyncHandler async;  // instead of handler
    HandlerMode mode = HandlerMode::kInline;
    bool once = true;           // Execution::kOnce or kOnceRestartSafe
    bool restart_safe = false;  // Execution::kOnceRestartSafe
    bool hold_credit = true;    // AsyncCredit::kHeld
  };
  std::string type_name(uint32_t type) const { return names_.name(type); }
  // Names `type` and files it as served, once run or repeatable as `exec` says.
  TypeInfo& add_type(uint32_t type, std::string name, Execution exec);
  // A request admitted and let in by the policy (`slot`: its place in service, given back
  // once its reply is sent; empty under fifo): to its handler.
  // `op`: its place on the board since it arrived, when the policy held it.
  void start(const TypeInfo& t, const Nid& from, InFrame&& f, RxCredit credit, bool saved,
             RequestScheduler::Slot slot, std::optional<OpBoard::Ticket> op = std::nullopt);
  void serve_async(const TypeInfo& t, const Nid& from, InFrame&& f, RxCredit credit, bool saved,
                   RequestScheduler::Slot slot, std::optional<OpBoard::Ticket> op);
  // A request of an incarnation: runs (true) unless the reply cache has seen it, in which
  // case it is answered or dropped here (false). `copy`: flagged kFlagResend, of a type
  // that keeps no record of its own across a restart (ReplyCache::admit).
  bool admit(const Nid& from, const FrameHeader& h, bool copy);
  // A DONE message (rpc/reply_cache.h): applied, answered OK or with why it is malformed.
  void serve_done(const Nid& from, InFrame&& f, RxCredit credit);
  // `counted`: a handler ran, so its execution time goes into the statistics. `saved`:
  // the request was admitted by the reply cache, which keeps the reply and may name a
  // later path for it.
  // `queued`: how long a worker's request waited for it (sent back, recorded as RPC_QUEUE).
  void send_reply(const Nid& to, const FrameHeader& req, TimePoint received, RpcResponse&& r,
                  bool counted, bool saved = false, std::optional<Duration> queued = std::nullopt);
  // The request's job id and trace context, from its extension fields.
  static void take_extensions(const FrameHeader& h, RpcRequest* req);
  // The op of a request from `from` that arrived at `arrived`, for the board.
  static Op server_op(const Nid& from, const FrameHeader& h, TimePoint arrived);
  // At debug level: a request that came with extension fields, and its wait for a worker.
  void log_request(const Nid& from, const FrameHeader& h, std::optional<Duration> waited);
  // Sends `reply` to `to` back on the NI `local` (packed; 0: any), resent on the best path
  // left when that send fails; its deadline runs from `now`.
  void send_reply_frame(const Nid& to, const Nid& local, ReplyRef reply, TimePoint now);

  Net& net_;
  const RpcOptions opts_;
  const std::atomic<RpcStats*>& stats_;
  TypeNames& names_;
  Clock& clock_;
  WorkerPool workers_;
  std::unordered_map<uint32_t, TypeInfo> types_;
  OpBoard board_;  // requests a worker or an asynchronous handler has

  // The scheduling policy in force, for the asynchronous and inline handlers' requests
  // ([0]) and the worker handlers' ([1], as many slots as workers: more would only queue
  // for a worker first come, first served); null: fifo (one atomic load per request). One
  // replaced stays (in nrs_all_) for the slots of the requests it started.
  std::atomic<RequestScheduler*> nrs_[2] = {nullptr, nullptr};
  mutable Mutex nrs_mu_;
  std::vector<std::unique_ptr<RequestScheduler>> nrs_all_ GUARDED_BY(nrs_mu_);

  // The memory of requests run (exactly-once).
  mutable Mutex replay_mu_;
  ReplyCache replay_ GUARDED_BY(replay_mu_);
  TimePoint replay_swept_ GUARDED_BY(replay_mu_);  // idle incarnations: every 10 s
};

}  // namespace pfsnet
