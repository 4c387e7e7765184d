#include "rpc/reply_cache.h"

#include <algorithm>

namespace pfsnet {
namespace {
// A record's own cost beside its reply: the map node and the entry.
constexpr size_t kEntryBytes = 100;
}  // namespace

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
    case Admit::kNotKept:
      return "not kept";
    case Admit::kFinished:
      return "finished";
  }
  return "?";
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
  for (auto it = c.entries.begin(); it != c.entries.end() && it->first < mark;) it = erase(c, it);
}

void ReplyCache::bound_entries(Client& c) {
  // The lowest finished records go first: the client is likeliest done with them.
  for (auto it = c.entries.begin();
       c.entries.size() > opts_.max_entries && it != c.entries.end();) {
    if (it->second.running) {
      ++it;
      continue;
    }
    c.evicted_max = std::max(c.evicted_max, it->first);
    it = erase(c, it);
    ++counts_.evicted_entries;
  }
}

Admission ReplyCache::admit(uint64_t incarnation, uint64_t xid, uint32_t done_lag, ReplyPath path,
                            TimePoint now) {
  Client& c = clients_[incarnation];
  c.last = now;
  forget_below(c, xid - std::min<uint64_t>(done_lag, xid));
  if (xid < c.done_below) {
    ++counts_.finished_copies;
    return {Admit::kFinished, nullptr};
  }
  auto it = c.entries.find(xid);
  if (it != c.entries.end()) {
    Entry& e = it->second;
    if (e.running) {
      e.path = path;  // the first run answers on the path the client used last
      ++counts_.running_copies;
      return {Admit::kRunning, nullptr};
    }
    if (e.kept) {
      ++counts_.replayed;
      return {Admit::kSaved, e.reply};
    }
    ++counts_.not_kept;
    return {Admit::kNotKept, nullptr};
  }
  if (xid <= c.evicted_max) {  // its record may have been one of those that went
    ++counts_.not_kept;
    return {Admit::kNotKept, nullptr};
  }
  Entry& e = c.entries[xid];
  e.path = path;
  ++entries_;
  bound_entries(c);
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
  e.running = false;
  size_t b = reply ? reply->bytes() : 0;
  if (reply && c.bytes + b <= opts_.max_bytes) {
    e.kept = true;
    e.reply = std::move(reply);
    c.bytes += b;
    bytes_ += b;
  } else {
    ++counts_.unsaved_replies;
  }
  ReplyPath p = e.path;
  bound_entries(c);  // a running record may have kept the count above the bound
  return p;
}

size_t ReplyCache::expire(TimePoint now) {
  size_t n = 0;
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (now - it->second.last < opts_.idle) {
      ++it;
      continue;
    }
    entries_ -= it->second.entries.size();
    bytes_ -= it->second.bytes;
    it = clients_.erase(it);
    ++n;
  }
  counts_.idle_clients += n;
  return n;
}

ReplyCacheStats ReplyCache::stats() const {
  ReplyCacheStats s = counts_;
  s.clients = clients_.size();
  s.entries = entries_;
  s.bytes = bytes_ + entries_ * kEntryBytes;
  return s;
}

}  // namespace pfsnet
