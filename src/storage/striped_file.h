// StripedFile: a file striped over block servers' targets (StripeLayout: round robin in
// block-size units), read and written at any offset and length by one or many threads of
// a client node, through the node's pagepool as GPFS does:
//
//   write    copies the data into the pagepool and returns; the blocks go to their servers
//            at once, many in flight (write-behind). A write waits only while the
//            pagepool's unacknowledged bytes would pass its size, or while an earlier write
//            to the same block is still under way (so a later write lands later).
//   flush    returns once every write before it is acknowledged by its server, which
//            acknowledges only what is in its target: a killed server loses nothing
//            acknowledged. Its status is the first write error since the last flush.
//   read     reads whole blocks into the pagepool and copies out; a sequential reader
//            (a read starting where one of the last 64 ended: each of several threads
//            reading its own part is one) has the next prefetch_depth blocks fetched ahead
//            of it (read-ahead). A read first waits for this file's writes
//            under way to the blocks it reads (it sees its own writes). A sequential
//            reader's whole block still on its way, whose reply has not begun to arrive,
//            is received straight into the reader's buffer instead (one copy fewer, as
//            raw TCP has; over TCP) and not kept: the reader is done with it.
//   close    flush, then waits for reads under way.
//
// With options.direct_writes a write is O_DIRECT's instead: no copy, no write-behind (see
// StripedFileOptions).
//
// striped_file.cc has the data path, striped_file_tokens.cc the token side.
//
// Bytes never written read as zeros. With tokens (options.tokens, storage/tokens.h), a
// write first holds a write token on its whole blocks, and a read a read token (or a
// write token) on its (a sequential writer or reader asks for the rest of the file as
// well, so it asks once per run): writes of two nodes to overlapping ranges run one after
// the other, readers share, and a node keeps cached and read-ahead blocks only where it
// holds a token -- it drops them when another node takes the range to write it, so its
// next read there fetches what that node wrote (once acknowledged: the writer gives up its
// write token only then). Without tokens a reader sees another node's writes only once its
// cached copy is gone (evicted, or the file opened after them).
//
// Threads: every function from any thread; replies come on I/O threads. Every wait has a
// deadline on the engine's clock (the RPC timeout, x2 for a wait on another's writes) and
// waits as the engine's waiter does (rpc/waiter.h): on the deterministic in-process
// cluster a blocking call runs the cluster until it ends. A revocation never blocks
// (release_range answers once the writes there are acknowledged).
#pragma once

#include <pfsnet/config.h>

#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/mutex.h"
#include "rpc/lent_memory.h"
#include "rpc/rpc_engine.h"
#include "storage/layout.h"
#include "storage/tokens.h"

namespace pfsnet {

class TokenService;

struct StripedFileOptions {
  uint64_t pagepool = 100 << 20;                // bytes: write-behind in flight, and cached blocks
  int prefetch_depth = 4;                       // blocks fetched ahead of a sequential reader
  Duration timeout = std::chrono::seconds(50);  // per block RPC (lnet.transaction_timeout)
  // Byte-range write tokens (storage/tokens.h) from the layout's first server; null: none
  // (then only a file opened after another client's writes is sure to see them).
  TokenService* tokens = nullptr;  // (read and write tokens)
  // Writes as O_DIRECT's: the caller's memory goes out as it is, no pagepool copy, and a
  // write returns once its blocks are acknowledged (its status is theirs; no write-behind).
  // Reads still go through the pagepool.
  bool direct_writes = false;
  // The job id every block RPC carries (docs/statistics.md, "Jobs and clients"); empty: the
  // engine's (RpcOptions::default_job_id, from rpc.jobid_var).
  std::string job_id;

