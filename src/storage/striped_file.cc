#include "storage/striped_file.h"

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "net/net.h"
#include "rpc/call_batch.h"
#include "storage/block_store.h"
#include "storage/methods.h"
#include "storage/protocol.h"
#include "wire/crc32c.h"

namespace pfsnet {

StripedFileOptions StripedFileOptions::from(const Config& cfg) {
  StripedFileOptions o;
  o.pagepool = static_cast<uint64_t>(cfg.storage.pagepool);
  o.prefetch_depth = static_cast<int>(cfg.storage.prefetch_depth);
  o.timeout = std::chrono::seconds(cfg.lnet.transaction_timeout);
  return o;
}

Result<std::unique_ptr<StripedFile>> StripedFile::open(RpcEngine& rpc, const std::string& name,
                                                       const std::vector<Nid>& servers,
                                                       StripedFileOptions opts) {
  if (Status s = check_file_name(name); !s.ok()) return s;
  if (servers.empty()) return Status(Code::kInvalidArgument, "no block servers given");
  uint32_t block_size = 0;
  std::vector<uint32_t> counts;
  CallOptions co;
  co.timeout = std::min<Duration>(opts.timeout, std::chrono::seconds(10));
  co.job_id = opts.job_id;
  for (const Nid& s : servers) {
    Result<BlockInfo> info = call(rpc, kBlockInfoRpc, s, Empty{}, co);
    if (!info.ok())
      return Status(info.status().code(),
                    "block server " + s.to_string() + ": " + info.status().message());
    if (info->targets == 0)
      return Status(Code::kInvalidArgument, "block server " + s.to_string() + " has no targets");
    if (block_size && info->block_size != block_size)
      return Status(Code::kInvalidArgument,
                    "block servers disagree on the block size: " + std::to_string(block_size) +
                        " and " + std::to_string(info->block_size) + " at " + s.to_string());
    block_size = info->block_size;
    counts.push_back(info->targets);
  }
  std::vector<TargetRef> targets;
  uint32_t most = *std::max_element(counts.begin(), counts.end());
  for (uint32_t t = 0; t < most; ++t)
    for (size_t i = 0; i < servers.size(); ++i)
      if (t < counts[i]) targets.push_back({servers[i], t});
  auto layout = StripeLayout::make(block_size, std::move(targets));
  if (!layout.ok()) return layout.status();
  return std::make_unique<StripedFile>(rpc, name, std::move(*layout), opts);
}

StripedFile::StripedFile(RpcEngine& rpc, std::string name, StripeLayout layout,
                         StripedFileOptions opts)
    : rpc_(rpc), name_(std::move(name)), layout_(std::move(layout)), opts_(opts) {
  {
    MutexLock lk(mu_);
    size_t seed = std::hash<std::string>()(name_);
    for (const Nid& n : rpc_.net().local_nids()) seed = seed * 31 + nid_seed(n);
    backoff_rng_.seed(static_cast<std::minstd_rand::result_type>(seed % 2147483646 + 1));
  }
  if (opts_.tokens) opts_.tokens->add_holder(this);
}

StripedFile::~StripedFile() { (void)close(); }

Duration StripedFile::rpc_timeout() const { return opts_.timeout; }

CallOptions StripedFile::block_call() const {
  CallOptions co;
  co.timeout = rpc_timeout();
  co.job_id = opts_.job_id;
  return co;
}

TimePoint StripedFile::deadline(int factor) const {
  return rpc_.clock().now() + factor * rpc_timeout();
}

bool StripedFile::wait_locked(MutexLock& lk, TimePoint until, const std::function<bool()>& pred) {
  return rpc_.waiter().wait_until(lk, cv_, until, pred);
}

bool StripedFile::wait_locked(MutexLock& lk, CondVar& cv, TimePoint until,
                              const std::function<bool()>& pred) {
  return rpc_.waiter().wait_until(lk, cv, until, pred);
}

void StripedFile::notify_everyone() {
  cv_.notify_all();
  for (CondVar& cv : block_cvs_) cv.notify_all();
}

Status StripedFile::write(uint64_t offset, std::span<const uint8_t> data) {
  std::vector<Release> ended;
  Status s = write_call(offset, data, ended);
  answer(ended);
  return s;
}

Status StripedFile::write_call(uint64_t offset, std::span<const uint8_t> data,
                               std::vector<Release>& ended) {
  const uint32_t bs = layout_.block_size();
  std::vector<Extent> ext = layout_.map(offset, data.size());
  MutexLock lk(mu_);
  if (closed_) return Status(Code::kInvalidArgument, "file " + name_ + " is closed");
  // A write token on the whole blocks first (none needed for nothing). The first write
  // of the file, and one going on where another ended (a sequential writer), would like
  // the rest of the file too (GPFS's desired range): then it asks once for its whole run.
  TokenRange mine{offset / bs * bs, (offset + data.size() + bs - 1) / bs * bs};
  const bool sequential =
      st_.writes == 0 || std::find(cursors_.begin(), cursors_.end(), offset) != cursors_.end();
  if (Status s = hold_token_locked(lk, mine, TokenMode::kWrite, sequential); !s.ok()) return s;
  const uint64_t lost = st_.tokens_lost;  // this node's evictions, when its token was checked
  // The writer goes on at the end of this call (until then its cursor marks it here).
  move_cursor(cursors_, offset, offset + data.size());
  active_.push_back(mine);
  struct Done {
    StripedFile* f;
    TokenRange r;
    std::vector<Release>& ended;
    ~Done() NO_THREAD_SAFETY_ANALYSIS {  // runs with mu_ held: lk outlives it
      auto it = std::find(f->active_.begin(), f->active_.end(), r);
      if (it != f->active_.end()) f->active_.erase(it);
      f->take_ended_locked(ended);
      f->notify_everyone();
    }
  } done{this, mine, ended};
  ++st_.writes;
  st_.bytes_written += data.size();
  if (opts_.direct_writes) {
    // After any earlier write to these blocks (order), as a buffered write.
    std::vector<uint64_t> blocks;
    for (const Extent& e : ext) blocks.push_back(e.file_block);
    if (Status s = wait_writes_locked(lk, blocks, "write"); !s.ok()) return s;
    if (Status s = not_evicted_locked(lost); !s.ok()) return s;
    for (const Extent& e : ext) {
      ++writing_[e.file_block];
      ++st_.block_writes;
      drop_cached_locked(e.file_block);
    }
    lk.unlock();
    Status st = send_direct(ext, data);
    lk.lock();
    for (const Extent& e : ext)
      if (--writing_[e.file_block] == 0) writing_.erase(e.file_block);
    cv_.notify_all();
    return st;  // ended releases: taken by `done`, answered by write()
  }
  const TimePoint until = deadline(2);
  for (const Extent& e : ext) {
    // Room in the pagepool, and no earlier write to this block under way (order).
    bool waited = false;
    bool ok = wait_locked(lk, until, [&]() REQUIRES(mu_) {
      bool room = dirty_bytes_ == 0 || dirty_bytes_ + e.length <= opts_.pagepool;
      waited = waited || !room;
      return room && writing_.find(e.file_block) == writing_.end();
    });
    if (waited) ++st_.pagepool_waits;
    if (!ok)
      return Status(Code::kTimeout, "write of " + name_ +
                                        ": no pagepool room or an earlier "
                                        "write of block " +
                                        std::to_string(e.file_block) + " still under way after " +
                                        std::to_string(to_ms(2 * rpc_timeout()) / 1000) + " s");
    if (Status s = not_evicted_locked(lost); !s.ok()) return s;
    // A cached copy of the block would be stale now; one on its way is dropped on arrival.
    drop_cached_locked(e.file_block);
    dirty_bytes_ += e.length;
    ++writing_[e.file_block];
    ++st_.block_writes;
    BlockIo io{name_, layout_.targets()[e.target].target, e.target_block, e.offset, e.length};
    // The block is this call's now (writing_): copied without the file's lock, so that the
    // node's other readers and writers copy at the same time and the replies that take
    // the lock on the I/O thread do not wait for a MiB's copy.
    lk.unlock();
    // Into the pagepool, the data checksum taken in the same pass (the RPC's seal joins it);
    // a pagepool block's memory is a freed one's (Buffer::page_aligned), not fresh pages.
    Buffer copy = Buffer::page_aligned(e.length);
    CallOptions co = block_call();
    if (rpc_.net().checksum())
      co.bulk_crc = crc32c_copy(copy.data(), data.subspan(e.buf_offset, e.length));
    else if (e.length)
      std::memcpy(copy.data(), data.data() + e.buf_offset, e.length);
    BulkData bulk = make_bulk(std::move(copy));
    const Nid server = layout_.targets()[e.target].server;
    co.recover = true;  // a restarted server answers a resent write it ran (last_rcvd)
    rpc_.call_async(
        server, kMsgBlockWrite, encode_block_io(io), std::move(bulk),
        [this, fb = e.file_block, len = e.length, server](RpcReply&& r) {
          std::vector<Release> ended;
          MutexLock g(mu_);
          dirty_bytes_ -= len;
          if (--writing_[fb] == 0) writing_.erase(fb);
          if (!r.status.ok() && write_error_.ok())
            write_error_ =
                Status(r.status.code(), "write of block " + std::to_string(fb) + " to " +
                                            server.to_string() + ": " + r.status.message());
          take_ended_locked(ended);
          cv_.notify_all();
          g.unlock();  // the file may be gone from here on
          answer(ended);
        },
        co);
    lk.lock();
  }
  return Status::Ok();
}

Status StripedFile::send_direct(const std::vector<Extent>& ext, std::span<const uint8_t> data) {
  const TimePoint until = deadline(2);
  auto lent = std::make_shared<LentMemory>();
  CallBatch batch(rpc_);
  CallOptions co = block_call();
  co.recover = true;  // a restarted server answers a resent write it ran (last_rcvd)
  for (const Extent& e : ext) {
    BlockIo io{name_, layout_.targets()[e.target].target, e.target_block, e.offset, e.length};
    // The caller's bytes as they are: only read (a BulkData is const), and this returns
    // only once nothing holds them.
    batch.add(layout_.targets()[e.target].server, kMsgBlockWrite, encode_block_io(io),
              make_bulk(LentMemory::lend(lent, const_cast<uint8_t*>(data.data() + e.buf_offset),
                                         e.length)),
              co);
  }
  // Each RPC ends within its timeout, with a reply or an error.
  Status st;
  if (!batch.wait(until - rpc_.clock().now()))
    st = Status(Code::kTimeout, "write of " + name_ + ": unanswered after " +
                                    std::to_string(to_ms(2 * rpc_timeout()) / 1000) + " s");
  std::vector<RpcReply> rs = batch.take();
  for (size_t i = 0; i < rs.size() && st.ok(); ++i)
    if (!rs[i].status.ok())
      st = Status(rs[i].status.code(), "write of block " + std::to_string(ext[i].file_block) +
                                           " to " +
                                           layout_.targets()[ext[i].target].server.to_string() +
                                           ": " + rs[i].status.message());
  // After an error a write may still be on its way out of a connection: the caller's
  // memory is not its own again until it is out (or the connection gone).
  if (!lent->wait_returned(rpc_.waiter(), deadline())) {
    PFS_LOG_ERROR(
        "direct write of {}: a connection still holds the caller's data {} s after "
        "the RPC ended",
        name_, to_ms(rpc_timeout()) / 1000);
    st = Status(Code::kTimeout,
                "write of " + name_ + ": its data still held by a connection after the RPC ended");
  }
  return st;
}

void StripedFile::drop_cached_locked(uint64_t fb) {
  auto c = cache_.find(fb);
  if (c == cache_.end()) return;
  if (c->second.state == Block::kLoading) {
    c->second.stale = true;  // dropped when it arrives
  } else {
    cached_bytes_ -= layout_.block_size();
    cache_.erase(c);
  }
}

Status StripedFile::flush() {
  MutexLock lk(mu_);
  if (!wait_locked(lk, deadline(2), [&]() REQUIRES(mu_) { return writing_.empty(); }))
    return Status(Code::kTimeout, "flush of " + name_ + ": writes still unacknowledged");
  return std::exchange(write_error_, Status::Ok());
}

Status StripedFile::wait_writes_locked(MutexLock& lk, const std::vector<uint64_t>& blocks,
                                       const char* op) {
  bool ok = wait_locked(lk, deadline(2), [&]() REQUIRES(mu_) {
    for (uint64_t b : blocks)
      if (writing_.count(b)) return false;
    return true;
  });
  if (!ok)
    return Status(Code::kTimeout, std::string(op) + " of " + name_ +
                                      ": an earlier write of its blocks still under way after " +
                                      std::to_string(to_ms(2 * rpc_timeout()) / 1000) + " s");
  return Status::Ok();
}

void StripedFile::evict_locked() {
  const uint32_t bs = layout_.block_size();
  while (cached_bytes_ + bs > opts_.pagepool) {
    auto victim = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->second.state != Block::kLoading &&
          (victim == cache_.end() || it->second.used < victim->second.used))
        victim = it;
    if (victim == cache_.end()) return;
    cached_bytes_ -= bs;
    if (victim->second.consumed) note_consumed_locked(victim->first);
    cache_.erase(victim);
  }
}

