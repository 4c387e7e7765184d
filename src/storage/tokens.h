// Byte-range read and write tokens, the GPFS paper's token scheme in the small. A client
// writes a range of a striped file only while it holds a write token covering it, and
// reads it (or keeps cached or read-ahead blocks of it) only while it holds a read or a
// write token there. Read tokens are shared among readers; a write token conflicts with
// every other node's token of the range, a read token with other nodes' write tokens. The
// token manager of a file is its layout's first server (every client names the same
// servers in the same order, so all agree on it without asking anyone). A client asks for
// the range it must have (required: the blocks it writes or reads now) and may ask for a
// range it would like (desired: on to `want_end`), as GPFS does. The manager grants at
// once when no other node holds a conflicting token overlapping the required range, with
// as much of the desired range as no other node holds in conflict and no other waiting
// request needs. Otherwise it first revokes from each node whose token conflicts with the
// required range, offering it the desired range too, and the holder decides how much it
// gives up (GPFS's rule): all of the required range, and of the rest up to the desired
// end what it does not use -- it keeps from the first place at or past the required end
// where it writes or reads now, has writes under way, or a writer or reader of its left
// off (where a sequential one goes on). For what it gives up it stops starting writes,
// waits until its writes there are acknowledged by the servers, and answers with the end
// of what it released; given up to a writer, its cached blocks there go with the token;
// given up to a reader, it keeps a read token there and its cache (a downgrade: what it
// wrote is on the servers now, and no one else writes there without taking that read
// token first). So a sequential writer holds one token for its whole run, writes to
// disjoint ranges proceed in parallel, overlapping ones one after another, readers share,
// and no node reads a cached block another node has since written.
//
// Requests of one file are decided in arrival order among those whose required ranges
// overlap; one waiting for a revocation does not hold up the others. A holder that does
// not answer its revocation (dead, past the RPC timeout, or an answer out of range) loses
// all its tokens on that file. A node's own requests wait while a revocation from it is
// out (a grant then could be undone by its answer). Token RPCs are urgent
// (CallOptions::urgent): they never wait for a max_rpcs_in_flight slot behind the writes a
// revocation may be waiting for; and their requests give back their receive credit at
// once (AsyncCredit::kReturned): a node's 16 writers' waiting acquires once held all its
// credits to the manager, and its answer to the revocation they waited for could not go.
//
//   TOKEN_ACQUIRE  client -> manager: {file, start, end, want_end (0: none), mode}; the
//                  reply, when granted, {file, start, end, mode}: the range granted
//   TOKEN_REVOKE   manager -> holder: {file, start, end, want_end, mode: the taker's}; the
//                  reply once released, {file, start, end}: the range released, from the
//                  required start to at least the required end, at most the desired one
//   TOKEN_RELEASE  client -> manager: {file} (the offsets 0): all its tokens on it (when
//                  its last open handle of the file closes), unless the manager has since
//                  granted it an acquire the node sent after the release (`seq`, below)
// Each message is a TokenRangeMsg (below) in the binary field codec. Ranges are
// [start, end) in bytes, whole blocks as the clients ask.
//
// The ranges and the manager's table are pure (storage/token_table.h).
// Thread safety: TokenService: any thread. Nothing in it blocks but acquire(): the
// manager's handlers answer later (revocations are RPCs), and a holder answers a
// revocation when its writes are acknowledged (TokenHolder), on the thread that sees them
// end -- so it runs on the deterministic in-process cluster as in a daemon, with no thread
// of its own.
#pragma once

#include <pfsnet/nid.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "rpc/fence.h"
#include "rpc/node_part.h"
#include "rpc/rpc_engine.h"
#include "rpc/rpc_method.h"
#include "storage/token_table.h"