  static StripedFileOptions from(const Config& cfg);
};

struct StripedFileStats {
  uint64_t writes = 0, reads = 0;              // calls
  uint64_t bytes_written = 0, bytes_read = 0;  // by the calls
  uint64_t block_writes = 0, block_reads = 0;  // RPCs sent
  uint64_t cache_hits = 0, prefetched = 0;     // blocks found ready; fetched ahead
  uint64_t prefetch_stops = 0;    // read-ahead stopped at a block this node read already
  uint64_t read_into_caller = 0;  // blocks received straight into a reader's buffer
  // Blocks a read gave up on while their reply was arriving into its buffer (that
  // connection was closed to stop it).
  uint64_t reads_cut_off = 0;
  uint64_t pagepool_waits = 0;                       // writes that waited for pagepool room
  uint64_t tokens_acquired = 0, tokens_revoked = 0;  // write tokens; revocations of any
  uint64_t read_tokens_acquired = 0;
  uint64_t tokens_lost = 0;  // every token at once, with this node's eviction
};

class StripedFile final : public TokenHolder {
 public:
  // Asks every server for its block size and targets (BLOCK_INFO) and stripes the file
  // `name` over all their targets, target-major (target 0 of each server, then target 1
  // ...), so consecutive blocks go to different servers. Errors: a bad name, a server that
  // does not answer or has no targets, servers with different block sizes.
  static Result<std::unique_ptr<StripedFile>> open(RpcEngine& rpc, const std::string& name,
                                                   const std::vector<Nid>& servers,
                                                   StripedFileOptions opts);
  // Over a layout already known (tests).
  StripedFile(RpcEngine& rpc, std::string name, StripeLayout layout, StripedFileOptions opts);
  ~StripedFile();

  Status write(uint64_t offset, std::span<const uint8_t> data);
  Status read(uint64_t offset, std::span<uint8_t> out);
  Status flush();
  Status close();

  const StripeLayout& layout() const { return layout_; }
  const std::string& name() const { return name_; }
  StripedFileStats stats() const;

  // TokenHolder: the manager takes [start, end) back, and of [end, want_end) what this
  // file does not use -- no new write starts there at once; `done` is answered once the
  // writes under way there are acknowledged (by the thread that sees the last one end).
  // Taken by a writer, its read tokens there go too and its cached blocks there are
  // dropped then (one still loading when it arrives); taken by a reader, it keeps reading
  // there from its cache. A file closed with a write call still under way there answers
  // kCancelled (its manager then drops its tokens).
  const std::string& token_file() const override { return name_; }
  void release_range(uint64_t start, uint64_t end, uint64_t want_end, TokenMode taker,
                     Released done) override EXCLUDES(mu_);
  // TokenHolder: this node was evicted. Its tokens and cached blocks go; a write call
  // under way sends nothing more (it fails), unacknowledged writes fail at flush; ranges
  // being given back are answered with `why`.
  void lose_tokens(const Status& why) override EXCLUDES(mu_);