void StripedFile::note_consumed_locked(uint64_t fb) {
  if (!consumed_.insert(fb).second) return;
  consumed_order_.push_back(fb);
  // As many as four pagepools hold: what a node's readers went past lately.
  const size_t bound = std::max<size_t>(64, 4 * opts_.pagepool / layout_.block_size());
  while (consumed_order_.size() > bound) {
    consumed_.erase(consumed_order_.front());
    consumed_order_.pop_front();
  }
}

void StripedFile::forget_consumed_locked() {
  consumed_.clear();
  consumed_order_.clear();
  for (auto& [fb, b] : cache_) b.consumed = false;  // nor those still cached, once let go
}

bool StripedFile::load_locked(uint64_t fb, bool demanded, std::vector<uint64_t>* fetch) {
  const uint32_t bs = layout_.block_size();
  if (cache_.count(fb)) return true;
  if (demanded && consumed_.count(fb)) forget_consumed_locked();  // read here again
  evict_locked();
  if (!demanded && cached_bytes_ + bs > opts_.pagepool) return false;
  Block& b = cache_[fb];
  b.used = ++tick_;
  cached_bytes_ += bs;
  ++loading_;
  ++st_.block_reads;
  fetch->push_back(fb);
  return true;
}

void StripedFile::fetch(const std::vector<uint64_t>& blocks) {
  const uint32_t bs = layout_.block_size();
  for (uint64_t fb : blocks) {
    size_t t = layout_.target_of(fb);
    BlockIo io{name_, layout_.targets()[t].target, layout_.target_block(fb), 0, bs};
    CallOptions co = block_call();
    co.recover = true;  // a read changes nothing: it waits for a restarting server too
    co.reply_bulk = bs;
    co.reply_memory = [this, fb](size_t n, std::function<void()> cancel) {
      return offered_memory(fb, n, std::move(cancel));
    };
    const Nid server = layout_.targets()[t].server;
    rpc_.call_async(
        server, kMsgBlockRead, encode_block_io(io), nullptr,
        [this, fb, bs, server](RpcReply&& r) {
          MutexLock g(mu_);
          --loading_;
          auto it = cache_.find(fb);
          std::shared_ptr<Offer> offer = it != cache_.end() ? it->second.offer : nullptr;
          // Received into the reader's buffer (offered_memory): its bytes are there.
          const bool into_offer = offer && r.bulk.size() == bs && r.bulk.data() == offer->at;
          if (offer && offer->taken && !into_offer) offer->let_go = true;
          if (it != cache_.end() && it->second.stale) {
            cached_bytes_ -= bs;
            cache_.erase(it);
          } else if (it != cache_.end()) {
            Block& blk = it->second;
            if (r.status.ok() && into_offer) {
              offer->filled = true;  // and not kept: the reader is done with it
              cached_bytes_ -= bs;
              cache_.erase(it);
              ++st_.read_into_caller;
            } else if (r.status.ok() && r.bulk.size() == bs) {
              blk.state = Block::kReady;
              blk.data = make_bulk(std::move(r.bulk));
            } else {
              blk.state = Block::kFailed;
              blk.status =
                  r.status.ok()
                      ? Status(Code::kProtocol, "BLOCK_READ of " + std::to_string(bs) +
                                                    " bytes returned " +
                                                    std::to_string(r.bulk.size()))
                      : Status(r.status.code(), "read of block " + std::to_string(fb) + " from " +
                                                    server.to_string() + ": " + r.status.message());
            }
          }
          r.bulk = Buffer();  // the reader's memory (when it was) is its own again
          cv_.notify_all();
          block_cv(fb).notify_all();  // its readers
        },
        co);
  }
}

