// ReplyCache: what a server remembers so that a request the network delivers twice (a
// resend after a lost reply, a reset connection, a black-holed rail) runs once -- Lustre's
// reply reconstruction in the small. Pure: the caller passes the time and holds the lock.
//
// A client engine puts its incarnation (random and nonzero per start) in every request
// and keeps its xids; so a copy of a request has the incarnation and xid of the first,
// and a restarted client has a new incarnation: new state, nothing of the old one runs
// again or blocks the new one. Per incarnation the cache holds the xids that ran or are
// running, each with its reply once done, until the client has shown that it is finished
// with them (answered or given up at its end) -- never because of a count or a size:
//
//   admit(xid) -- kRun: new, recorded as running; run it and finish() it.
//                 kRunning: a copy of one still running: do nothing (the first answers,
//                   on the path the latest copy came by -- finish() says which).
//                 kSaved: a copy of one that ran: send the saved reply again.
//                 kFinished: one the client said it is finished with: it waits for
//                   nothing; drop it.
//                 kOverWindow: new, but the incarnation already has `window` records the
//                   client has not acknowledged: refused (a protocol error), not recorded,
//                   not run. A correct client never gets it (below).
//                 kUnknown: a copy of a request of an incarnation this cache let go
//                   (silent for `idle`, or its client evicted): whether it ran cannot be
//                   told, so it is not run; the client is told the outcome is unknown.
//                 kBeforeStart: a copy (its client wrote an earlier one to a connection:
//                   kFlagResend) of which the cache has no record, within `restart_window`
//                   of the cache's start: the earlier copy may have reached the server's
//                   previous run, which may have run it and kept nothing -- so it is not
//                   run, and the client is told the outcome is unknown. After the window
//                   no copy sent before the start can still come (a client gives up at its
//                   deadline), so a copy with no record is one whose earlier copies never
//                   arrived: it runs. The caller does not ask this for a type whose copies
//                   after a restart are its handler's to judge (Execution::kOnceRestartSafe).
//
// How a client shows it is finished, two ways, both exact:
//   - every request's done_lag: every xid below xid - done_lag is finished (the oldest
//     RPC the client has on the wire, to any server, is at that mark);
//   - a DONE message (kMsgRpcDone, `DoneAck` below) when one RPC holds that mark back: an
//     upper bound U and the xids below U still open at the client; every other xid below
//     U is finished.
// The client engine keeps, per server, at most `window` requests the server cannot yet
// know are finished (rpc_client.h): it sends DONE long before, and a new call waits
// rather than go past it. So the records of one incarnation never exceed `window`, and the
// memory per client incarnation is at most window x (about 100 bytes + its largest reply)
// -- in steady state its RPCs in flight to this server x (100 bytes + reply). Types whose
// second run changes nothing (reads, probes, pings: Execution::kRepeatable) are not
// recorded at all.
//
// Thread safety: none; the engine calls it under its own mutex.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/clock.h>
#include <pfsnet/nid.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "wire/frame.h"
#include "wire/payload.h"

namespace pfsnet {

struct ReplyCacheOptions {
  size_t window = 1024;  // records per client incarnation (rpc.reply_window)
  Duration idle = std::chrono::minutes(10);
  // Incarnations let go (idle, evicted) whose copies are still told apart (kUnknown).
  size_t retired = 4096;
  // How long after its start a copy it has no record of may be one sent to the server's
  // previous run (kBeforeStart): the longest RPC deadline (the engine's default timeout).
  Duration restart_window = std::chrono::seconds(50);
};

// A DONE message's body: every xid of the sender's incarnation below `upper` is finished at
// its end except those in `open` (sorted, each below `upper`). Wire: upper u64, count u32,
// count x u64.
struct DoneAck {
  uint64_t upper = 0;
  std::vector<uint64_t> open;
};
// At most this many open xids in one DONE (its payload stays under 64 KiB).
inline constexpr size_t kMaxDoneOpen = 8000;
Buffer encode_done(const DoneAck& d);
// Errors (Code::kProtocol): short, long, more than kMaxDoneOpen, not sorted, or one not
// below `upper`.
Result<DoneAck> decode_done(std::span<const uint8_t> bytes);

// A reply as first sent, kept to be sent again (by the cache, and when its send fails).
struct SavedReply {
  FrameHeader hdr;
  Payload payload;  // shared with the frames that send it
  BulkData bulk;
  size_t bulk_limit = SIZE_MAX;
  std::optional<uint32_t> bulk_crc;  // RpcResponse::bulk_crc
  size_t bytes() const;
};

// The path a reply goes back on: the client's NID it came from and the local NI it came
// in on (packed).
struct ReplyPath {
  Nid from;   // the client's NI
  Nid local;  // this server's NI the request came in on
};

enum class Admit { kRun, kRunning, kSaved, kFinished, kOverWindow, kUnknown, kBeforeStart };
std::string_view admit_name(Admit a);

struct Admission {
  Admit what = Admit::kRun;
  std::shared_ptr<const SavedReply> reply;  // kSaved
};

struct ReplyCacheStats {
  size_t clients = 0;
  size_t entries = 0;
  size_t bytes = 0;
  size_t max_entries = 0;  // the most records one incarnation holds now
  size_t window = 0;       // ReplyCacheOptions::window
  // Copies answered from the cache, copies of running ones dropped, dropped as finished at
  // the client, answered "outcome unknown" (their incarnation let go); new requests refused
  // over the window; DONE messages applied; incarnations let go when idle or evicted;
  // copies answered "outcome unknown" as possibly sent before the cache's start.
  uint64_t replayed = 0, running_copies = 0, finished_copies = 0, unknown = 0;
  uint64_t before_start = 0;
  uint64_t over_window = 0, done_acks = 0, idle_clients = 0, evicted_clients = 0;
};

class ReplyCache {
 public:
  // `started`: when the server (its engine) started -- where restart_window runs from.
  explicit ReplyCache(ReplyCacheOptions o = {}, TimePoint started = {})
      : opts_(o), started_(started) {}

