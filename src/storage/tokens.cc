#include "storage/tokens.h"

#include <algorithm>

#include "base/log.h"
#include "rpc/msg_types.h"
#include "storage/block_store.h"
#include "wire/byte_codec.h"

namespace pfsnet {

// ------------------------------------------------------------------ messages

namespace {

constexpr uint64_t kMaxOffset = kTokenMaxOffset;

// The TOKEN_* methods (rpc/rpc_method.h); the messages are in tokens.h.
Result<TokenRangeMsg> decode_range(std::span<const uint8_t> b) {
  return decode_token_range(b, true);
}
Result<TokenRangeMsg> decode_file(std::span<const uint8_t> b) {
  return decode_token_range(b, false);
}
const RpcMethod<TokenRangeMsg, TokenRangeMsg> kAcquire{.type = kMsgTokenAcquire,
                                                       .name = "TOKEN_ACQUIRE",
                                                       .exec = Execution::kOnceRestartSafe,
                                                       .encode_request = encode_token_range,
                                                       .decode_request = decode_range,
                                                       .encode_reply = encode_token_range,
                                                       .decode_reply = decode_range};
const RpcMethod<TokenRangeMsg, TokenRangeMsg> kRevoke{.type = kMsgTokenRevoke,
                                                      .name = "TOKEN_REVOKE",
                                                      .exec = Execution::kOnceRestartSafe,
                                                      .encode_request = encode_token_range,
                                                      .decode_request = decode_range,
                                                      .encode_reply = encode_token_range,
                                                      .decode_reply = decode_range};
const RpcMethod<TokenRangeMsg, Empty> kRelease{.type = kMsgTokenRelease,
                                               .name = "TOKEN_RELEASE",
                                               .exec = Execution::kOnceRestartSafe,
                                               .encode_request = encode_token_range,
                                               .decode_request = decode_file,
                                               .encode_reply = encode_empty,
                                               .decode_reply = decode_empty};

// An answer naming the range [start, e) of `file` with end <= e <= most: a grant (at least
// the range asked for, within the one desired), or what a holder released.
bool spans(const Result<TokenRangeMsg>& m, const std::string& file, uint64_t start, uint64_t end,
           uint64_t most) {
  return m.ok() && m->file == file && m->start == start && m->end >= end && m->end <= most;
}

std::string range_text(uint64_t start, uint64_t end) {
  return "[" + std::to_string(start) + ", " + std::to_string(end) + ")";
}

}  // namespace

Buffer encode_token_range(const TokenRangeMsg& m) {
  ByteWriter w;
  w.str(m.file);
  w.u64(m.start);
  w.u64(m.end);
  w.u64(m.want_end);
  w.u8(static_cast<uint8_t>(m.mode));
  w.u64(m.seq);
  return w.take();
}

Result<TokenRangeMsg> decode_token_range(std::span<const uint8_t> b, bool need_range) {
  auto bad = [](const std::string& why) { return Status(Code::kProtocol, "TOKEN: " + why); };
  ByteReader r(b);
  TokenRangeMsg m;
  m.file = r.str();
  m.start = r.u64();
  m.end = r.u64();
  m.want_end = r.u64();
  const uint8_t mode = r.u8();
  m.seq = r.u64();
  if (!r.done())
    return bad("malformed (a file name, three 8-byte offsets, a mode byte, an 8-byte number)");
  if (Status s = check_file_name(m.file); !s.ok()) return bad(s.message());
  if (mode > static_cast<uint8_t>(TokenMode::kWrite))
    return bad("mode " + std::to_string(mode) + " (0: read, 1: write)");
  m.mode = static_cast<TokenMode>(mode);
  if (!need_range) return m;
  if (m.start >= m.end || m.end > kMaxOffset) return bad("start and end: 0 <= start < end <= 2^62");
  if (m.want_end != 0 && (m.want_end < m.end || m.want_end > kMaxOffset))
    return bad("want_end: end <= want_end <= 2^62");
  return m;
}

// ------------------------------------------------------------------ the service

struct TokenService::Pending {
  Nid who;
  uint64_t incarnation = 0;
  TokenRangeMsg want;
  TypedResponder<TokenRangeMsg> reply;
  size_t revoking = 0;      // revocations of its round not yet answered (under mu_)
  bool fence_wait = false;  // it waited for an evicted holder's fence (under mu_)
};

TokenService::TokenService(RpcEngine& rpc, Duration timeout) : rpc_(rpc), timeout_(timeout) {
  // Neither holds its sender's credit while it waits: an acquire waits for revocations
  // answered by the very nodes whose acquires wait, a revocation for block writes' replies
  // from the very server that waits for it (see AsyncCredit).
  serve_async(
      rpc_, kAcquire,
      [this](TokenRangeMsg&& m, RpcRequest& req, TypedResponder<TokenRangeMsg> r) {
        on_acquire(std::move(m), req.from, req.incarnation, std::move(r));
      },
      AsyncCredit::kReturned);
  serve_async(
      rpc_, kRevoke,
      [this](TokenRangeMsg&& m, RpcRequest&, TypedResponder<TokenRangeMsg> r) {
        on_revoke(std::move(m), std::move(r));
      },
      AsyncCredit::kReturned);
  serve_async(rpc_, kRelease, [this](TokenRangeMsg&& m, RpcRequest& req, TypedResponder<Empty> r) {
    on_release(m, req.from, req.incarnation);
    r.reply(Empty{});
  });
}

void TokenService::on_release(const TokenRangeMsg& m, const Nid& from, uint64_t incarnation) {
  MutexLock lk(mu_);
  auto g = granted_seq_.find({m.file, from});
  if (g != granted_seq_.end() && g->second.incarnation == incarnation && g->second.seq > m.seq) {
    ++st_.stale_releases;  // sent before an acquire granted since: it would undo that grant
    return;
  }
  if (g != granted_seq_.end()) granted_seq_.erase(g);
  table_.drop(m.file, from);
}

TokenService::~TokenService() { stop(); }

void TokenService::stop() {
  if (Fence* f = fence_.load(); f && fence_sub_ >= 0) {
    f->unsubscribe(fence_sub_);
    fence_sub_ = -1;
  }
  std::map<std::string, std::deque<std::shared_ptr<Pending>>> queued;
  {
    MutexLock lk(mu_);
    stopped_ = true;
    queued.swap(queue_);
  }
  queued.clear();  // their Responders answer kCancelled
}

void TokenService::on_acquire(TokenRangeMsg m, const Nid& from, uint64_t incarnation,
                              TypedResponder<TokenRangeMsg> r) {
  auto p = std::make_shared<Pending>();
  p->who = from;
  p->incarnation = incarnation;
  p->want = m;
  p->reply = std::move(r);
  {
    MutexLock lk(mu_);
    if (stopped_) return p->reply.fail(Status(Code::kCancelled, "stopping"));
    queue_[m.file].push_back(p);
  }
  next(m.file);
}

bool TokenService::evicted(const Nid& who) const {
  Fence* f = fence_.load();
  return f && f->evicted(who).has_value();
}

void TokenService::next(const std::string& file) {
  std::vector<std::pair<std::shared_ptr<Pending>, TokenRange>> grants;
  std::vector<std::pair<std::shared_ptr<Pending>, std::vector<Nid>>> rounds;
  {
    MutexLock lk(mu_);
    auto q = queue_.find(file);
    if (q == queue_.end()) return;
    auto& pending = q->second;
    // Requests of evicted nodes wait for their readmission, holding up no one.
    std::vector<bool> held;
    for (const auto& p : pending) held.push_back(evicted(p->who));
    for (size_t i = 0; i < pending.size();) {
      const std::shared_ptr<Pending> p = pending[i];
      // Decided after every earlier request its required range overlaps (arrival order),
      // and not while a revocation from its own node is out (a grant then could be undone
      // by that revocation's answer).
      bool wait = held[i] || p->revoking > 0 || revoking_.count({file, p->who}) > 0;
      for (size_t j = 0; j < i && !wait; ++j)
        wait = !held[j] && TokenRange{pending[j]->want.start, pending[j]->want.end}.overlaps(
                               p->want.start, p->want.end);
      if (wait) {
        ++i;
        continue;
      }
      const TokenMode mode = p->want.mode;
      std::vector<Nid> holders = table_.conflicts(file, p->who, p->want.start, p->want.end, mode);
      // An evicted holder's tokens go to nobody until it is fenced (a data server that has
      // not heard could still take its write); nothing to revoke from it.
      bool unfenced = false;
      for (const Nid& h : holders) {
        auto u = unfenced_.find(h);
        if (u == unfenced_.end()) continue;
        if (rpc_.clock().now() - u->second < timeout_) {
          unfenced = true;
          continue;
        }
        PFS_LOG_WARN("tokens: no word of {}'s fence within {} s of its eviction: its tokens go",
                     h.to_string(),
                     std::chrono::duration_cast<std::chrono::seconds>(timeout_).count());
        drop_evicted({h});
      }
      if (unfenced) {
        if (!p->fence_wait) ++st_.fence_waits;
        p->fence_wait = true;
        ++i;
        continue;
      }
      holders = table_.conflicts(file, p->who, p->want.start, p->want.end, mode);
      if (!holders.empty()) {
        p->revoking = holders.size();
        st_.revocations += holders.size();
        if (mode == TokenMode::kRead) st_.downgrades += holders.size();
        for (const Nid& h : holders) revoking_.insert({file, h});
        rounds.emplace_back(p, std::move(holders));
        ++i;
        continue;
      }
      uint64_t end = table_.grantable_end(file, p->who, p->want.end, p->want.want_end, mode);
      for (size_t j = 0; j < pending.size(); ++j)  // not into what another waiting one needs
        if (pending[j] != p && !held[j] && pending[j]->want.start >= p->want.end)
          end = std::min(end, pending[j]->want.start);
      table_.grant(file, p->who, p->want.start, end, mode);
      Granted& gs = granted_seq_[{file, p->who}];
      if (gs.incarnation != p->incarnation) gs = Granted{p->incarnation, 0};
      gs.seq = std::max(gs.seq, p->want.seq);
      ++st_.granted;
      if (mode == TokenMode::kRead) ++st_.read_grants;
      grants.emplace_back(p, TokenRange{p->want.start, end});
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (pending.empty()) queue_.erase(q);
  }
  for (auto& [p, g] : grants) p->reply.reply(TokenRangeMsg{file, g.start, g.end, 0, p->want.mode});
  for (auto& [p, holders] : rounds) revoke_round(file, p, holders);
}

void TokenService::revoke_round(const std::string& file, const std::shared_ptr<Pending>& p,
                                const std::vector<Nid>& holders) {
  // Each holder gives up the required range and what it does not use of the desired one.
  const uint64_t start = p->want.start, end = p->want.end;
  const uint64_t most = std::max(end, p->want.want_end);
  const TokenMode mode = p->want.mode;
  CallOptions co;
  co.timeout = timeout_;
  co.attempt_timeout = timeout_;  // the holder answers once its writes there are acknowledged
  co.urgent = true;               // the requester's writes wait on it: never behind I/O for a slot
  for (const Nid& h : holders) {
    call_async(
        rpc_, kRevoke, h, TokenRangeMsg{file, start, end, p->want.want_end, mode},
        [this, file, h, p, start, end, most, mode](Result<TokenRangeMsg> released) {
          Status s = released.ok() ? Status::Ok() : released.status();
          if (s.ok() && !spans(released, file, start, end, most))
            s = Status(Code::kProtocol, "its answer is not a range from " + std::to_string(start) +
                                            " to between " + std::to_string(end) + " and " +
                                            std::to_string(most));
          MutexLock lk(mu_);
          if (s.ok()) {
            table_.revoke(file, h, start, released->end, mode);
          } else if (unfenced_.count(h)) {
            // Evicted while we asked: its tokens wait for its fence (next() sees them).
          } else {
            // It did not let go in time: it keeps no token on this file.
            PFS_LOG_WARN(
                "token revocation of {} [{}, {}) from {} failed ({}): its tokens on the file "
                "are dropped",
                file, start, end, h.to_string(), s.message());
            table_.drop(file, h);
            ++st_.holders_dropped;
          }
          revoking_.erase(revoking_.find({file, h}));
          --p->revoking;
          lk.unlock();
          next(file);  // this round's request, or others its holder's revocation held up
        },
        co);
  }
}

void TokenService::on_revoke(TokenRangeMsg m, TypedResponder<TokenRangeMsg> r) {
  // Every holder of the file gives back what it does not use; the answer is the least of
  // theirs, once all have answered (none: what no open file of it uses, all of it).
  struct Gather {
    Mutex mu;
    size_t left GUARDED_BY(mu) = 0;
    Status status GUARDED_BY(mu);
    uint64_t released GUARDED_BY(mu) = 0;
    TypedResponder<TokenRangeMsg> reply;  // answered once, by the last holder's answer
  };
  auto g = std::make_shared<Gather>();
  g->reply = std::move(r);
  std::vector<TokenHolder*> hs;
  {
    MutexLock lk(mu_);
    for (TokenHolder* h : holders_)
      if (h->token_file() == m.file) hs.push_back(h);
    ++st_.revoked;
    ++busy_;  // remove_holder waits until its holder has been handed the range
  }
  {
    MutexLock lk(g->mu);
    g->left = hs.size() + 1;  // +1: this function, until every holder has been asked
    g->released = std::max(m.end, m.want_end);
  }
  auto answer = [g, m](Result<uint64_t> e) {
    MutexLock lk(g->mu);
    if (!e.ok() && g->status.ok()) g->status = e.status();
    if (e.ok()) g->released = std::min(g->released, *e);
    if (--g->left > 0) return;
    Status s = g->status;
    uint64_t released = g->released;
    lk.unlock();
    if (s.ok())
      g->reply.reply(TokenRangeMsg{m.file, m.start, released, 0});
    else
      g->reply.fail(s);
  };
  // Holders stay registered until closed; one is used here only while registered (see
  // remove_holder), and answers when its writes there are acknowledged.
  for (TokenHolder* h : hs) h->release_range(m.start, m.end, m.want_end, m.mode, answer);
  {
    MutexLock lk(mu_);
    --busy_;
    cv_.notify_all();
  }
  answer(std::max(m.end, m.want_end));
}

CallOptions TokenService::acquire_options() const {
  CallOptions co;
  // The manager may first revoke from others, each within the RPC timeout: a slow answer
  // is not a lost one (one attempt).
  co.timeout = 3 * timeout_;
  co.attempt_timeout = co.timeout;
  // Not behind this node's own queued writes: a revocation may wait for them, and they
  // for the slots an acquire would hold.
  co.urgent = true;
  return co;
}

Result<TokenRange> TokenService::granted(const Nid& manager, const TokenRangeMsg& asked,
                                         const Result<TokenRangeMsg>& g) {
  auto failed = [&](Code c, const std::string& why) {
    return Status(c, std::string(token_mode_name(asked.mode)) + " token for " + asked.file + " " +
                         range_text(asked.start, asked.end) + " from " + manager.to_string() +
                         ": " + why);
  };
  if (!g.ok()) return failed(g.status().code(), g.status().message());
  // The range granted: at least the one asked for, within the one desired, in its mode.
  const uint64_t most = std::max(asked.end, asked.want_end);
  if (!spans(g, asked.file, asked.start, asked.end, most) || g->mode != asked.mode)
    return failed(Code::kProtocol, "the grant is not of the range and mode asked for");
  MutexLock lk(mu_);
  ++st_.acquired;
  return TokenRange{g->start, g->end};
}

Result<TokenRange> TokenService::acquire(const Nid& manager, const std::string& file,
                                         uint64_t start, uint64_t end, uint64_t want_end,
                                         TokenMode mode) {
  const TokenRangeMsg asked{file, start, end, want_end, mode, acquires_sent_.fetch_add(1) + 1};
  return granted(manager, asked, call(rpc_, kAcquire, manager, asked, acquire_options()));
}

void TokenService::acquire_async(const Nid& manager, const std::string& file, uint64_t start,
                                 uint64_t end, uint64_t want_end,
                                 std::function<void(Result<TokenRange>)> done, TokenMode mode) {
  const TokenRangeMsg asked{file, start, end, want_end, mode, acquires_sent_.fetch_add(1) + 1};
  call_async(
      rpc_, kAcquire, manager, asked,
      [this, manager, asked, done = std::move(done)](Result<TokenRangeMsg> g) {
        done(granted(manager, asked, g));
      },
      acquire_options());
}

void TokenService::release(const Nid& manager, const std::string& file) {
  TokenRangeMsg m{file, 0, 0, 0};
  {
    MutexLock lk(mu_);
    for (TokenHolder* h : holders_)
      if (h->token_file() == file) return;  // another handle here still uses them
    m.seq = acquires_sent_.load();  // every acquire numbered so far goes before this release
  }
  CallOptions co;
  co.timeout = timeout_;
  co.urgent = true;
  call_async(
      rpc_, kRelease, manager, m, [](Result<Empty>) {}, co);
}

void TokenService::follow(Fence& fence) {
  fence_.store(&fence);
  fence_sub_ = fence.subscribe([this](const FenceEvent& e) { on_fence(e); });
}

void TokenService::on_fence(const FenceEvent& e) {
  if (e.kind == FenceEvent::kSelfEvicted) {
    std::vector<TokenHolder*> hs;
    {
      MutexLock lk(mu_);
      hs.assign(holders_.begin(), holders_.end());
      ++st_.evictions;
      ++busy_;  // remove_holder waits until its holder has been told
    }
    for (TokenHolder* h : hs) h->lose_tokens(Status(Code::kPeerDead, e.why));
    MutexLock lk(mu_);
    --busy_;
    cv_.notify_all();
    return;
  }
  std::vector<std::shared_ptr<Pending>> failed;
  std::vector<std::string> files;
  {
    MutexLock lk(mu_);
    if (e.kind == FenceEvent::kFenced || e.kind == FenceEvent::kReadmitted) {
      if (drop_evicted(e.nids))
        PFS_LOG_INFO("tokens: {} is {}: its tokens go to others now", e.nids[0].to_string(),
                     e.kind == FenceEvent::kFenced ? "fenced" : "back");
    }
    if (e.kind == FenceEvent::kEvicted) {
      for (const Nid& n : e.nids) {
        size_t had = table_.files_held(n);
        st_.holders_evicted += had;
        if (had == 0) continue;
        unfenced_.emplace(n, rpc_.clock().now());
        PFS_LOG_WARN(
            "tokens: {} evicted: its tokens on {} file(s) are lost to it, and go to others once "
            "every server refuses it ({})",
            n.to_string(), had, e.why);
      }
      // Its requests queued before the verdict are of the evicted session.
      for (auto& [file, q] : queue_)
        for (auto it = q.begin(); it != q.end();) {
          bool theirs = std::find(e.nids.begin(), e.nids.end(), (*it)->who) != e.nids.end();
          if (theirs) failed.push_back(*it);
          it = theirs ? q.erase(it) : std::next(it);
        }
      std::erase_if(queue_, [](const auto& f) { return f.second.empty(); });
    }
    for (const auto& [file, q] : queue_) files.push_back(file);
  }
  for (auto& p : failed) p->reply.fail(Status(Code::kPeerDead, e.why));
  for (const std::string& f : files) next(f);  // what its tokens or its requests held up
}

bool TokenService::drop_evicted(const std::vector<Nid>& nids) {
  bool any = false;
  for (const Nid& n : nids)
    if (unfenced_.erase(n) > 0) {
      table_.drop_everywhere(n);
      std::erase_if(granted_seq_, [&](const auto& g) { return g.first.second == n; });
      any = true;
    }
  return any;
}

void TokenService::add_holder(TokenHolder* h) {
  MutexLock lk(mu_);
  holders_.insert(h);
}

void TokenService::remove_holder(TokenHolder* h) {
  MutexLock lk(mu_);
  holders_.erase(h);
  // A revocation that took it before it went has handed it the range first (never long:
  // release_range does not block).
  cv_.wait_for(lk, timeout_, [&]() REQUIRES(mu_) { return busy_ == 0; });
}

TokenStats TokenService::stats() const {
  MutexLock lk(mu_);
  return st_;
}

}  // namespace pfsnet
