// The RPC call and serve interface of libpfsnet: what a call returns, its options, and
// what a handler receives and answers (pfsnet::Node and the RPC engine use them).
// Thread safety: plain values.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/clock.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>
#include <pfsnet/trace_context.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace pfsnet {

// Timings of one RPC, from the client's point of view (docs/architecture.md "RPC statistics").
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
  // How long the request waited at the server for a worker before its handler ran (part
  // of exec_time), where the server says (a version-2 connection; a handler that runs on
  // arrival, HandlerMode::kInline, waits for none and says nothing).
  std::optional<Duration> queue_time;
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
// their target on the wire and queued; and the times a call found its slot free but its
// target's server holding as many requests of this client as it may (rpc.reply_cache_entries
// / 2 not yet acknowledged) and waited for a DONE's answer.
struct RpcCounters {
  uint64_t completed = 0;
  uint64_t round_trip_ns = 0;
  uint64_t bytes = 0;
  uint64_t slot_waits = 0;
  uint64_t ack_waits = 0;
};

struct CallOptions {
  Duration timeout{0};  // 0: the engine's default (transaction_timeout)
  // One attempt's deadline (an attempt unanswered by then is a remote timeout: its
  // connection is closed and the request resent). 0: timeout / (retry_count + 1). A call
  // the server may rightly hold longer -- a token request waiting for revocations, a
  // revocation waiting for writes to be acknowledged -- gives its whole timeout, so a slow
  // answer is not taken for a lost one (Lustre's lock enqueues have early replies instead).
  Duration attempt_timeout{0};
  // Recovery pings: exactly this path (local NID -> peer NID), and no resend.
  std::optional<std::pair<Nid, Nid>> via;
  // The most bulk the reply may carry (a read), or 0. Over RDMA the server then writes the
  // reply's bulk straight into memory registered here for it (o2iblnd's GET), instead of
  // this node reading it from the server. A reply with more bulk still arrives whole.
  size_t reply_bulk = 0;
  // Sent at once, not held to max_rpcs_in_flight: for a call that others' I/O waits on
  // (a token request or revocation), so that it never waits behind that I/O for a slot
  // -- Lustre serves lock callbacks apart from I/O for the same reason.
  bool urgent = false;
  // On the path's first connection, never one of its bulk connections (lnet.conns_per_peer):
  // for a bandwidth probe, whose train must share one TCP stream -- spread over several, its
  // RPCs arrive a connection's share of the link apart, and the train reads too fast.
  bool one_stream = false;
  // The server keeps what it executed across its own restart (a block write:
  // storage/last_rcvd.h), so a resend to a server that restarted is safe: when the
  // call's connection fails and its first resend fails too (the server killed, not yet
  // back), it is resent every kRecoverResend until its deadline -- not retry_count times
  // at once -- and reaches the server once it is back (Lustre's resend after recovery).
  // So too while the MGS has the server declared dead: the call is not failed with the
  // others, and waits, within its deadline, for the server to register again.
  bool recover = false;
  // A resend after a failed connect goes at once, and fails at once while the peer's
  // reconnect backs off past its attempt's deadline (ptlrpc's rq_no_delay): for a caller
  // with somewhere else to go (a node failing over to the next MGS). Without it, such a
  // resend waits for the peer's next connect when that comes within the RPC's deadline.
  bool no_delay = false;
  // The CRC-32C (seed 0) of the request's bulk where the caller took it already (folded
  // into the copy that made the bulk): the data checksum then joins it, no pass over the
  // bulk. Wrong here, the server refuses the request as corrupt.
  std::optional<uint32_t> bulk_crc;
  // Memory of the caller's for the reply's bulk to be received into (a read into the
  // application's own buffer: one copy fewer). Called once the reply's header has come,
  // on an I/O thread, with the bulk's length and `cancel` (closes the connection receiving
  // it: for a caller that gives up before the reply is in); returns a Buffer of exactly
  // that length -- the transport writes it until the Buffer is freed, which is how the
  // caller learns it is done -- or nullopt for a buffer of the transport's. Called again
  // for a resent request's reply. TCP only (and an emulated link whose inbound pipe holds
  // no frames): RDMA has its sink (reply_bulk).
  std::function<std::optional<Buffer>(size_t bytes, std::function<void()> cancel)> reply_memory;
  // The job the call works for (Lustre's jobid: 1 to 64 printable ASCII bytes, no space;
  // empty: none) and its W3C trace context: the server's handler reads them
  // (RpcRequest::job_id, trace). They travel on wire-version-2 connections whose ends both
  // announce the feature (docs/wire_format.md); a version-1 peer never sees them. A job id
  // of another form fails the call with INVALID_ARGUMENT, unsent.
  std::string job_id;
  std::optional<TraceContext> trace;
};
inline constexpr Duration kRecoverResend = std::chrono::milliseconds(250);