  // A request of `incarnation` (nonzero) with `xid` and `done_lag` arrived by `path`;
  // `copy`: its client wrote an earlier copy (kFlagResend), and the type keeps no record
  // of its own across the server's restart (kBeforeStart above).
  Admission admit(uint64_t incarnation, uint64_t xid, uint32_t done_lag, ReplyPath path,
                  TimePoint now, bool copy = false);
  // The request admitted kRun is done: keeps `reply` until the client is finished with it.
  // Returns the path the reply goes on -- the latest copy's -- or nothing when the record
  // is gone (the client finished with it meanwhile: the reply goes on the first path).
  std::optional<ReplyPath> finish(uint64_t incarnation, uint64_t xid,
                                  std::shared_ptr<const SavedReply> reply);
  // A request of `incarnation` arrived damaged and was answered CORRUPT, not run: a note
  // that it did not run here, so that its copy -- flagged a resend when that answer was
  // damaged too, as the client then cannot tell -- runs rather than be taken for one that
  // may have come before the start (kBeforeStart). Within the window, like any record.
  void refused(uint64_t incarnation, uint64_t xid, TimePoint now);
  // A DONE message of `incarnation`: what it says is finished goes (a running record's
  // reply is not kept when it finishes). An older DONE than one applied changes nothing.
  void done(uint64_t incarnation, const DoneAck& d, TimePoint now);
  // Lets go every incarnation whose last request came from `client` (packed NID), as for
  // an evicted client. Returns how many.
  size_t evict(const Nid& client);
  // Forgets incarnations not heard from within `idle`. Returns how many.
  size_t expire(TimePoint now);

  ReplyCacheStats stats() const;
  const ReplyCacheOptions& options() const { return opts_; }

 private:
  struct Entry {
    bool running = true;
    bool finished = false;  // the client finished with it while it ran: not kept
    bool not_run = false;   // refused() it: arrived damaged, did not run
    ReplyPath path;
    std::shared_ptr<const SavedReply> reply;
  };
  struct Client {
    uint64_t done_below = 0;     // every xid below it is finished at the client
    uint64_t done_upper = 0;     // ... and every one below this not in `open` (DONE)
    std::vector<uint64_t> open;  // sorted, in [done_below, done_upper)
    uint64_t max_xid = 0;
    Nid from;  // the NID its latest request came from
    size_t bytes = 0;
    TimePoint last;
    std::map<uint64_t, Entry> entries;
  };
  bool finished(const Client& c, uint64_t xid) const;
  // `xid` of `incarnation` was sent before this cache let that incarnation go.
  bool of_retired(uint64_t incarnation, uint64_t xid) const;
  // Lets the record at `it` go, with its saved reply's bytes.
  std::map<uint64_t, Entry>::iterator erase(Client& c, std::map<uint64_t, Entry>::iterator it);
  void forget_below(Client& c, uint64_t mark);
  // Lets go every incarnation `pred` holds for; returns how many.
  size_t retire_if(const std::function<bool(const Client&)>& pred);
  // Lets `it` go, remembering its highest xid (kUnknown for copies of it).
  std::unordered_map<uint64_t, Client>::iterator retire(
      std::unordered_map<uint64_t, Client>::iterator it);

  ReplyCacheOptions opts_;
  const TimePoint started_;
  std::unordered_map<uint64_t, Client> clients_;
  // Incarnations let go, oldest first, with the highest xid each had sent.
  std::deque<std::pair<uint64_t, uint64_t>> retired_order_;
  std::unordered_map<uint64_t, uint64_t> retired_;
  size_t entries_ = 0, bytes_ = 0;
  ReplyCacheStats counts_;
};

}  // namespace pfsnet