 private:
  // A sequential reader's buffer offered for a whole block still loading: its reply is
  // received into it (CallOptions::reply_memory) when none has begun to arrive yet.
  struct Offer {
    uint64_t fb = 0;
    uint8_t* at = nullptr;
    size_t len = 0;
    std::shared_ptr<LentMemory> lent = std::make_shared<LentMemory>();
    bool taken = false;   // (mu_) a reply was received into it, or is
    bool filled = false;  // (mu_) a whole reply was: the reader's bytes are there
    // (mu_) the RPC ended with it taken and not filled: the RPC layer let that reception
    // go (its connection closed by the attempt deadline, or the frame damaged) -- the
    // read has nothing of its own to cut off, only the frame's release to wait for
    bool let_go = false;
  };
  struct Block {
    enum State { kLoading, kReady, kFailed } state = kLoading;
    BulkData data;  // shared with a reader copying from it
    Status status;
    uint64_t used = 0;             // LRU tick
    bool stale = false;            // written while loading: dropped when it arrives
    bool consumed = false;         // read by the application
    std::shared_ptr<Offer> offer;  // a reader's, while it waits for the block
  };
  // A range given back whose writes have not all ended yet (release_range).
  struct Release {
    uint64_t start = 0, end = 0;
    Released done;
    bool drop_cache = true;  // given to a writer (a reader: this node keeps reading there)
  };
  Duration rpc_timeout() const;
  // A block RPC's options: its timeout and the file's job id.
  CallOptions block_call() const;
  TimePoint deadline(int factor = 1) const;
  // Until `pred` holds or `until` passes, by the engine's waiter (rpc/waiter.h): on cv_,
  // or on `cv` (a block's, block_cv()).
  bool wait_locked(MutexLock& lk, TimePoint until, const std::function<bool()>& pred) REQUIRES(mu_);
  bool wait_locked(MutexLock& lk, CondVar& cv, TimePoint until, const std::function<bool()>& pred)
      REQUIRES(mu_);
  // A reader waits for its block on that block's condition variable, so that a block's
  // arrival wakes its readers rather than every thread of the node (16 readers each woken
  // for every block cost the high-node reads a fifth of their CPU). Any other change a
  // waiter may wait for notifies them all (notify_everyone).
  CondVar& block_cv(uint64_t fb) { return block_cvs_[fb % block_cvs_.size()]; }
  void notify_everyone() REQUIRES(mu_);
  // Whether a write call or a block write of [start, end) is under way.
  bool writing_in_locked(uint64_t start, uint64_t end) const REQUIRES(mu_);
  // Moves the releases whose writes have all ended into `out`, their cached blocks dropped:
  // answer them (answer()) once mu_ is let go. Called wherever a write ends.
  void take_ended_locked(std::vector<Release>& out) REQUIRES(mu_);
  // Static: a write's completion answers after letting go of mu_, when the file may be
  // gone already (its flush or close saw the last write end).
  static void answer(std::vector<Release>& ended);
  // Releases of a closed file whose writes are still under way: kCancelled (the manager
  // then drops this node's tokens on the file).
  void cancel(std::vector<Release>& cut_short) const EXCLUDES(mu_);
  Status write_call(uint64_t offset, std::span<const uint8_t> data, std::vector<Release>& ended)
      EXCLUDES(mu_);
  Status read_call(uint64_t offset, std::span<uint8_t> out,
                   std::vector<std::shared_ptr<Offer>>& offers) EXCLUDES(mu_);
  // A read's end: its offers withdrawn, and back to the reader once nothing holds them (a
  // reply still arriving into one when the read gave up: its connection is closed).
  void settle_offers(const std::vector<std::shared_ptr<Offer>>& offers) EXCLUDES(mu_);
  // The reader's memory for block `fb`'s reply, when it offered some (CallOptions::reply_memory).
  std::optional<Buffer> offered_memory(uint64_t fb, size_t n, std::function<void()> cancel)
      EXCLUDES(mu_);
  // Returns once this node holds a `mode` token covering `mine` (asking the manager, and
  // for the rest of the file too when `sequential`), with mu_ held; at once when it does.
  // Without tokens (options.tokens null): at once.
  Status hold_token_locked(MutexLock& lk, TokenRange mine, TokenMode mode, bool sequential)
      REQUIRES(mu_);
  // Returns with mu_ held once no write of this file is under way to `blocks` (a read sees
  // its own writes) and a read token covers them, so they may be loaded now.
  Status ready_to_read_locked(MutexLock& lk, const std::vector<uint64_t>& blocks, bool sequential)
      REQUIRES(mu_);
  // Whether this node holds a read (or write) token on file block `fb` (or needs none).
  bool readable_locked(uint64_t fb) const REQUIRES(mu_);
  // Makes room for file block `fb` and adds it to `fetch` unless it is cached or loading.
  // Returns false when the pagepool has no room (only for read-ahead; a demanded block
  // always goes).
  bool load_locked(uint64_t fb, bool demanded, std::vector<uint64_t>* fetch) REQUIRES(mu_);
  // Sends BLOCK_READs for `blocks` (not under mu_: a reply may complete on this thread).
  void fetch(const std::vector<uint64_t>& blocks) EXCLUDES(mu_);
  void evict_locked() REQUIRES(mu_);
  // Blocks the application read here and the pagepool let go since, the latest last
  // (bounded). Read-ahead stops at one: a stream that reaches what this node already
  // read has run into another reader's part (a node's threads reading neighbouring
  // segments: each stream's read-ahead past its end fetched a neighbour's blocks again,
  // 4 of every 27 at 28 nodes x 16 threads). A demanded read of one -- this node reading
  // it again -- forgets them all: read-ahead is for re-reading too.
  void forget_consumed_locked() REQUIRES(mu_);
  // `fb`, read by the application, leaves the pagepool (evicted, or never kept: received
  // into the reader's buffer).
  void note_consumed_locked(uint64_t fb) REQUIRES(mu_);
  // A direct write's RPCs (options.direct_writes): returns once every block is answered
  // and nothing holds the caller's memory.
  Status send_direct(const std::vector<Extent>& ext, std::span<const uint8_t> data) EXCLUDES(mu_);
  // kPeerDead once this node was evicted (lost every token) since st_.tokens_lost was `lost`.
  Status not_evicted_locked(uint64_t lost) const REQUIRES(mu_);
  // Drops file block `fb`'s cached copy (one still loading is dropped when it arrives).
  void drop_cached_locked(uint64_t fb) REQUIRES(mu_);
  // Waits until no write of this file is under way to any of `blocks`.
  // `op` ("read", "write") names the caller in the timeout's message.
  Status wait_writes_locked(MutexLock& lk, const std::vector<uint64_t>& blocks, const char* op)
      REQUIRES(mu_);

