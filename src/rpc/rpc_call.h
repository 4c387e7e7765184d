// The inside of RpcClient, shared by rpc_client.cc (calls: slots, sends,
// resends, completion) and rpc_replies.cc (what comes back: replies, damaged frames,
// closed connections, deadlines). Not installed.
#pragma once

#include <atomic>
#include <deque>
#include <optional>

#include "rpc/rpc_client.h"

namespace pfsnet {

// One RPC, owned by shared pointers: the engine's tables hold it while it is on the wire
// (pending_) or waiting for a slot (a target's queue), and it holds itself (tx_keep)
// while a write of it is outstanding in the net. A failed attempt is resent (same xid)
// while the budget allows; at most one attempt's write is outstanding at a time (a
// resend starts after the previous write completed or failed).
//
// An error is delivered at once. A reply is delivered once both it and the completion of
// the write on the wire are in (the write times go into the statistics): whichever of
// on_reply and on_tx_done comes second delivers, decided under mu_ (reply_in, sent).
struct RpcClient::Call final : TxCompletion {
  RpcClient* eng = nullptr;
  uint64_t xid = 0;
  Nid dst;
  uint32_t type = 0;
  TimePoint deadline;                               // the whole RPC's
  TimePoint attempt_deadline GUARDED_BY(eng->mu_);  // this attempt's
  Duration attempt_timeout{0};
  uint8_t flags = 0;
  size_t reply_bulk = 0;  // CallOptions::reply_bulk
  // CallOptions::reply_memory
  std::function<std::optional<Buffer>(size_t, std::function<void()>)> reply_memory;
  bool urgent = false;      // CallOptions::urgent: no max_rpcs_in_flight slot
  bool one_stream = false;  // CallOptions::one_stream
  bool recover = false;     // CallOptions::recover
  bool no_delay = false;    // CallOptions::no_delay
  Payload payload;          // every attempt sends it (shared, never copied)
  BulkData bulk;
  std::optional<uint32_t> bulk_crc;  // CallOptions::bulk_crc
  FrameExt ext;  // CallOptions::job_id and trace, as every attempt's request carries them
  std::optional<std::pair<Nid, Nid>> pin;  // recovery pings: this path only, no resend
  Callback cb;

  RpcReply reply;
  std::atomic<bool> resolved{false};       // the outcome is decided (a reply, or an error)
  std::atomic<bool> delivered{false};      // the callback ran (or is running)
  CallPtr tx_keep GUARDED_BY(eng->mu_);    // this call, while a write of it is outstanding
  bool sent GUARDED_BY(eng->mu_) = false;  // the current attempt's write completed
  // Attempts whose write completed, and those of them the server answered CORRUPT (damaged
  // on the way: not run). While some written one may have run, every later attempt is a
  // copy (kFlagResend).
  int written GUARDED_BY(eng->mu_) = 0;
  int not_run GUARDED_BY(eng->mu_) = 0;
  bool reply_in GUARDED_BY(eng->mu_) = false;  // a reply arrived (resolved by it)
  // The current attempt's reply arrived damaged (or said its request did) before its write
  // completed: why, to resend with then; OK when not.
  Status damaged GUARDED_BY(eng->mu_);
  bool reply_verbs GUARDED_BY(eng->mu_) = false;  // ... from a verbs (RDMA) NI
  bool on_wire GUARDED_BY(eng->mu_) = false;
  bool queued GUARDED_BY(eng->mu_) = false;
  bool holds_slot GUARDED_BY(eng->mu_) = false;
  // The target it queued in (null: urgent); targets live as long as the engine.
  Target* target GUARDED_BY(eng->mu_) = nullptr;
  // The target whose unacknowledged xids hold its xid (its target, or its destination's
  // for an urgent call); null until it is on the wire, and for a DONE.
  Target* acct GUARDED_BY(eng->mu_) = nullptr;
  int attempts GUARDED_BY(eng->mu_) = 1;
  // CallOptions::recover, or a wait for a reconnect: the next attempt waits for this time
  // (expire() sends it); none while it is not set.
  std::optional<TimePoint> resend_at GUARDED_BY(eng->mu_);
  // The current attempt's write: times (copied into the reply when it is delivered), path
  // and connection.
  TxTimes tx_times GUARDED_BY(eng->mu_);
  // The op tracker's view (rpc/op_tracker.h): when the current attempt was armed (handed
  // to the net), and why the last one failed (none: OK).
  TimePoint armed_at GUARDED_BY(eng->mu_);
  TimePoint granted_at GUARDED_BY(eng->mu_);  // first armed: its slot granted
  Status last_failure GUARDED_BY(eng->mu_);
  // Each failed attempt, when and why (the first 8): the history's timeline.
  std::vector<OpEvent> failures GUARDED_BY(eng->mu_);

  void on_tx_done(const Status& s, const TxTimes& t) override { eng->on_tx_done(*this, s, t); }
};

// Reached only through RpcClient::targets_, under the client's mu_ (which clang cannot
// name from here: a Target holds no pointer to its engine).
struct RpcClient::Target {
  Nid dst;
  int64_t in_flight = 0;
  int64_t limit = 0;  // its own max_rpcs_in_flight; 0: the engine's
  std::deque<CallPtr> queue;
  RpcCounters counters;  // its RPCs that completed, and those that waited for a slot
  // The xids put on the wire to it that its server may not know yet are finished
  // (rpc/reply_cache.h), ascending: until a request to it carried a done mark above one,
  // or a DONE it answered covered it. At most RpcClient::unacked_cap_ (a new call waits).
  std::deque<uint64_t> unacked;
  bool done_out = false;  // a DONE to it is on the wire
  bool done_due = false;  // one should go (expire() sends it when nothing else does)
  bool legacy = false;    // its server does not know DONE (an older pfsnet): no cap
};

}  // namespace pfsnet
