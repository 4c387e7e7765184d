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

std::vector<Nid> TokenTable::conflicts(const std::string& file, const Nid& who, uint64_t start,
                                       uint64_t end) const {
  std::vector<Nid> out;
  auto f = files_.find(file);
  if (f == files_.end()) return out;
  for (const auto& [holder, ranges] : f->second)
    if (holder != who.pack() && ranges.overlaps(start, end))
      out.push_back(Nid::unpack(holder).value_or(Nid()));
  return out;
}

uint64_t TokenTable::grantable_end(const std::string& file, const Nid& who, uint64_t end,
                                   uint64_t want_end) const {
  uint64_t best = std::max(end, want_end);
  auto f = files_.find(file);
  if (f == files_.end()) return best;
  for (const auto& [holder, ranges] : f->second) {
    if (holder == who.pack()) continue;
    // Where another holder's tokens begin at or past `end` the grant must stop.
    if (auto first = ranges.first_at_or_after(end)) best = std::min(best, *first);
  }
  return best;
}

void TokenTable::grant(const std::string& file, const Nid& who, uint64_t start, uint64_t end) {
  files_[file][who.pack()].add(start, end);
}

void TokenTable::revoke(const std::string& file, const Nid& who, uint64_t start, uint64_t end) {
  auto f = files_.find(file);
  if (f == files_.end()) return;
  auto h = f->second.find(who.pack());
  if (h == f->second.end()) return;
  h->second.remove(start, end);
  if (h->second.empty()) f->second.erase(h);
  if (f->second.empty()) files_.erase(f);
}

void TokenTable::drop(const std::string& file, const Nid& who) {
  auto f = files_.find(file);
  if (f == files_.end()) return;
  f->second.erase(who.pack());
  if (f->second.empty()) files_.erase(f);
}

size_t TokenTable::drop_everywhere(const Nid& who) {
  size_t n = 0;
  for (auto f = files_.begin(); f != files_.end();) {
    n += f->second.erase(who.pack());
    f = f->second.empty() ? files_.erase(f) : std::next(f);
  }
  return n;
}

size_t TokenTable::files_held(const Nid& who) const {
  size_t n = 0;
  for (const auto& [file, holders] : files_) n += holders.count(who.pack());
  return n;
}

std::vector<TokenRange> TokenTable::held(const std::string& file, const Nid& who) const {
  auto f = files_.find(file);
  if (f == files_.end()) return {};
  auto h = f->second.find(who.pack());
  if (h == f->second.end()) return {};
  return h->second.ranges();
}

}  // namespace pfsnet
