#include "storage/token_table.h"

#include <algorithm>

namespace pfsnet {

// ------------------------------------------------------------------ ranges

void RangeSet::add(uint64_t start, uint64_t end) {
  if (start >= end) return;
  auto it = r_.upper_bound(start);
  if (it != r_.begin() && std::prev(it)->second >= start) --it;
  while (it != r_.end() && it->first <= end) {
    start = std::min(start, it->first);
    end = std::max(end, it->second);
    it = r_.erase(it);
  }
  r_[start] = end;
}

void RangeSet::remove(uint64_t start, uint64_t end) {
  if (start >= end) return;
  auto it = r_.upper_bound(start);
  if (it != r_.begin() && std::prev(it)->second > start) --it;
  while (it != r_.end() && it->first < end) {
    const uint64_t s = it->first, e = it->second;
    it = r_.erase(it);
    if (s < start) r_[s] = start;
    if (e > end) {
      r_[end] = e;  // the ranges after it start past e
      break;
    }
  }
}

bool RangeSet::covers(uint64_t start, uint64_t end) const {
  auto it = r_.upper_bound(start);
  if (it == r_.begin()) return false;
  --it;
  return end <= it->second;
}

bool RangeSet::overlaps(uint64_t start, uint64_t end) const {
  auto first = first_at_or_after(start);
  return first && *first < end;
}

std::optional<uint64_t> RangeSet::first_at_or_after(uint64_t at) const {
  auto it = r_.upper_bound(at);
  if (it != r_.begin() && std::prev(it)->second > at) return at;
  if (it == r_.end()) return std::nullopt;
  return it->first;
}

std::vector<TokenRange> RangeSet::ranges() const {
  std::vector<TokenRange> out;
  for (const auto& [s, e] : r_) out.push_back({s, e});
  return out;
}

// ------------------------------------------------------------------ the table

const char* token_mode_name(TokenMode m) { return m == TokenMode::kWrite ? "write" : "read"; }

namespace {

// Which of another holder's ranges a `mode` token conflicts with: a writer's with every
// token (the readable ranges), a reader's with write tokens only.
TokenMode conflicting_mode(TokenMode mode) {
  return mode == TokenMode::kWrite ? TokenMode::kRead : TokenMode::kWrite;
}

}  // namespace

std::vector<Nid> TokenTable::conflicts(const std::string& file, const Nid& who, uint64_t start,
                                       uint64_t end, TokenMode mode) const {
  std::vector<Nid> out;
  auto f = files_.find(file);
  if (f == files_.end()) return out;
  for (const auto& [holder, h] : f->second)
    if (holder != who && h.of(conflicting_mode(mode)).overlaps(start, end)) out.push_back(holder);
  return out;
}

uint64_t TokenTable::grantable_end(const std::string& file, const Nid& who, uint64_t end,
                                   uint64_t want_end, TokenMode mode) const {
  uint64_t best = std::max(end, want_end);
  auto f = files_.find(file);
  if (f == files_.end()) return best;
  for (const auto& [holder, h] : f->second) {
    if (holder == who) continue;
    // Where another holder's conflicting tokens begin at or past `end` the grant must stop.
    if (auto first = h.of(conflicting_mode(mode)).first_at_or_after(end))
      best = std::min(best, *first);
  }
  return best;
}

void TokenTable::grant(const std::string& file, const Nid& who, uint64_t start, uint64_t end,
                       TokenMode mode) {
  Holding& h = files_[file][who];
  if (mode == TokenMode::kWrite) h.write.add(start, end);
  h.readable.add(start, end);
}

void TokenTable::revoke(const std::string& file, const Nid& who, uint64_t start, uint64_t end,
                        TokenMode mode) {
  auto f = files_.find(file);
  if (f == files_.end()) return;
  auto h = f->second.find(who);
  if (h == f->second.end()) return;
  h->second.write.remove(start, end);
  if (mode == TokenMode::kWrite) h->second.readable.remove(start, end);
  if (h->second.readable.empty()) f->second.erase(h);
  if (f->second.empty()) files_.erase(f);
}

void TokenTable::drop(const std::string& file, const Nid& who) {
  auto f = files_.find(file);
  if (f == files_.end()) return;
  f->second.erase(who);
  if (f->second.empty()) files_.erase(f);
}

size_t TokenTable::drop_everywhere(const Nid& who) {
  size_t n = 0;
  for (auto f = files_.begin(); f != files_.end();) {
    n += f->second.erase(who);
    f = f->second.empty() ? files_.erase(f) : std::next(f);
  }
  return n;
}

size_t TokenTable::files_held(const Nid& who) const {
  size_t n = 0;
  for (const auto& [file, holders] : files_) n += holders.count(who);
  return n;
}

const TokenTable::Holding* TokenTable::holding(const std::string& file, const Nid& who) const {
  auto f = files_.find(file);
  if (f == files_.end()) return nullptr;
  auto h = f->second.find(who);
  return h == f->second.end() ? nullptr : &h->second;
}

std::vector<TokenRange> TokenTable::held(const std::string& file, const Nid& who) const {
  const Holding* h = holding(file, who);
  return h ? h->write.ranges() : std::vector<TokenRange>{};
}

std::vector<TokenRange> TokenTable::readable(const std::string& file, const Nid& who) const {
  const Holding* h = holding(file, who);
  return h ? h->readable.ranges() : std::vector<TokenRange>{};
}

}  // namespace pfsnet
