// The pure part of the byte-range read and write tokens (storage/tokens.h has the scheme, its
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

// A token's mode, as GPFS has them: read tokens are shared among readers and conflict
// with writers; a write token conflicts with every other node's token, and lets its
// holder read as well.
enum class TokenMode : uint8_t { kRead = 0, kWrite = 1 };
const char* token_mode_name(TokenMode m);

// The manager's table: per file, per holder, its ranges -- those it may write, and those
// it may read (a superset: every range it may write).
class TokenTable {
 public:
  // Holders other than `who` whose tokens on `file` overlapping [start, end) conflict with
  // a `mode` token there: for a write token any token, for a read token a write token.
  std::vector<Nid> conflicts(const std::string& file, const Nid& who, uint64_t start, uint64_t end,
                             TokenMode mode = TokenMode::kWrite) const;
  // The most of [end, want_end) no holder other than `who` has a token in that conflicts
  // with `mode`: the end of the desired range that can be granted with a required range
  // ending at `end`.
  uint64_t grantable_end(const std::string& file, const Nid& who, uint64_t end, uint64_t want_end,
                         TokenMode mode = TokenMode::kWrite) const;
  void grant(const std::string& file, const Nid& who, uint64_t start, uint64_t end,
             TokenMode mode = TokenMode::kWrite);
  // Takes [start, end) out of `who`'s tokens on `file` (splitting a range that covers it)
  // for a taker that wants it in `mode`: for a writer all of it, for a reader the write
  // token only (`who` keeps reading there: a downgrade).
  void revoke(const std::string& file, const Nid& who, uint64_t start, uint64_t end,
              TokenMode mode = TokenMode::kWrite);
  void drop(const std::string& file, const Nid& who);
  // Drops `who`'s tokens on every file; returns how many files it held tokens on.
  size_t drop_everywhere(const Nid& who);
  // How many files `who` holds tokens on.
  size_t files_held(const Nid& who) const;
  // `who`'s write tokens on `file`; readable(): where it may read (read or write tokens).
  std::vector<TokenRange> held(const std::string& file, const Nid& who) const;
  std::vector<TokenRange> readable(const std::string& file, const Nid& who) const;

 private:
  struct Holding {
    RangeSet write, readable;  // readable holds every write range too
    const RangeSet& of(TokenMode m) const { return m == TokenMode::kWrite ? write : readable; }
  };
  const Holding* holding(const std::string& file, const Nid& who) const;
  std::map<std::string, std::map<Nid, Holding>> files_;  // file -> holder
};

}  // namespace pfsnet
