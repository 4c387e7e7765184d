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
// Inside: the client side (rpc_client.h: slots, xids, resends; one lock of its own) and
// the server side (rpc_server.h: handlers, reply cache, workers), which share nothing but
// the net, the statistics and the type names. The engine is the net's receiver and hands
// a reply to the one and a request to the other.
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

#include "net/net.h"
#include "rpc/reply_cache.h"
#include "rpc/rpc_client.h"
#include "rpc/rpc_options.h"
#include "rpc/rpc_server.h"
#include "rpc/worker_pool.h"
#include "stats/rpc_stats.h"

namespace pfsnet {

class RpcEngine final : public NetRx {
 public:
  using Callback = RpcClient::Callback;

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
  const TypeNames& type_names() const { return names_; }
  // The type named `name` (defined or handled here), or 0.
  uint32_t type_by_name(std::string_view name) const;

  RpcReply call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk = nullptr,
                CallOptions opts = {}) {
    return client_.call(dst, type, std::move(payload), std::move(bulk), opts);
  }
  void call_async(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk, Callback cb,
                  CallOptions opts = {}) {
    client_.call_async(dst, type, std::move(payload), std::move(bulk), std::move(cb), opts);
  }

  // Applies the RPC deadlines at `now`: an RPC past its deadline fails (queued for a slot
  // or on the wire); an attempt written and unanswered past its attempt deadline is a
  // remote timeout, reported to the net and resent while the budget allows. Returns how
  // many RPCs it failed or resent.
  size_t expire(TimePoint now);
  // The worker pool's queue and wait (rpc.workers threads).
  WorkerStats worker_stats() const { return server_.worker_stats(); }
  // The request scheduling policy as a server (rpc/nrs.h), changed at run time; its figures
  // (nullopt under fifo).
  void set_request_policy(NrsPolicyKind kind, const FairShareOptions& o) {
    server_.set_policy(kind, o);
  }
  NrsPolicyKind request_policy() const { return server_.policy(); }
  std::optional<RpcServer::PolicyFigures> request_policy_figures() const {
    return server_.policy_figures();
  }
  // The reply cache's figures (exactly-once execution of the requests served here).
  ReplyCacheStats replay_stats() const { return server_.replay_stats(); }
  // An evicted client (its NID): the reply cache lets its records go; a late copy of one of
  // its requests is answered OUTCOME_UNKNOWN. Returns how many incarnations went.
  size_t forget_client(const Nid& client) { return server_.forget_client(client); }
  // This engine's incarnation as a client (in every request it sends).
  uint64_t incarnation() const { return client_.incarnation(); }
  // The op tracker (rpc/op_tracker.h): this node's RPCs in flight now, as client and as
  // server, oldest first; and the slowest that ended within the history's window.
  std::vector<Op> ops_in_flight() const;
  std::vector<Op> ops_history() { return history_.slowest(net_.clock().now()); }
  OpHistory& history() { return history_; }
  // Fails every pending and queued RPC with kCancelled and stops the workers. New calls
  // fail at once. Idempotent.
  void shutdown();

  // Changes max_rpcs_in_flight at run time: raised, queued RPCs go at once; lowered,
  // RPCs on the wire finish and no new one starts until a target is below the limit.
  void set_max_rpcs_in_flight(int64_t n) { client_.set_max_rpcs_in_flight(n); }
  // Gives the targets in `limits` their own max_rpcs_in_flight (replacing every earlier
  // one; a target not named goes back to the node's), with the same effect at once.
  void set_peer_rpcs_in_flight(const std::vector<std::pair<Nid, int64_t>>& limits) {
    client_.set_peer_rpcs_in_flight(limits);
  }

  // What another part (the probe mesh) says of a path, set beside a slow RPC's network
  // verdict in the history; null: nothing. Clearing it waits for a look under way.
  void set_path_view(RpcClient::PathView v) { client_.set_path_view(std::move(v)); }

  // Turns statistics recording on (a RpcStats that outlives the engine) or off (null).
  void set_stats(RpcStats* stats) { stats_.store(stats, std::memory_order_release); }

  // Fails every RPC to any of `nids`, on the wire or queued, with `s` (no resend): the
  // MGS declared that node dead. `spare_recover`: not the calls that wait for a restarting
  // server (CallOptions::recover) -- they go on waiting, within their deadlines, for the
  // node's return (a server declared dead); without it, those end too (an evicted client's
  // revocations, this node's own eviction).
  size_t fail_calls_to(const std::vector<Nid>& nids, const Status& s, bool spare_recover = false) {
    return client_.fail_calls_to(nids, s, spare_recover);
  }

  RpcCounters counters() const { return client_.counters(); }
  int64_t max_rpcs_in_flight() const { return client_.max_rpcs_in_flight(); }
  // What RPCs to `dst` get: its own value, else the node's.
  int64_t max_rpcs_in_flight(const Nid& dst) const { return client_.max_rpcs_in_flight(dst); }

  // One target of this engine as a client: its slots and what its RPCs did so far.
  using TargetInfo = RpcClient::TargetInfo;
  // Every target called so far.
  std::vector<TargetInfo> targets() const { return client_.targets(); }
  // The most bulk a request or reply may carry (RpcOptions::max_bulk).
  uint32_t max_bulk() const { return max_bulk_; }

  size_t pending() const { return client_.pending(); }
  // RPCs to `dst` on the wire and waiting for a slot.
  std::pair<int64_t, size_t> target_load(const Nid& dst) const { return client_.target_load(dst); }
  // The targets with RPCs waiting for a max_rpcs_in_flight slot now.
  std::vector<Nid> waiting_targets() const { return client_.waiting_targets(); }
  uint64_t late_replies() const { return client_.late_replies(); }
  Net& net() { return net_; }
  Clock& clock() { return net_.clock(); }
  // How a caller that blocks for this engine's completions waits (RpcOptions::waiter):
  // call() does, and so must any wait above the engine that a reply ends.
  Waiter& waiter() { return client_.waiter(); }

  // NetRx.
  void on_message(const Nid& from, InFrame&& f, RxCredit credit) override;
  void on_connection_closed(uint64_t conn_id, const Nid& peer_nid, const Status& why) override;
  std::optional<Buffer> reply_memory(const FrameHeader& hdr,
                                     std::function<void()> cancel) override {
    return client_.reply_memory(hdr, std::move(cancel));
  }
  // A corrupt request gets a CORRUPT error reply (not run, not recorded by the reply
  // cache); a corrupt reply -- or that error -- has its RPC sent again, as a failed send
  // is (within retry_count and the deadline; then it fails with Code::kCorrupt).
  void on_corrupt(const Nid& from, const FrameHeader& hdr, RxCredit credit) override;

 private:
  Net& net_;
  const uint32_t max_bulk_;
  std::atomic<RpcStats*> stats_{nullptr};
  TypeNames names_;
  // The slowest RPCs lately, of both sides (rpc/op_tracker.h).
  OpHistory history_;
  // The two sides share nothing but the net, the statistics, the type names and the
  // history.
  RpcServer server_;
  RpcClient client_;
};

}  // namespace pfsnet
