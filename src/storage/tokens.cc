#include "storage/tokens.h"

#include <pfsnet/msg_types.h>

#include <nlohmann/json.hpp>

#include "base/json_fields.h"
#include "base/log.h"
#include "storage/block_store.h"

namespace pfsnet {

using nlohmann::json;

// ------------------------------------------------------------------ the table

std::vector<Nid> TokenTable::conflicts(const std::string& file, const Nid& who, uint64_t start,
                                       uint64_t end) const {
  std::vector<Nid> out;
  auto f = files_.find(file);
  if (f == files_.end()) return out;
  for (const auto& [holder, ranges] : f->second) {
    if (holder == who.pack()) continue;
    for (const auto& [s, e] : ranges)
      if (TokenRange{s, e}.overlaps(start, end)) {
        out.push_back(Nid::unpack(holder).value_or(Nid()));
        break;
      }
  }
  return out;
}

uint64_t TokenTable::grantable_end(const std::string& file, const Nid& who, uint64_t end,
                                   uint64_t want_end) const {
  uint64_t best = std::max(end, want_end);
  auto f = files_.find(file);
  if (f == files_.end()) return best;
  for (const auto& [holder, ranges] : f->second) {
    if (holder == who.pack()) continue;
    // Its first range ending after `end` is where the grant must stop (at its start).
    auto it = ranges.upper_bound(end);
    if (it != ranges.begin() && std::prev(it)->second > end) --it;
    if (it != ranges.end()) best = std::min(best, std::max(end, it->first));
  }
  return best;
}

void TokenTable::grant(const std::string& file, const Nid& who, uint64_t start, uint64_t end) {
  auto& ranges = files_[file][who.pack()];
  // Merge with every range it touches.
  auto it = ranges.upper_bound(start);
  if (it != ranges.begin() && std::prev(it)->second >= start) --it;
  while (it != ranges.end() && it->first <= end) {
    start = std::min(start, it->first);
    end = std::max(end, it->second);
    it = ranges.erase(it);
  }
  ranges[start] = end;
}

void TokenTable::revoke(const std::string& file, const Nid& who, uint64_t start, uint64_t end) {
  auto f = files_.find(file);
  if (f == files_.end()) return;
  auto h = f->second.find(who.pack());
  if (h == f->second.end()) return;
  std::map<uint64_t, uint64_t> kept;
  for (const auto& [s, e] : h->second) {
    if (!TokenRange{s, e}.overlaps(start, end)) {
      kept[s] = e;
      continue;
    }
    if (s < start) kept[s] = start;
    if (e > end) kept[end] = e;
  }
  h->second = std::move(kept);
  if (h->second.empty()) f->second.erase(h);
  if (f->second.empty()) files_.erase(f);
}

void TokenTable::drop(const std::string& file, const Nid& who) {
  auto f = files_.find(file);
  if (f == files_.end()) return;
  f->second.erase(who.pack());
  if (f->second.empty()) files_.erase(f);
}

std::vector<TokenRange> TokenTable::held(const std::string& file, const Nid& who) const {
  std::vector<TokenRange> out;
  auto f = files_.find(file);
  if (f == files_.end()) return out;
  auto h = f->second.find(who.pack());
  if (h == f->second.end()) return out;
  for (const auto& [s, e] : h->second) out.push_back({s, e});
  return out;
}

// ------------------------------------------------------------------ messages

namespace {

constexpr uint64_t kMaxOffset = kTokenMaxOffset;

Buffer encode_range(const std::string& file, uint64_t start, uint64_t end, uint64_t want = 0) {
  return encode_token_range({file, start, end, want});
}

}  // namespace

Buffer encode_token_range(const TokenRangeMsg& m) {
  json j{{"file", m.file}, {"start", m.start}, {"end", m.end}};
  if (m.want_end != 0) j["want_end"] = m.want_end;
  return Buffer::copy_of(std::string_view(j.dump()));
}

Result<TokenRangeMsg> decode_token_range(std::span<const uint8_t> b, bool need_range) {
  auto bad = [](const std::string& why) { return Status(Code::kProtocol, "TOKEN: " + why); };
  json j = json::parse(b.begin(), b.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  TokenRangeMsg m;
  if (!j.contains("file") || !j["file"].is_string()) return bad("file: a name");
  m.file = j["file"].get<std::string>();
  if (Status s = check_file_name(m.file); !s.ok()) return bad(s.message());
  if (!need_range) return m;
  if (!j.contains("start") || !j.contains("end"))
    return bad("start and end: 0 <= start < end <= 2^62");
  auto start = json_int(j, "start", 0, 0, int64_t(kMaxOffset));
  auto end = json_int(j, "end", 0, 1, int64_t(kMaxOffset));
  if (!start.ok() || !end.ok() || *start >= *end)
    return bad("start and end: 0 <= start < end <= 2^62");
  m.start = static_cast<uint64_t>(*start);
  m.end = static_cast<uint64_t>(*end);
  if (j.contains("want_end")) {
    auto want = json_int(j, "want_end", 0, *end, int64_t(kMaxOffset));
    if (!want.ok()) return bad("want_end: end <= want_end <= 2^62");
    m.want_end = static_cast<uint64_t>(*want);
  }
  return m;
}

// ------------------------------------------------------------------ the service

struct TokenService::Pending {
  Nid who;
  TokenRangeMsg want;
  Responder reply;
  int rounds = 0;  // revocation rounds so far
};

TokenService::TokenService(RpcEngine& rpc, const Clock& clock, Duration timeout)
    : rpc_(rpc), timeout_(timeout), revokers_(4, clock) {
  rpc_.handle_async(kMsgTokenAcquire, "TOKEN_ACQUIRE",
                    [this](RpcRequest& req, Responder r) { on_acquire(req, std::move(r)); });
  rpc_.handle_async(kMsgTokenRevoke, "TOKEN_REVOKE",
                    [this](RpcRequest& req, Responder r) { on_revoke(req, std::move(r)); });
  rpc_.handle_async(kMsgTokenRelease, "TOKEN_RELEASE", [this](RpcRequest& req, Responder r) {
    auto m = decode_token_range(req.payload.span(), false);
    RpcResponse resp;
    if (!m.ok()) {
      resp.status = m.status();
    } else {
      MutexLock lk(mu_);
      table_.drop(m->file, req.from);
    }
    r.reply(std::move(resp));
  });
}

TokenService::~TokenService() { stop(); }

void TokenService::stop() {
  std::map<std::string, std::deque<std::shared_ptr<Pending>>> queued;
  {
    MutexLock lk(mu_);
    stopped_ = true;
    queued.swap(queue_);
  }
  queued.clear();  // their Responders answer kCancelled
  revokers_.stop();
}

void TokenService::on_acquire(RpcRequest& req, Responder r) {
  auto m = decode_token_range(req.payload.span(), true);
  if (!m.ok()) return r.reply(RpcResponse{m.status(), {}, {}});
  auto p = std::make_shared<Pending>();
  p->who = req.from;
  p->want = *m;
  p->reply = std::move(r);
  bool first = false;
  {
    MutexLock lk(mu_);
    if (stopped_) return p->reply.reply(RpcResponse{Status(Code::kCancelled, "stopping"), {}, {}});
    auto& q = queue_[m->file];
    q.push_back(p);
    first = q.size() == 1;
  }
  if (first) next(m->file);
}

void TokenService::next(const std::string& file) {
  std::shared_ptr<Pending> p;
  std::vector<Nid> holders;
  TokenRange granted;
  for (;;) {
    {
      MutexLock lk(mu_);
      auto q = queue_.find(file);
      if (q == queue_.end() || q->second.empty()) return;
      p = q->second.front();
      holders = table_.conflicts(file, p->who, p->want.start, p->want.end);
      if (holders.empty()) {
        granted = {p->want.start,
                   table_.grantable_end(file, p->who, p->want.end, p->want.want_end)};
        table_.grant(file, p->who, granted.start, granted.end);
        ++st_.granted;
        q->second.pop_front();
        if (q->second.empty()) queue_.erase(q);
      } else {
        ++p->rounds;
        st_.revocations += holders.size();
      }
    }
    if (!holders.empty()) break;
    RpcResponse granted_reply;  // granted; on to the next in line
    granted_reply.payload = encode_range(file, granted.start, granted.end);
    p->reply.reply(std::move(granted_reply));
  }
  // What the holders give up: from the required start to the desired end.
  const uint64_t give_end = std::max(p->want.end, p->want.want_end);
  // Revoke the overlap from every holder; come back when all have answered.
  struct Round {
    Mutex mu;
    size_t left GUARDED_BY(mu) = 0;
  };
  auto round = std::make_shared<Round>();
  {
    MutexLock lk(round->mu);
    round->left = holders.size();
  }
  CallOptions co;
  co.timeout = timeout_;
  co.urgent = true;  // the requester's writes wait on it: never behind I/O for a slot
  for (const Nid& h : holders)
    rpc_.call_async(
        h, kMsgTokenRevoke, encode_range(file, p->want.start, give_end), nullptr,
        [this, round, file, h, p, give_end](RpcReply&& r) {
          {
            MutexLock lk(mu_);
            if (r.status.ok()) {
              table_.revoke(file, h, p->want.start, give_end);
            } else {
              // It did not let go in time: it keeps no token on this file.
              PFS_LOG_WARN(
                  "token revocation of {} [{}, {}) from {} failed ({}): its tokens on "
                  "the file are dropped",
                  file, p->want.start, give_end, h.to_string(), r.status.message());
              table_.drop(file, h);
              ++st_.holders_dropped;
            }
          }
          bool last;
          {
            MutexLock lk(round->mu);
            last = --round->left == 0;
          }
          if (last) next(file);
        },
        co);
}

void TokenService::on_revoke(RpcRequest& req, Responder r) {
  auto m = decode_token_range(req.payload.span(), true);
  if (!m.ok()) return r.reply(RpcResponse{m.status(), {}, {}});
  auto reply = std::make_shared<Responder>(std::move(r));
  {
    MutexLock lk(mu_);
    ++busy_;
  }
  bool queued = revokers_.submit([this, m = *m, reply] {
    std::vector<TokenHolder*> hs;
    {
      MutexLock lk(mu_);
      for (TokenHolder* h : holders_)
        if (h->token_file() == m.file) hs.push_back(h);
      ++st_.revoked;
    }
    // Holders stay registered until closed, and close waits for no revocation: a holder
    // is used here only while registered -- see remove_holder.
    Status s;
    for (TokenHolder* h : hs)
      if (Status e = h->release_range(m.start, m.end); !e.ok() && s.ok()) s = e;
    reply->reply(RpcResponse{s, {}, {}});
    MutexLock lk(mu_);
    --busy_;
    cv_.notify_all();
  });
  if (!queued) {
    reply->reply(RpcResponse{Status(Code::kCancelled, "stopping"), {}, {}});
    MutexLock lk(mu_);
    --busy_;
    cv_.notify_all();
  }
}

Result<TokenRange> TokenService::acquire(const Nid& manager, const std::string& file,
                                         uint64_t start, uint64_t end, uint64_t want_end) {
  CallOptions co;
  // The manager may first revoke from others, each within the RPC timeout.
  co.timeout = 3 * timeout_;
  // Not behind this node's own queued writes: a revocation may wait for them, and they
  // for the slots an acquire would hold.
  co.urgent = true;
  RpcReply r =
      rpc_.call(manager, kMsgTokenAcquire, encode_range(file, start, end, want_end), nullptr, co);
  auto failed = [&](Code c, const std::string& why) {
    return Status(c, "write token for " + file + " [" + std::to_string(start) + ", " +
                         std::to_string(end) + ") from " + manager.to_string() + ": " + why);
  };
  if (!r.status.ok()) return failed(r.status.code(), r.status.message());
  // The range granted: at least the one asked for, within the one desired.
  auto g = decode_token_range(r.payload.span(), true);
  const uint64_t most = std::max(end, want_end);
  if (!g.ok() || g->file != file || g->start != start || g->end < end || g->end > most)
    return failed(Code::kProtocol, "the grant is not of the range asked for");
  MutexLock lk(mu_);
  ++st_.acquired;
  return TokenRange{g->start, g->end};
}

void TokenService::release(const Nid& manager, const std::string& file) {
  CallOptions co;
  co.timeout = timeout_;
  co.urgent = true;
  rpc_.call_async(
      manager, kMsgTokenRelease, Buffer::copy_of(std::string_view(json{{"file", file}}.dump())),
      nullptr, [](RpcReply&&) {}, co);
}

void TokenService::add_holder(TokenHolder* h) {
  MutexLock lk(mu_);
  holders_.insert(h);
}

void TokenService::remove_holder(TokenHolder* h) {
  MutexLock lk(mu_);
  holders_.erase(h);
  // A revocation that took it before it went finishes first.
  cv_.wait_for(lk, 3 * timeout_, [&]() REQUIRES(mu_) { return busy_ == 0; });
}

TokenStats TokenService::stats() const {
  MutexLock lk(mu_);
  return st_;
}

}  // namespace pfsnet
