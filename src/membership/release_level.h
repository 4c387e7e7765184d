// Release levels, the policy (docs/operator.md, "Upgrading"; Storage Scale's minReleaseLevel
// and `mmchconfig release=LATEST`): which features a cluster's minimum release level turns
// on, whether a level may be committed given the MGS's table, and the record the MGS keeps
// of it (membership.state_dir/release_level, or <etcd_key>/level with MGS leadership in
// etcd). The membership service gathers the table and reads and writes the record; the
// CLI renders what these say.
// Thread safety: plain values and functions; the file functions touch only their path.
#pragma once

#include <pfsnet/status.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "membership/protocol.h"
#include "wire/handshake.h"

namespace pfsnet {

// A feature that every node must understand, on from the level that names it.
struct LevelFeature {
  uint16_t level;
  std::string_view name;
  std::string_view what;    // what it does once on
  std::string_view breaks;  // what it does to a node of a lower level
};
// Every such feature, by level (the highest is kReleaseLevel).
std::span<const LevelFeature> level_features();
// The features a raise from `from` to `to` turns on (none when `to` <= `from`).
std::vector<LevelFeature> features_between(uint16_t from, uint16_t to);

// A node's release level from its connection's handshake: 1 for wire version 1.
inline uint16_t level_of(const WireSession& w) { return w.version < 2 ? 1 : w.peer_level; }

// What the MGS answers a check or a commit with, given its table: `level` in force, the
// `mgs_level` its release speaks, `nodes` (each with its level, 0 where not known). A
// commit raises the level to `rep.target` when `rep.refusal` is empty and the target is
// above the level; the caller keeps the record, then sets `rep.level` and `committed`.
// Rules: the target (0: mgs_level) is at most mgs_level and never below the level; a node
// below it, or not known, holds a commit back unless it is dead or `force`.
UpgradeRep decide_level(const UpgradeReq& q, uint16_t level, uint16_t mgs_level,
                        const std::vector<NodeLevel>& nodes);

// The MGS's record of the level: versioned text (format, level, when, by whom).
struct LevelRecord {
  uint16_t level = 1;
  int64_t set_unix_ms = 0;
  std::string by;  // who asked (a node's name and NID); one line
  bool operator==(const LevelRecord&) const = default;
};
std::string encode_level_record(const LevelRecord& r);
// Refuses another format, a level of 0 or above 65535, missing or repeated lines.
Result<LevelRecord> decode_level_record(std::string_view text);
// The record in `path`: level 1 when the file does not exist (a cluster that never raised
// it, or one upgraded from a release before levels); an error naming the file otherwise.
Result<LevelRecord> read_level_file(const std::string& path);
// Writes `r` to `path` whole or not at all (a new file, fsync, rename, the directory's
// fsync), creating the directory when it does not exist.
Status write_level_file(const std::string& path, const LevelRecord& r);

}  // namespace pfsnet