std::optional<Buffer> StripedFile::offered_memory(uint64_t fb, size_t n,
                                                  std::function<void()> cancel) {
  MutexLock g(mu_);
  auto it = cache_.find(fb);
  if (it == cache_.end() || it->second.state != Block::kLoading || it->second.stale ||
      !it->second.offer)
    return std::nullopt;
  Offer& o = *it->second.offer;
  // Once: a reply that came into it and was let go (its connection closed, or damaged)
  // has its resend's reply come into the pagepool.
  if (o.taken || n != o.len) return std::nullopt;
  o.taken = true;
  o.lent->set_cancel(std::move(cancel));
  return LentMemory::lend(o.lent, o.at, n);
}

Status StripedFile::read(uint64_t offset, std::span<uint8_t> out) {
  std::vector<std::shared_ptr<Offer>> offers;
  Status s = read_call(offset, out, offers);
  settle_offers(offers);
  return s;
}

void StripedFile::settle_offers(const std::vector<std::shared_ptr<Offer>>& offers) {
  if (offers.empty()) return;
  {
    MutexLock lk(mu_);
    for (const auto& o : offers) {
      auto it = cache_.find(o->fb);
      if (it != cache_.end() && it->second.offer == o) it->second.offer.reset();
    }
  }
  // Nothing new is received into them now; one still arriving (the read gave up on it)
  // is cut off with its connection, which lets it go on its I/O thread.
  for (const auto& o : offers) {
    if (o->lent->wait_returned(rpc_.waiter(), rpc_.clock().now())) continue;
    {
      MutexLock lk(mu_);
      // The RPC layer's own give-up (its connection is closing on an I/O thread) is not
      // the read's: only a reception the read stops is counted.
      if (!o->let_go) ++st_.reads_cut_off;
    }
    o->lent->cancel();  // closing a connection already closing changes nothing
    if (o->lent->wait_returned(rpc_.waiter(), deadline())) continue;
    // The I/O thread did not let go of a closed connection's frame within the RPC
    // timeout: returning would leave the caller's buffer written behind its back.
    PFS_LOG_ERROR("read of {}: the reader's buffer still held by a closed connection after {} s",
                  name_, to_ms(rpc_timeout()) / 1000);
    std::abort();
  }
}

