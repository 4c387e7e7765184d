// StripedFile's side of the tokens (storage/tokens.h): holding one before a write or a
// read, and giving ranges back (TokenHolder). The rest of the file: striped_file.cc.
#include <algorithm>

#include "storage/striped_file.h"

namespace pfsnet {

void StripedFile::move_cursor(std::deque<uint64_t>& cursors, uint64_t at, uint64_t to) {
  if (auto c = std::find(cursors.begin(), cursors.end(), at); c != cursors.end()) cursors.erase(c);
  cursors.push_back(to);
  if (cursors.size() > kCursors) cursors.pop_front();
}

Status StripedFile::hold_token_locked(MutexLock& lk, TokenRange mine, TokenMode mode,
                                      bool sequential) {
  if (!opts_.tokens || mine.end <= mine.start) return Status::Ok();
  const RangeSet& held = mode == TokenMode::kWrite ? tokens_ : readable_;
  for (int tries = 0; !held.covers(mine.start, mine.end); ++tries) {
    if (tries == 8)
      return Status(Code::kTimeout, std::string(mode == TokenMode::kWrite ? "write" : "read") +
                                        " of " + name_ + ": its token was taken back 8 times");
    uint64_t epoch = revoke_epoch_;
    // Not under mu_ while the manager decides (a revocation of ours may be its answer).
    // mu_ itself, not lk: lk is the caller's and owns it again when this returns.
    mu_.unlock();
    auto got = opts_.tokens->acquire(manager(), name_, mine.start, mine.end,
                                     sequential ? kTokenMaxOffset : 0, mode);
    mu_.lock();
    if (!got.ok()) return got.status();
    ++(mode == TokenMode::kWrite ? st_.tokens_acquired : st_.read_tokens_acquired);
    if (epoch != revoke_epoch_) {
      // Taken back meanwhile (a revocation came between the grant and this thread):
      // ask again, after a random back-off of up to 2^tries ms (at most 64). Two
      // writers of one range otherwise took it from each other, each as soon as the
      // other was granted it and before it could write, until one gave up (1 run in
      // 12-20 of BlockServiceTest's overlapping writers failed "taken back 8 times").
      const int64_t cap_ms = int64_t(1) << std::min(tries + 1, 6);
      const auto pause = std::chrono::microseconds(
          std::uniform_int_distribution<int64_t>(0, cap_ms * 1000)(backoff_rng_));
      wait_locked(lk, rpc_.clock().now() + pause, [] { return false; });
      if (closed_) return Status(Code::kInvalidArgument, "file " + name_ + " is closed");
      continue;
    }
    if (mode == TokenMode::kWrite) tokens_.add(got->start, got->end);
    readable_.add(got->start, got->end);
  }
  return Status::Ok();
}

bool StripedFile::readable_locked(uint64_t fb) const {
  const uint64_t bs = layout_.block_size();
  return !opts_.tokens || readable_.covers(fb * bs, (fb + 1) * bs);
}

Status StripedFile::ready_to_read_locked(MutexLock& lk, const std::vector<uint64_t>& blocks,
                                         bool sequential) {
  if (blocks.empty()) return Status::Ok();
  const uint64_t bs = layout_.block_size();
  const TokenRange mine{blocks.front() * bs, (blocks.back() + 1) * bs};
  // Both waits let go of mu_: a write of this node may start during the token's, a
  // revocation come during the writes'. Bounded: each round waits for one of them.
  for (int round = 0; round < 8; ++round) {
    if (Status s = wait_writes_locked(lk, blocks, "read"); !s.ok()) return s;
    if (Status s = hold_token_locked(lk, mine, TokenMode::kRead, sequential); !s.ok()) return s;
    bool writing = false;
    for (uint64_t b : blocks) writing = writing || writing_.count(b) > 0;
    if (!writing) return Status::Ok();
  }
  return Status(Code::kTimeout, "read of " + name_ +
                                    ": its blocks were written or taken back 8 times while it "
                                    "waited for them");
}

void StripedFile::release_range(uint64_t start, uint64_t end, uint64_t want_end, TokenMode taker,
                                Released done) {
  const uint32_t bs = layout_.block_size();
  const bool to_writer = taker == TokenMode::kWrite;
  std::vector<Release> ended, cut_short;
  {
    MutexLock lk(mu_);
    // Of [end, want_end) it keeps from the first block at or past `end` it uses: a write
    // call under way, a block being written, or where a writer left off (it goes on
    // there); taken by a writer, also a read call under way or where a reader left off.
    uint64_t keep = std::max(end, want_end);
    auto use = [&](uint64_t at) {
      if (at >= end) keep = std::min(keep, std::max(end, at / bs * bs));
    };
    for (const TokenRange& a : active_) use(a.start);
    if (auto w = writing_.lower_bound((end + bs - 1) / bs); w != writing_.end()) use(w->first * bs);
    for (uint64_t c : cursors_) use(c);
    if (to_writer) {
      for (const TokenRange& r : reading_) use(r.start);
      for (uint64_t c : read_cursors_) use(c);
    }
    end = keep;
    tokens_.remove(start, end);
    if (to_writer) readable_.remove(start, end);
    ++revoke_epoch_;
    ++st_.tokens_revoked;
    // No write starts there now (the token is gone); the answer waits for those under way
    // to be acknowledged by the servers. A write's error comes at its flush, as without
    // tokens.
    releasing_.push_back(Release{start, end, std::move(done), to_writer});
    take_ended_locked(ended);
    if (closed_) cut_short.swap(releasing_);
  }
  answer(ended);
  cancel(cut_short);
}

bool StripedFile::writing_in_locked(uint64_t start, uint64_t end) const {
  const uint32_t bs = layout_.block_size();
  for (const TokenRange& a : active_)
    if (a.overlaps(start, end)) return true;
  auto w = writing_.lower_bound(start / bs);
  return w != writing_.end() && w->first < (end + bs - 1) / bs;
}

void StripedFile::take_ended_locked(std::vector<Release>& out) {
  const uint32_t bs = layout_.block_size();
  for (auto r = releasing_.begin(); r != releasing_.end();) {
    if (writing_in_locked(r->start, r->end)) {
      ++r;
      continue;
    }
    // Another node writes there next: a cached block would be stale.
    const uint64_t first = r->start / bs, last = (r->end + bs - 1) / bs;  // blocks
    for (auto c = cache_.lower_bound(first);
         r->drop_cache && c != cache_.end() && c->first < last;) {
      if (c->second.state == Block::kLoading) {
        c->second.stale = true;
        ++c;
      } else {
        cached_bytes_ -= bs;
        c = cache_.erase(c);
      }
    }
    out.push_back(std::move(*r));
    r = releasing_.erase(r);
  }
}

void StripedFile::lose_tokens(const Status& why) {
  std::vector<Release> owed;
  {
    MutexLock lk(mu_);
    tokens_ = RangeSet{};
    readable_ = RangeSet{};
    ++revoke_epoch_;  // a writer granted a token before this asks again
    ++st_.tokens_lost;
    // Other nodes may have written anywhere since this node lost its tokens.
    std::vector<uint64_t> cached;
    for (const auto& [fb, b] : cache_) cached.push_back(fb);
    for (uint64_t fb : cached) drop_cached_locked(fb);
    if (write_error_.ok() && dirty_bytes_ > 0)
      write_error_ =
          Status(why.code(), "write of " + name_ + ": " + why.message() +
                                 " (writes not acknowledged before are lost: redo them)");
    owed.swap(releasing_);  // their manager dropped our tokens already
    notify_everyone();
  }
  for (Release& r : owed) r.done(why);
}

void StripedFile::answer(std::vector<Release>& ended) {
  for (Release& r : ended) r.done(r.end);
  ended.clear();
}

void StripedFile::cancel(std::vector<Release>& cut_short) const {
  for (Release& r : cut_short)
    r.done(Status(Code::kCancelled, "file " + name_ +
                                        " closed with a write still under way in the range "
                                        "it gave back"));
  cut_short.clear();
}

Status StripedFile::not_evicted_locked(uint64_t lost) const {
  // A revocation answers once the write calls under way there end (release_range); an
  // eviction takes every token at once (lose_tokens): then nothing more of a call goes out.
  if (st_.tokens_lost == lost) return Status::Ok();
  return Status(Code::kPeerDead, "write of " + name_ +
                                     ": its write token was lost while it waited (this node "
                                     "was declared dead by the MGS); write it again");
}

}  // namespace pfsnet
