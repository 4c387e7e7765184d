// HEALTH_LIST (msg 44, issue 70 item 7): the cluster's list judged at the MGS, where the
// probe mesh's rows, the node table and every node's own list are -- the mesh's outliers
// marked once, there, and one RPC on the operator's path instead of four. The asking node
// sends its own findings, fresh and whole (a HealthReport, laid out as HEALTH_REPORT's); the MGS
// answers with the list health/rules.h's judge() makes of them and what it holds, its mutes
// applied, and its table in brief. An MGS of a release before it has no handler for the type
// (kNotFound): the asking node then asks its four questions and judges itself (health/view.h).
//
// Thread safety: pure functions.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "probe/cluster_health.h"
#include "probe/health_mutes.h"

namespace pfsnet {

// Problems a HEALTH_LIST reply carries at most; more are counted in `left_off`.
inline constexpr size_t kMaxListedProblems = 10000;

struct HealthListReply {
  bool has_table = false;            // the MGS's table was had (then the three below)
  Nid mgs;                           // the MGS that judged
  uint32_t nodes = 0, nodes_up = 0;  // in its table
  std::vector<Problem> problems;     // judged, severest first; Problem::muted as its mutes say
  uint32_t left_off = 0;             // problems beyond kMaxListedProblems, not carried
  std::vector<MuteState> mutes;      // the cluster's mutes, with what each covers now
  std::string mutes_error;           // why the mutes could not be had ("": they could)
  bool operator==(const HealthListReply&) const = default;
};
// The reply travels in the reply's bulk (a large cluster's list is larger than a payload).
Buffer encode_health_list(const HealthListReply& r);
Result<HealthListReply> decode_health_list(std::span<const uint8_t> b);
// The request: the asking node's name and its own findings, as HEALTH_REPORT lays them out
// but up to kMaxListedProblems (its whole list: HEALTH_REPORT cuts at kMaxReportedProblems).
Buffer encode_health_list_request(const HealthReport& r);
Result<HealthReport> decode_health_list_request(std::span<const uint8_t> b);

}  // namespace pfsnet