Status StripedFile::read_call(uint64_t offset, std::span<uint8_t> out,
                              std::vector<std::shared_ptr<Offer>>& offers) {
  std::vector<Extent> ext = layout_.map(offset, out.size());
  std::vector<uint64_t> blocks;
  for (const Extent& e : ext) blocks.push_back(e.file_block);
  MutexLock lk(mu_);
  if (closed_) return Status(Code::kInvalidArgument, "file " + name_ + " is closed");
  // A read going on where another ended is a sequential reader's (one of many: each
  // thread of a node reading its own part keeps its own cursor).
  const bool stream =
      std::find(read_cursors_.begin(), read_cursors_.end(), offset) != read_cursors_.end();
  // A read token on the whole blocks first (as a write's): the file's first read and a
  // sequential reader's ask for the rest of the file as well.
  const bool sequential_token = st_.reads == 0 || stream;
  ++st_.reads;
  st_.bytes_read += out.size();
  if (Status s = ready_to_read_locked(lk, blocks, sequential_token); !s.ok()) return s;
  move_cursor(read_cursors_, offset, offset + out.size());
  const TokenRange call{offset, offset + out.size()};
  reading_.push_back(call);
  struct Done {
    StripedFile* f;
    TokenRange r;
    ~Done() NO_THREAD_SAFETY_ANALYSIS {  // runs with mu_ held: lk outlives it
      auto it = std::find(f->reading_.begin(), f->reading_.end(), r);
      if (it != f->reading_.end()) f->reading_.erase(it);
    }
  } done{this, call};
  // Blocks to fetch, sent once the lock is let go: a reply may complete on this thread.
  std::vector<uint64_t> to_fetch;
  for (uint64_t fb : blocks) {
    if (cache_.count(fb) && cache_[fb].state == Block::kReady) ++st_.cache_hits;
    load_locked(fb, true, &to_fetch);
  }
  // Read-ahead for a sequential reader.
  if ((stream || offset == 0) && !blocks.empty())
    for (int i = 1; i <= opts_.prefetch_depth; ++i) {
      uint64_t fb = blocks.back() + i;
      if (cache_.count(fb) || writing_.count(fb)) continue;
      if (!readable_locked(fb)) break;  // not past its token: none would drop the block
      if (consumed_.count(fb)) {        // another reader's part, read here already
        ++st_.prefetch_stops;
        break;
      }
      if (!load_locked(fb, false, &to_fetch)) break;
      ++st_.prefetched;
    }
  // A sequential reader's whole blocks on their way are received into its buffer, where
  // their replies have not begun to arrive (offered before the fetches go out).
  const uint32_t bs = layout_.block_size();
  if (stream)
    for (const Extent& e : ext) {
      auto it = cache_.find(e.file_block);
      if (e.offset != 0 || e.length != bs || it == cache_.end() ||
          it->second.state != Block::kLoading || it->second.stale || it->second.offer)
        continue;
      auto o = std::make_shared<Offer>();
      o->fb = e.file_block;
      o->at = out.data() + e.buf_offset;
      o->len = bs;
      it->second.offer = o;
      offers.push_back(std::move(o));
    }
  lk.unlock();
  fetch(to_fetch);
  lk.lock();
  const TimePoint until = deadline(2);
  for (const Extent& e : ext) {
    // Bounded: a block evicted or made stale while this thread waited is fetched again.
    std::shared_ptr<Offer> mine;
    for (const auto& o : offers)
      if (o->fb == e.file_block && o->at == out.data() + e.buf_offset) mine = o;
    for (int tries = 0;; ++tries) {
      auto it = cache_.find(e.file_block);
      bool ok = wait_locked(lk, block_cv(e.file_block), until, [&]() REQUIRES(mu_) {
        it = cache_.find(e.file_block);
        return (mine && mine->filled) || it == cache_.end() || it->second.state != Block::kLoading;
      });
      if (ok && mine && mine->filled) {  // in the reader's buffer already, and not kept
        note_consumed_locked(e.file_block);
        break;
      }
      if (!ok)
        return Status(Code::kTimeout, "read of " + name_ + ": block " +
                                          std::to_string(e.file_block) + " did not come within " +
                                          std::to_string(to_ms(2 * rpc_timeout()) / 1000) + " s");
      if (it == cache_.end()) {
        if (tries >= 8)
          return Status(Code::kInternal, "read of " + name_ + ": block " +
                                             std::to_string(e.file_block) +
                                             " evicted 8 times before it was read (pagepool too "
                                             "small for the readers?)");
        // Dropped: evicted, or its token taken by a writer (then asked for again).
        if (Status s = ready_to_read_locked(lk, {e.file_block}, false); !s.ok()) return s;
        std::vector<uint64_t> again;
        load_locked(e.file_block, true, &again);
        lk.unlock();
        fetch(again);
        lk.lock();
        continue;
      }
      Block& b = it->second;
      if (b.state == Block::kFailed) {
        Status s = b.status;
        cached_bytes_ -= layout_.block_size();
        cache_.erase(it);
        return s;
      }
      // A sequential reader is done with what it read: the blocks fetched ahead of it are
      // newer in the LRU order and stay, where bumping this one evicted those unread.
      if (!stream) b.used = ++tick_;
      b.consumed = true;
      // Copied out without the file's lock (the node's other readers copy at the same
      // time; the replies that take it on the I/O thread go on): the block's memory stays
      // while this holds it, even if it leaves the cache meanwhile.
      BulkData held = b.data;
      lk.unlock();
      std::memcpy(out.data() + e.buf_offset, held->data() + e.offset, e.length);
      lk.lock();
      break;
    }
  }
  return Status::Ok();
}

Status StripedFile::close() {
  Status s = flush();
  bool was_closed;
  std::vector<Release> ended, cut_short;
  {
    MutexLock lk(mu_);
    if (!wait_locked(lk, deadline(2), [&]() REQUIRES(mu_) { return loading_ == 0; }) && s.ok())
      s = Status(Code::kTimeout, "close of " + name_ + ": reads still under way");
    was_closed = std::exchange(closed_, true);
    take_ended_locked(ended);
    cut_short.swap(releasing_);  // a write call of another thread still under way there
  }
  answer(ended);
  cancel(cut_short);
  if (opts_.tokens && !was_closed) {
    opts_.tokens->remove_holder(this);
    opts_.tokens->release(manager(), name_);
  }
  return s;
}

StripedFileStats StripedFile::stats() const {
  MutexLock lk(mu_);
  return st_;
}

}  // namespace pfsnet