namespace pfsnet {

// What a client needs of a file for its tokens: give back [start, end) and of [end,
// want_end) what it does not use -- to a taker that wants it in mode `taker`: to a writer
// every token there, to a reader its write token only -- then call `done` with the end of
// the range it gave back, in [end, want_end] (want_end <= end: just [start, end)), or an
// error. It may answer at
// once or later (once its writes there are acknowledged), from any thread, without holding
// a lock of its own; it never blocks the caller. `done` dropped unanswered (a holder gone)
// fails the revocation.
class TokenHolder {
 public:
  using Released = std::function<void(Result<uint64_t>)>;
  virtual ~TokenHolder() = default;
  virtual const std::string& token_file() const = 0;
  virtual void release_range(uint64_t start, uint64_t end, uint64_t want_end, TokenMode taker,
                             Released done) = 0;
  // This node was declared dead by the MGS (evicted): the managers dropped every token it
  // held. It drops its own record of them and what they protected (cached blocks), so no
  // write goes out under them; writes not yet acknowledged are the caller's to redo (their
  // error comes at flush: `why`). Never blocks.
  virtual void lose_tokens(const Status& why) = 0;
};

// A TOKEN_* request's fields, in the binary field codec (wire/byte_codec.h): the file's
// name, then start, end and want_end (8 bytes each), then the mode (1 byte: 0 read, 1
// write). decode_token_range: from a peer, each checked (kProtocol: malformed, a bad file
// name, a mode neither; without `need_range` nothing else; with it 0 <= start < end <=
// 2^62, and want_end, when not 0, end <= want_end <= 2^62).
struct TokenRangeMsg {
  std::string file;
  uint64_t start = 0, end = 0;
  uint64_t want_end = 0;  // the desired range's end; 0 (absent): end
  TokenMode mode = TokenMode::kWrite;
  // Orders a node's releases after its acquires, whatever way each travels: an acquire's
  // number (a node numbers its acquires 1, 2, ...), or in a release the number of the
  // node's last acquire sent before it. A manager that has granted the node an acquire
  // numbered above a release's ignores the release (it was overtaken: it was sent before
  // that acquire, whose grant it would undo).
  uint64_t seq = 0;
};
inline constexpr uint64_t kTokenMaxOffset = uint64_t(1) << 62;  // "to the end of the file"
Buffer encode_token_range(const TokenRangeMsg& m);
Result<TokenRangeMsg> decode_token_range(std::span<const uint8_t> b, bool need_range);

struct TokenStats {
  uint64_t granted = 0, revocations = 0, holders_dropped = 0;  // as a manager
  uint64_t read_grants = 0;      // as a manager: of `granted`, read tokens
  uint64_t downgrades = 0;       // as a manager: of `revocations`, for a reader (write -> read)
  uint64_t holders_evicted = 0;  // as a manager: holders whose tokens went at the MGS's verdict
  uint64_t fence_waits = 0;      // as a manager: requests that waited for an evicted holder's fence
  uint64_t stale_releases = 0;   // as a manager: releases overtaken by a later acquire, ignored
  uint64_t acquired = 0, revoked = 0;  // as a client
  uint64_t evictions = 0;              // as a client: times its tokens went with its eviction
};

class TokenService final : public NodePart {
 public:
  // Serves the three TOKEN_* messages on `rpc` (register before traffic).
  // `timeout`: a revocation's (each holder's answer).
  TokenService(RpcEngine& rpc, Duration timeout);
  ~TokenService() override;
  const char* part_name() const override { return "tokens"; }
  // Queued acquires are answered kCancelled; revocations under way finish.
  void stop() override;

