// RpcEngine: requests and replies over Net, matched by xid.
//
// Client side: call() blocks until the reply or an error; call_async() runs a callback.
// Every RPC ends with a reply or a clear error -- timeout (its deadline, by default
// transaction_timeout), unreachable or rejected peer, connection closed before the reply,
// or cancelled at shutdown. At most max_rpcs_in_flight RPCs per target are on the wire;
// the rest queue (their channel wait grows) and keep their deadline.
//
// Server side: a handler per message type runs inline on the I/O thread (kInline: must
// not block; the fastest path) or on the worker pool (kWorker). Execution time runs from
// the request being completely received until the reply is handed to the network; it
// travels in the reply header.
//
// Bulk: a write carries its data with the request (one round trip), a read returns it
// with the reply; 0 to 2 x maxBlockSize bytes either way.
//
// Threads: call/call_async/tick/shutdown from any thread. Async callbacks run on an I/O
// thread, a worker, or the thread of tick()/shutdown(); they must not block. Register
// handlers before traffic starts.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/config.h"
#include "base/periodic.h"
#include "net/net.h"
#include "rpc/worker_pool.h"
#include "stats/rpc_stats.h"

namespace pfsnet {

// Timings of one RPC, from the client's point of view (ARCHITECTURE.md "RPC statistics").
struct RpcTimes {
  TimePoint submit;            // call() entered
  TimePoint write_start;       // request's first byte handed to the socket
  TimePoint write_done;        // request's last byte handed to the socket
  TimePoint reply_first_byte;  // first byte of the reply read
  TimePoint reply_complete;    // reply completely received
};

struct RpcReply {
  Status status;
  Buffer payload;
  Buffer bulk;
  Duration exec_time{0};  // server execution time, from the reply header
  RpcTimes times;
  uint64_t bytes_sent = 0;      // request frame, header included
  uint64_t bytes_received = 0;  // reply frame, header included

  Duration round_trip() const { return times.reply_complete - times.write_start; }
  Duration latency() const { return round_trip() - exec_time; }
  Duration channel_wait() const { return times.write_start - times.submit; }
};

// Totals since start, for tuning: the RPCs this node called that got their reply, the
// sum of their round trips (write to reply, the latency the network adds), the bytes of
// their request and reply frames, and the calls that found max_rpcs_in_flight RPCs to
// their target on the wire and queued.
struct RpcCounters {
  uint64_t completed = 0;
  uint64_t round_trip_ns = 0;
  uint64_t bytes = 0;
  uint64_t slot_waits = 0;
};

struct CallOptions {
  Duration timeout{0};  // 0: the engine's default (transaction_timeout)
  // Recovery pings: exactly this path (local NID -> peer NID), and no resend.
  std::optional<std::pair<Nid, Nid>> via;
};

struct RpcRequest {
  Nid from;
  uint32_t type = 0;
  Buffer payload;
  Buffer bulk;
};

struct RpcResponse {
  Status status;
  Buffer payload;
  BulkData bulk;
  size_t bulk_limit = SIZE_MAX;  // reply with only the first bulk_limit bytes of `bulk`
};

using Handler = std::function<RpcResponse(RpcRequest&)>;
enum class HandlerMode { kInline, kWorker };

struct RpcOptions {
  int64_t max_rpcs_in_flight = 8;
  int workers = 2;
  Duration default_timeout = std::chrono::seconds(50);
  uint32_t max_bulk = 2 * 1024 * 1024;
  // A blocking call() spins this long for its reply before sleeping (one caller at a
  // time); a reply within it costs no thread wake-up. 0 disables spinning.
  std::chrono::microseconds spin{100};
  // Resends (LNet health): a request whose attempt fails on the network (send failed,
  // connection closed before the reply, no reply within the attempt's deadline) is sent
  // again -- on another path when there is a healthier one -- up to retry_count times
  // within its timeout. Each attempt gets timeout / (retry_count + 1).
  int64_t retry_count = 2;
  // Recovery pings of unhealthy NIs (Net::recovery_due) are sent from tick().
  bool recovery_pings = true;

  // max_rpcs_in_flight, the default timeout (transaction_timeout), max_bulk (2 x
  // maxBlockSize) and retry_count of a node's config.
  static RpcOptions from(const Config& cfg);
};

class RpcEngine final : public NetRx {
 public:
  using Callback = std::function<void(RpcReply&&)>;

