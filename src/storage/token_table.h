// The pure part of the byte-range write tokens (storage/tokens.h has the scheme, its
// messages and the service): ranges, a holder's set of them, and the manager's table of
// who holds what. No I/O, no clock, no lock.
// Thread safety: plain values (their user locks).
#pragma once

#include <pfsnet/nid.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pfsnet {

struct TokenRange {
  uint64_t start = 0, end = 0;  // [start, end)
  bool overlaps(uint64_t s, uint64_t e) const { return start < e && s < end; }
  bool operator==(const TokenRange&) const = default;
};

// Disjoint, sorted half-open ranges [start, end); ranges that touch are merged. A holder's
// write tokens, in the manager's table and in the client's file alike. Empty ranges are
// ignored. A plain value.
class RangeSet {
 public:
  void add(uint64_t start, uint64_t end);             // merged with every range it touches
  void remove(uint64_t start, uint64_t end);          // the ranges it cuts keep their other parts
  bool covers(uint64_t start, uint64_t end) const;    // one range holds all of it
  bool overlaps(uint64_t start, uint64_t end) const;  // some range shares a byte with it
  // The first byte at or past `at` that a range holds; nullopt when there is none.
  std::optional<uint64_t> first_at_or_after(uint64_t at) const;
  bool empty() const { return r_.empty(); }
  std::vector<TokenRange> ranges() const;

 private:
  std::map<uint64_t, uint64_t> r_;  // start -> end
};

// The manager's table: per file, per holder, its ranges.
class TokenTable {
 public:
  // Holders other than `who` with a token on `file` overlapping [start, end).
  std::vector<Nid> conflicts(const std::string& file, const Nid& who, uint64_t start,
                             uint64_t end) const;
  // The most of [end, want_end) no holder other than `who` has a token in: the end of the
  // desired range that can be granted with a required range ending at `end`.
  uint64_t grantable_end(const std::string& file, const Nid& who, uint64_t end,
                         uint64_t want_end) const;
  void grant(const std::string& file, const Nid& who, uint64_t start, uint64_t end);
  // Takes [start, end) out of `who`'s tokens on `file` (splitting a range that covers it).
  void revoke(const std::string& file, const Nid& who, uint64_t start, uint64_t end);
  void drop(const std::string& file, const Nid& who);
  // Drops `who`'s tokens on every file; returns how many files it held tokens on.
  size_t drop_everywhere(const Nid& who);
  // How many files `who` holds tokens on.
  size_t files_held(const Nid& who) const;
  std::vector<TokenRange> held(const std::string& file, const Nid& who) const;

 private:
  std::map<std::string, std::map<uint64_t, RangeSet>> files_;  // file -> holder (packed NID)
};

}  // namespace pfsnet