  // Client side. Blocks until the manager grants a `mode` token on [start, end) of `file`
  // to this node, and on what of [end, want_end) no other node holds in conflict; returns
  // the range granted.
  Result<TokenRange> acquire(const Nid& manager, const std::string& file, uint64_t start,
                             uint64_t end, uint64_t want_end = 0,
                             TokenMode mode = TokenMode::kWrite);
  // The same without blocking: `done` gets what acquire() returns, on the thread that
  // sees the reply.
  void acquire_async(const Nid& manager, const std::string& file, uint64_t start, uint64_t end,
                     uint64_t want_end, std::function<void(Result<TokenRange>)> done,
                     TokenMode mode = TokenMode::kWrite);
  // Gives back this node's tokens on `file` (best effort), unless another open handle of
  // the file here (a holder added and not removed) still uses them.
  void release(const Nid& manager, const std::string& file) EXCLUDES(mu_);
  // The MGS's verdicts (rpc/fence.h), from now until stop(): a client declared dead loses
  // every token it holds here (its revocations under way end, its queued requests fail) --
  // kept from others until the MGS says it is fenced (every live server refuses its I/O),
  // or at most `timeout` without that word; a request of an evicted node waits until it is
  // readmitted (it registered again, having dropped what it held); and when this node is
  // evicted, every open file loses its tokens (TokenHolder::lose_tokens).
  void follow(Fence& fence) EXCLUDES(mu_);
  void add_holder(TokenHolder* h) EXCLUDES(mu_);
  void remove_holder(TokenHolder* h) EXCLUDES(mu_);

  TokenStats stats() const EXCLUDES(mu_);

 private:
  struct Pending;
  void on_acquire(TokenRangeMsg m, const Nid& from, uint64_t incarnation,
                  TypedResponder<TokenRangeMsg> r);
  void on_release(const TokenRangeMsg& m, const Nid& from, uint64_t incarnation) EXCLUDES(mu_);
  // Works on `file`'s queue: grants each request no earlier waiting one overlaps, or
  // revokes what conflicts and comes back when every holder answered.
  void next(const std::string& file) EXCLUDES(mu_);
  void revoke_round(const std::string& file, const std::shared_ptr<Pending>& p,
                    const std::vector<Nid>& holders) EXCLUDES(mu_);
  void on_revoke(TokenRangeMsg m, TypedResponder<TokenRangeMsg> r);
  // acquire's reply, checked: at least the range asked for, within the one desired.
  Result<TokenRange> granted(const Nid& manager, const TokenRangeMsg& asked,
                             const Result<TokenRangeMsg>& g) EXCLUDES(mu_);
  CallOptions acquire_options() const;
  void on_fence(const FenceEvent& e) EXCLUDES(mu_);
  // Whether a request of `who` waits for its node's readmission.
  bool evicted(const Nid& who) const;
  // Drops the tokens of evicted holders `nids` (fenced, readmitted, or waited for long
  // enough); returns whether any were held.
  bool drop_evicted(const std::vector<Nid>& nids) REQUIRES(mu_);

  RpcEngine& rpc_;
  const Duration timeout_;
  mutable Mutex mu_;
  TokenTable table_ GUARDED_BY(mu_);
  std::set<TokenHolder*> holders_ GUARDED_BY(mu_);
  std::map<std::string, std::deque<std::shared_ptr<Pending>>> queue_ GUARDED_BY(mu_);
  // (file, holder) of every revocation out: that holder's own requests wait for it.
  std::multiset<std::pair<std::string, Nid>> revoking_ GUARDED_BY(mu_);
  // Evicted holders (packed NIDs) whose tokens stay in the table, granted to nobody, until
  // they are fenced: since when.
  std::map<Nid, TimePoint> unfenced_ GUARDED_BY(mu_);
  // As a manager, per (file, holder's packed NID): the holder's incarnation and the
  // highest acquire number granted to it (a release numbered below is stale).
  struct Granted {
    uint64_t incarnation = 0, seq = 0;
  };
  std::map<std::pair<std::string, Nid>, Granted> granted_seq_ GUARDED_BY(mu_);
  // As a client: acquires numbered so far.
  std::atomic<uint64_t> acquires_sent_{0};
  bool stopped_ GUARDED_BY(mu_) = false;
  TokenStats st_ GUARDED_BY(mu_);
  CondVar cv_;
  int busy_ GUARDED_BY(mu_) = 0;  // revocations handing the range to their holders now
  // follow()'s fence and subscription: set once, before traffic.
  std::atomic<Fence*> fence_{nullptr};
  int fence_sub_ = -1;
};

}  // namespace pfsnet
