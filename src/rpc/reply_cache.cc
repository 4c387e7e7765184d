#include "rpc/reply_cache.h"

#include <algorithm>

#include "wire/byte_codec.h"

namespace pfsnet {
namespace {
// A record's own cost beside its reply: the map node and the entry.
constexpr size_t kEntryBytes = 100;
}  // namespace

Buffer encode_done(const DoneAck& d) {
  ByteWriter w;
  w.u64(d.upper);
  w.u32(static_cast<uint32_t>(d.open.size()));
  for (uint64_t x : d.open) w.u64(x);
  return w.take();
}

Result<DoneAck> decode_done(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  DoneAck d;
  d.upper = r.u64();
  size_t n = r.count(8);
  if (r.ok() && n > kMaxDoneOpen)
    return Status(Code::kProtocol, "malformed DONE: " + std::to_string(n) + " open xids (at most " +
                                       std::to_string(kMaxDoneOpen) + ")");
  d.open.reserve(n);
  for (size_t i = 0; i < n && r.ok(); ++i) {
    uint64_t x = r.u64();
    if (x >= d.upper || (!d.open.empty() && x <= d.open.back()))
      return Status(Code::kProtocol, "malformed DONE: open xids not sorted below the upper bound");
    d.open.push_back(x);
  }
  if (!r.done()) return Status(Code::kProtocol, "malformed DONE: its length");
  return d;
}

size_t SavedReply::bytes() const {
  return kHeaderSize + payload.size() + (bulk ? std::min(bulk->size(), bulk_limit) : 0);
}

std::string_view admit_name(Admit a) {
  switch (a) {
    case Admit::kRun:
      return "run";
    case Admit::kRunning:
      return "running";
    case Admit::kSaved:
      return "saved";
    case Admit::kFinished:
      return "finished";
    case Admit::kOverWindow:
      return "over window";
    case Admit::kUnknown:
      return "unknown";
    case Admit::kBeforeStart:
      return "before start";
  }
  return "?";
}

bool ReplyCache::of_retired(uint64_t incarnation, uint64_t xid) const {
  if (retired_.empty()) return false;  // the usual case: no lookup
  auto r = retired_.find(incarnation);
  return r != retired_.end() && xid <= r->second;
}

bool ReplyCache::finished(const Client& c, uint64_t xid) const {
  if (xid < c.done_below) return true;
  return xid < c.done_upper && !std::binary_search(c.open.begin(), c.open.end(), xid);
}

std::map<uint64_t, ReplyCache::Entry>::iterator ReplyCache::erase(
    Client& c, std::map<uint64_t, Entry>::iterator it) {
  if (it->second.reply) {
    size_t b = it->second.reply->bytes();
    c.bytes -= b;
    bytes_ -= b;
  }
  --entries_;
  return c.entries.erase(it);
}

void ReplyCache::forget_below(Client& c, uint64_t mark) {
  if (mark <= c.done_below) return;
  c.done_below = mark;
  c.open.erase(c.open.begin(), std::lower_bound(c.open.begin(), c.open.end(), mark));
  for (auto it = c.entries.begin(); it != c.entries.end() && it->first < mark;) {
    if (it->second.running) {  // given up at the client while it runs: its reply is not kept
      it->second.finished = true;
      ++it;
    } else {
      it = erase(c, it);
    }
  }
}

Admission ReplyCache::admit(uint64_t incarnation, uint64_t xid, uint32_t done_lag, ReplyPath path,
                            TimePoint now, bool copy) {
  Client& c = clients_[incarnation];
  c.last = now;
  c.from = path.from;
  forget_below(c, xid - std::min<uint64_t>(done_lag, xid));
  if (finished(c, xid)) {
    ++counts_.finished_copies;
    return {Admit::kFinished, nullptr};
  }
  auto it = c.entries.find(xid);
  if (it != c.entries.end() && it->second.not_run) {  // the damaged one did not run: this does
    it->second = Entry{};
    it->second.path = path;
    return {Admit::kRun, nullptr};
  }
  if (it != c.entries.end()) {
    Entry& e = it->second;
    if (e.running) {
      e.path = path;  // the first run answers on the path the client used last
      ++counts_.running_copies;
      return {Admit::kRunning, nullptr};
    }
    ++counts_.replayed;
    return {Admit::kSaved, e.reply};
  }
  if (of_retired(incarnation, xid)) {
    ++counts_.unknown;  // a copy of a request of state this cache let go
    return {Admit::kUnknown, nullptr};
  }
  if (copy && now - started_ < opts_.restart_window) {
    ++counts_.before_start;  // its first copy may have gone to the server's previous run
    return {Admit::kBeforeStart, nullptr};
  }
  if (c.entries.size() >= opts_.window) {
    ++counts_.over_window;
    return {Admit::kOverWindow, nullptr};
  }
  c.max_xid = std::max(c.max_xid, xid);
  Entry& e = c.entries[xid];
  e.path = path;
  ++entries_;
  return {Admit::kRun, nullptr};
}

std::optional<ReplyPath> ReplyCache::finish(uint64_t incarnation, uint64_t xid,
                                            std::shared_ptr<const SavedReply> reply) {
  auto ci = clients_.find(incarnation);
  if (ci == clients_.end()) return std::nullopt;
  Client& c = ci->second;
  auto it = c.entries.find(xid);
  if (it == c.entries.end() || !it->second.running) return std::nullopt;
  Entry& e = it->second;
  ReplyPath p = e.path;
  if (e.finished) {  // nobody will ask for it again
    erase(c, it);
    return p;
  }
  e.running = false;
  if (reply) {
    size_t b = reply->bytes();
    e.reply = std::move(reply);
    c.bytes += b;
    bytes_ += b;
  }
  return p;
}

void ReplyCache::refused(uint64_t incarnation, uint64_t xid, TimePoint now) {
  Client& c = clients_[incarnation];
  c.last = now;
  if (finished(c, xid) || c.entries.count(xid) || c.entries.size() >= opts_.window) return;
  if (of_retired(incarnation, xid)) return;
  c.max_xid = std::max(c.max_xid, xid);
  Entry& e = c.entries[xid];
  e.running = false;
  e.not_run = true;
  ++entries_;
}

void ReplyCache::done(uint64_t incarnation, const DoneAck& d, TimePoint now) {
  Client& c = clients_[incarnation];
  c.last = now;
  ++counts_.done_acks;
  if (d.upper <= c.done_upper) return;  // an older one: what it says is known already
  c.done_upper = d.upper;
  c.open.clear();
  for (uint64_t x : d.open)
    if (x >= c.done_below) c.open.push_back(x);
  for (auto it = c.entries.begin(); it != c.entries.end() && it->first < d.upper;) {
    if (!finished(c, it->first)) {
      ++it;
    } else if (it->second.running) {
      it->second.finished = true;
      ++it;
    } else {
      it = erase(c, it);
    }
  }
}

std::unordered_map<uint64_t, ReplyCache::Client>::iterator ReplyCache::retire(
    std::unordered_map<uint64_t, Client>::iterator it) {
  if (opts_.retired > 0) {
    if (retired_order_.size() >= opts_.retired) {
      auto [inc, max] = retired_order_.front();
      retired_order_.pop_front();
      if (auto r = retired_.find(inc); r != retired_.end() && r->second == max) retired_.erase(r);
    }
    uint64_t& max = retired_[it->first];
    max = std::max(max, it->second.max_xid);
    retired_order_.emplace_back(it->first, max);
  }
  entries_ -= it->second.entries.size();
  bytes_ -= it->second.bytes;
  return clients_.erase(it);
}

size_t ReplyCache::retire_if(const std::function<bool(const Client&)>& pred) {
  size_t n = 0;
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (pred(it->second)) {
      it = retire(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

size_t ReplyCache::evict(const Nid& client) {
  size_t n = retire_if([client](const Client& c) { return c.from == client; });
  counts_.evicted_clients += n;
  return n;
}

size_t ReplyCache::expire(TimePoint now) {
  size_t n = retire_if([&](const Client& c) { return now - c.last >= opts_.idle; });
  counts_.idle_clients += n;
  return n;
}

ReplyCacheStats ReplyCache::stats() const {
  ReplyCacheStats s = counts_;
  s.clients = clients_.size();
  s.entries = entries_;
  s.bytes = bytes_ + entries_ * kEntryBytes;
  s.window = opts_.window;
  for (const auto& [inc, c] : clients_) s.max_entries = std::max(s.max_entries, c.entries.size());
  return s;
}

}  // namespace pfsnet
