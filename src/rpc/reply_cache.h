// ReplyCache: what a server remembers so that a request the network delivers twice (a
// resend after a lost reply, a reset connection, a black-holed rail) runs once -- Lustre's
// reply reconstruction in the small. Pure: the caller passes the time and holds the lock.
//
// A client engine puts its incarnation (random and nonzero per start) in every request
// and keeps its xids; so a copy of a request has the incarnation and xid of the first,
// and a restarted client has a new incarnation: new state, nothing of the old one runs
// again or blocks the new one. Per incarnation the cache holds the xids that ran or are
// running, each with its reply once done:
//
//   admit(xid) -- kRun: new, recorded as running; run it and finish() it.
//                 kRunning: a copy of one still running: do nothing (the first answers,
//                   on the path the latest copy came by -- finish() says which).
//                 kSaved: a copy of one that ran: send the saved reply again.
//                 kNotKept: ran, but its reply was not kept (over max_bytes), or the
//                   cache cannot tell whether it ran (its record went over max_entries):
//                   answer with an error, never run it again.
//                 kFinished: below what the client calls finished: it waits for
//                   nothing; drop it.
//
// The client says in every request that every xid of its below xid - done_lag is
// finished at its end (answered or given up): those records go. So in steady state an
// incarnation holds only the RPCs the client has on the wire to this server. One RPC
// that hangs at the client holds the mark back; then the records of everything since
// pile up to the bounds: max_entries xids (the lowest finished ones go first, and any
// xid at or below one that went is kNotKept) and max_bytes of saved replies. An
// incarnation not heard from for `idle` is forgotten (its client has restarted or left;
// a resend comes within the RPC's timeout, far less).
//
// Memory per client incarnation: about 100 bytes per record (map node, entry, saved
// header) plus the saved payloads and bulk, so at most max_entries x 100 + max_bytes
// (1024 and 1 MiB by default: 1.1 MiB); in steady state its RPCs in flight to this
// server x (100 bytes + reply). Types whose second run changes nothing (reads, probes,
// pings: Execution::kRepeatable) are not recorded at all.
//
// Thread safety: none; the engine calls it under its own mutex.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/clock.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include "wire/frame.h"
#include "wire/payload.h"

namespace pfsnet {

struct ReplyCacheOptions {
  size_t max_entries = 1024;    // records per client incarnation
  size_t max_bytes = 1u << 20;  // saved reply bytes (header, payload, bulk) per incarnation
  Duration idle = std::chrono::minutes(10);
};

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
  uint64_t from = 0;
  uint64_t local = 0;
};

enum class Admit { kRun, kRunning, kSaved, kNotKept, kFinished };
std::string_view admit_name(Admit a);

struct Admission {
  Admit what = Admit::kRun;
  std::shared_ptr<const SavedReply> reply;  // kSaved
};

struct ReplyCacheStats {
  size_t clients = 0;
  size_t entries = 0;
  size_t bytes = 0;
  // Copies answered from the cache, copies of running ones dropped, answered with an
  // error because not kept, dropped as finished at the client; records and replies that
  // went over the bounds; incarnations forgotten when idle.
  uint64_t replayed = 0, running_copies = 0, not_kept = 0, finished_copies = 0;
  uint64_t evicted_entries = 0, unsaved_replies = 0, idle_clients = 0;
};

class ReplyCache {
 public:
  explicit ReplyCache(ReplyCacheOptions o = {}) : opts_(o) {}

  // A request of `incarnation` (nonzero) with `xid` and `done_lag` arrived by `path`.
  Admission admit(uint64_t incarnation, uint64_t xid, uint32_t done_lag, ReplyPath path,
                  TimePoint now);
  // The request admitted kRun is done: keeps `reply` (within max_bytes). Returns the
  // path the reply goes on -- the latest copy's -- or nothing when the record is gone
  // (the client finished with it meanwhile: the reply goes on the first path).
  std::optional<ReplyPath> finish(uint64_t incarnation, uint64_t xid,
                                  std::shared_ptr<const SavedReply> reply);
  // Forgets incarnations not heard from within `idle`. Returns how many.
  size_t expire(TimePoint now);

  ReplyCacheStats stats() const;
  const ReplyCacheOptions& options() const { return opts_; }

 private:
  struct Entry {
    bool running = true;
    bool kept = false;  // done, reply saved (else done, reply not kept)
    ReplyPath path;
    std::shared_ptr<const SavedReply> reply;
  };
  struct Client {
    uint64_t done_below = 0;   // every xid below it is finished at the client
    uint64_t evicted_max = 0;  // the highest record that went over max_entries
    size_t bytes = 0;
    TimePoint last;
    std::map<uint64_t, Entry> entries;
  };
  // Lets the record at `it` go, with its saved reply's bytes.
  std::map<uint64_t, Entry>::iterator erase(Client& c, std::map<uint64_t, Entry>::iterator it);
  void forget_below(Client& c, uint64_t mark);
  void bound_entries(Client& c);

  ReplyCacheOptions opts_;
  std::unordered_map<uint64_t, Client> clients_;
  size_t entries_ = 0, bytes_ = 0;
  ReplyCacheStats counts_;
};

}  // namespace pfsnet
