// Muted health problems (Ceph's `ceph health mute`): an operator hides a problem known and
// being handled, for a while, from what alerts -- `pfsnet health`'s default list, its exit
// status, /metrics' `pfsnet_problem{muted="1"}` -- while `pfsnet health --all` still shows it.
// A mute names a cause (LOSSY, SLOW_OPS, ...) and optionally one subject; it ends at its
// TTL, or, unless set `sticky`, hides nothing once its problem grows worse: more problems of
// its cause and subject listed than when it was set. The MGS keeps the cluster's mutes
// (MuteBoard, served as HEALTH_MUTE by probe/cluster_health_service.h); apply_mutes() is the
// rule every view runs over its final list.
// Thread safety: plain values and pure functions; MuteBoard's owner serialises.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "probe/cluster_health.h"  // Problem

namespace pfsnet {

inline constexpr size_t kMaxHealthMutes = 256;  // kept by the MGS; more are refused

struct HealthMute {
  std::string cause;    // as `pfsnet health` lists it (LOSSY, SLOW_OPS, ...)
  std::string subject;  // "" = every subject of the cause
  int64_t set_unix_ms = 0, until_unix_ms = 0;
  bool sticky = false;   // stays muted when the problem grows worse
  uint32_t matched = 0;  // the problems it covered when set: more later = worse
  std::string by;        // who set it (the asking node's name)
  bool operator==(const HealthMute&) const = default;
};

// One mute in its wire form; a malformed one fails `r`.
void write_mute(ByteWriter& w, const HealthMute& m);
HealthMute read_mute(ByteReader& r);

// HEALTH_MUTE: list (op kList), set (kSet: `mute`, replacing one of the same cause and
// subject) or clear (kClear: `mute.cause` and `mute.subject`); the reply: every mute now.
enum class MuteOp : uint8_t { kList = 0, kSet = 1, kClear = 2 };
struct MuteReq {
  MuteOp op = MuteOp::kList;
  HealthMute mute;
  bool operator==(const MuteReq&) const = default;
};
struct MuteList {
  std::vector<HealthMute> mutes;
  bool operator==(const MuteList&) const = default;
};
Buffer encode_mute_req(const MuteReq& q);
Result<MuteReq> decode_mute_req(std::span<const uint8_t> b);
Buffer encode_mute_list(const MuteList& l);
Result<MuteList> decode_mute_list(std::span<const uint8_t> b);

// Whether `m` covers `p` (its cause, and its subject when it names one).
bool mute_covers(const HealthMute& m, const Problem& p);

// A mute as a view found it: how many problems it covers now, and whether it hides them.
struct MuteState {
  HealthMute mute;
  size_t covers = 0;
  bool hides = true;   // false: grown worse (not sticky), its problems shown again
  std::string reason;  // why not, e.g. "grew worse: 3 LOSSY listed, 1 when muted"
  bool operator==(const MuteState&) const = default;
};
// Marks the problems of `list` that an unexpired mute hides (Problem::muted); a problem
// two mutes cover is muted when either hides it. Returns the unexpired mutes' states.
std::vector<MuteState> apply_mutes(std::vector<Problem>& list, const std::vector<HealthMute>& mutes,
                                   int64_t now_unix_ms);

// The MGS's mutes. Expired ones leave at each look.
class MuteBoard {
 public:
  // Sets or replaces (same cause and subject); refused beyond kMaxHealthMutes, or a TTL
  // already over.
  Status set(HealthMute m, int64_t now_unix_ms);
  // Whether there was one to clear.
  bool clear(const std::string& cause, const std::string& subject);
  std::vector<HealthMute> list(int64_t now_unix_ms);

 private:
  std::vector<HealthMute> mutes_;
};

}  // namespace pfsnet