  // Attaches itself to `net` as its receiver. `net` must outlive the engine. With
  // `stats`, every reply received and every request executed is recorded there (and
  // tick() drives its once-a-second processing); it must outlive the engine.
  RpcEngine(Net& net, RpcOptions opts, RpcStats* stats = nullptr);
  ~RpcEngine() override;

  // Names a message type (for statistics and errors); optional for types only called.
  // pfsnet's own types (rpc/msg_types.h) are named from the start. REQUIRES: `type` is
  // not one of them under another name.
  void define_type(uint32_t type, std::string name);
  // Serves `type`. REQUIRES: before any traffic; `type` not served already.
  void handle(uint32_t type, std::string name, Handler h, HandlerMode mode);
  // Serves one of pfsnet's own types, under its registered name.
  void handle(uint32_t type, Handler h, HandlerMode mode);
  // "PING", or "type-N" for an unnamed type.
  std::string type_name(uint32_t type) const;
  // The type named `name` (defined or handled here), or 0.
  uint32_t type_by_name(std::string_view name) const;

  RpcReply call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk = nullptr,
                CallOptions opts = {});
  void call_async(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk, Callback cb,
                  CallOptions opts = {});

  // Fails RPCs (and queued sends) whose deadline is at or before `now`, and processes the
  // statistics of every second passed. Returns how many RPCs it failed.
  size_t tick(TimePoint now);
  // Runs tick() every `period` of real time on a thread of its own until shutdown().
  void start_ticker(Duration period);
  // Fails every pending and queued RPC with kCancelled, stops the ticker and workers.
  // New calls fail at once. Idempotent.
  void shutdown();

  // Changes max_rpcs_in_flight at run time: raised, queued RPCs go at once; lowered,
  // RPCs on the wire finish and no new one starts until a target is below the limit.
  void set_max_rpcs_in_flight(int64_t n);

  // Turns statistics recording on (a RpcStats that outlives the engine) or off (null).
  void set_stats(RpcStats* stats) { stats_.store(stats, std::memory_order_release); }

  // Fails every RPC to any of `nids`, on the wire or queued, with `s` (no resend): the
  // MGS declared that node dead.
  size_t fail_calls_to(const std::vector<Nid>& nids, const Status& s);

  RpcCounters counters() const;
  int64_t max_rpcs_in_flight() const;

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

  // Recovery pings sent, and how many succeeded.
  uint64_t recovery_pings_sent() const { return recovery_sent_.load(); }
  uint64_t recovery_pings_ok() const { return recovery_ok_.load(); }

  struct Call;
  struct Target;

 private:
  Call* new_call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk, CallOptions o);
  void submit(Call* c);
  void send_call(Call* c);
  void resolve_error(Call* c, const Status& s);
  // Sends `c` again after a failed attempt when its budget allows; false when not.
  bool try_resend(Call* c, const Status& s, const TxTimes& failed_path);
  // The error a call ends with once it cannot be resent.
  Status final_error(Call* c, const Status& s);
  void send_recovery_pings(TimePoint now);
  void expire_call(Call* c, const Status& s);
  void finish_slot(Call* c);
  void deliver(Call* c);
  void unref(Call* c);
  void serve(const Nid& from, InFrame&& f, RxCredit credit);
  void on_reply(InFrame&& f, RxCredit credit);
  // `counted`: a handler ran, so its execution time goes into the statistics.
  void send_reply(const Nid& to, const FrameHeader& req, TimePoint received, RpcResponse&& r,
                  bool counted);

  Net& net_;
  RpcOptions opts_;
  std::atomic<RpcStats*> stats_{nullptr};
  Clock& clock_;
  WorkerPool workers_;

  struct TypeInfo {
    std::string name;
    Handler handler;
    HandlerMode mode = HandlerMode::kInline;
  };
  std::unordered_map<uint32_t, TypeInfo> types_;

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Call*> pending_;                    // xid -> call on the wire
  std::unordered_map<uint64_t, std::unique_ptr<Target>> targets_;  // packed NID
  uint64_t next_xid_ = 1;
  bool shut_ = false;
  std::atomic<uint64_t> late_replies_{0};
  std::atomic<int> spinners_{0};
  std::atomic<uint64_t> recovery_sent_{0}, recovery_ok_{0};
  std::atomic<uint64_t> completed_{0}, round_trip_ns_{0}, bytes_{0}, slot_waits_{0};

  Periodic ticker_;
};

}  // namespace pfsnet