struct RpcRequest {
  Nid from;
  uint32_t type = 0;
  Buffer payload;
  Buffer bulk;
  // The sender's engine incarnation (random per start, 0 from a sender that keeps none)
  // and the request's xid: a resend carries the same pair. What a server that keeps a
  // record across its own restart (a block write's, Lustre's last_rcvd) keys it by.
  uint64_t incarnation = 0, xid = 0;
  // The CRC-32C (seed 0) of `bulk` as the sender sealed it, checked on arrival (none when
  // the sender sealed nothing): what a store keeps with the data, to reply with
  // (RpcResponse::bulk_crc) -- the writer's checksum travels on to the reader.
  std::optional<uint32_t> bulk_crc;
  // The caller's CallOptions::job_id and trace, where its connection carried them.
  std::string job_id;
  std::optional<TraceContext> trace;
};

struct RpcResponse {
  Status status;
  Buffer payload;
  BulkData bulk;
  size_t bulk_limit = SIZE_MAX;  // reply with only the first bulk_limit bytes of `bulk`
  // The CRC-32C (wire/data_crc.h's, seed 0) of the bulk replied -- its first bulk_limit
  // bytes -- where the handler keeps it with the data (a store's checksum, a constant
  // pattern's): the reply's data checksum then takes no pass over the bulk, and bytes
  // damaged since their CRC was taken fail the client's check. Wrong here, the reply
  // fails as corrupt.
  std::optional<uint32_t> bulk_crc;
};

using Handler = std::function<RpcResponse(RpcRequest&)>;
enum class HandlerMode { kInline, kWorker };

// Answers one request later, from any thread: what an asynchronous handler gets, so a
// request that must wait (for a buffer, a lock, a disk) holds no thread meanwhile. The
// request's receive credit stays taken until the reply (unless its type was served with
// AsyncCredit::kReturned), so a peer has at most its peer_credits requests waiting on a
// server: credits, not retries, push back. Move-only;
// reply() once (later calls do nothing); destroyed unanswered, the request gets a
// kCancelled error. REQUIRES: answered or destroyed before the engine is destroyed.
class Responder {
 public:
  using Send = std::function<void(RpcResponse&&)>;
  // What the request waits for ("" = nothing any more): the engine's op tracker.
  using Note = std::function<void(std::string_view waiting_for)>;
  Responder() = default;
  explicit Responder(Send send, Note note = nullptr)
      : send_(std::move(send)), note_(std::move(note)) {}
  Responder(Responder&& o) noexcept
      : send_(std::exchange(o.send_, nullptr)), note_(std::exchange(o.note_, nullptr)) {}
  Responder& operator=(Responder&& o) noexcept {
    if (this != &o) {
      drop();
      send_ = std::exchange(o.send_, nullptr);
      note_ = std::exchange(o.note_, nullptr);
    }
    return *this;
  }
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  ~Responder() { drop(); }

  void reply(RpcResponse r) {
    if (Send s = std::exchange(send_, nullptr)) s(std::move(r));
  }
  bool answered() const { return !send_; }
  // The handler waits for a resource of its own: `pfsnet diag ops` shows the request in
  // phase "waiting", for `what` ("a block buffer: all 64 in use, ..."), until resumed().
  void waiting_for(std::string_view what) {
    if (note_ && send_) note_(what);
  }
  void resumed() {
    if (note_ && send_) note_({});
  }

 private:
  void drop() {
    if (!send_) return;
    RpcResponse r;
    r.status = Status(Code::kCancelled, "request dropped by its handler without a reply");
    reply(std::move(r));
  }
  Send send_;
  Note note_;
};
// An asynchronous handler: runs on the I/O thread (it must not block) and answers through
// the Responder now or later.
using AsyncHandler = std::function<void(RpcRequest&, Responder)>;
// What a server does with a copy of a request that already ran (the network delivered it
// twice: a resend after a lost reply or a reset connection). kOnce: the request runs once;
// the copy gets the saved reply (exactly-once; rpc/reply_cache.h). kRepeatable: the copy
// runs again -- for reads, probes and queries, whose second run changes nothing and whose
// replies may be large. A copy that comes to a server which restarted since an earlier
// copy was sent finds no record there: kOnce answers it OUTCOME_UNKNOWN, not run (it may
// have run before the restart, and its effects outlived the process). kOnceRestartSafe is
// kOnce whose copies after a restart go to the handler, because the handler keeps its own
// record of what ran across the restart (a block write's last_rcvd, storage/last_rcvd.h)
// or what the request acts on went with the process (a token's grant, an MGS
// registration: a copy acts on the new state as a first arrival would).
enum class Execution { kOnce, kRepeatable, kOnceRestartSafe };

// What a request an asynchronous handler keeps waiting holds of its sender's window.
// kHeld: its receive credit, until the reply -- a peer has at most peer_credits requests
// waiting, so credits push back (I/O). kReturned: nothing -- the credit goes back at once,
// for requests that wait on other messages from the same peer (a token acquire waits for
// its own node's answer to a revocation): held, a peer's waiting requests could take every
// credit that answer needs.
enum class AsyncCredit { kHeld, kReturned };

}  // namespace pfsnet