  RpcEngine& rpc_;
  const std::string name_;
  const StripeLayout layout_;
  const StripedFileOptions opts_;

  mutable Mutex mu_;
  CondVar cv_;
  std::array<CondVar, 64> block_cvs_;
  uint64_t dirty_bytes_ GUARDED_BY(mu_) = 0;               // written, not yet acknowledged
  std::map<uint64_t, int> writing_ GUARDED_BY(mu_);        // file block -> writes under way
  Status write_error_ GUARDED_BY(mu_);                     // first since the last flush
  std::map<uint64_t, Block> cache_ GUARDED_BY(mu_);        // file block -> its data
  std::unordered_set<uint64_t> consumed_ GUARDED_BY(mu_);  // evict_locked, read-ahead
  std::deque<uint64_t> consumed_order_ GUARDED_BY(mu_);    // oldest first
  uint64_t cached_bytes_ GUARDED_BY(mu_) = 0;
  int loading_ GUARDED_BY(mu_) = 0;
  uint64_t tick_ GUARDED_BY(mu_) = 0;
  StripedFileStats st_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  RangeSet tokens_ GUARDED_BY(mu_);                  // held write tokens
  RangeSet readable_ GUARDED_BY(mu_);                // held read or write tokens
  std::vector<TokenRange> active_ GUARDED_BY(mu_);   // write calls under way
  std::vector<TokenRange> reading_ GUARDED_BY(mu_);  // read calls under way
  uint64_t revoke_epoch_ GUARDED_BY(mu_) = 0;        // +1 per revocation
  // Draws the back-off of a writer whose token was taken back before it could use it;
  // seeded from this node's NIDs and the file's name (distinct nodes draw differently,
  // the in-process cluster the same every run).
  std::minstd_rand backoff_rng_ GUARDED_BY(mu_);
  std::vector<Release> releasing_ GUARDED_BY(mu_);  // given back, writes still under way
  // Where the last write calls ended (a sequential writer goes on there), newest last;
  // read_cursors_ the same of read calls.
  static constexpr size_t kCursors = 64;
  std::deque<uint64_t> cursors_ GUARDED_BY(mu_);
  std::deque<uint64_t> read_cursors_ GUARDED_BY(mu_);
  // Moves `at`'s cursor (a call started there) to `to` (where it ends).
  static void move_cursor(std::deque<uint64_t>& cursors, uint64_t at, uint64_t to);
  // The token manager: the layout's first server.
  const Nid& manager() const { return layout_.targets()[0].server; }
};

}  // namespace pfsnet
