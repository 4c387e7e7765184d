#include "probe/health_list.h"

#include <algorithm>

#include "wire/byte_codec.h"

namespace pfsnet {

Buffer encode_health_list(const HealthListReply& r) {
  ByteWriter w;
  w.u8(r.has_table ? 1 : 0);
  if (r.has_table) {
    w.nid(r.mgs);
    w.u32(r.nodes);
    w.u32(r.nodes_up);
  }
  const size_t n = std::min(r.problems.size(), kMaxListedProblems);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    write_problem(w, r.problems[i]);
    w.u8(r.problems[i].muted ? 1 : 0);
  }
  w.u32(r.left_off + static_cast<uint32_t>(r.problems.size() - n));
  const size_t m = std::min(r.mutes.size(), kMaxHealthMutes);
  w.u32(static_cast<uint32_t>(m));
  for (size_t i = 0; i < m; ++i) {
    const MuteState& s = r.mutes[i];
    write_mute(w, s.mute);
    w.u32(static_cast<uint32_t>(s.covers));
    w.u8(s.hides ? 1 : 0);
    w.str(s.reason);
  }
  w.str(r.mutes_error);
  return w.take();
}

Result<HealthListReply> decode_health_list(std::span<const uint8_t> b) {
  ByteReader r(b);
  HealthListReply v;
  const uint8_t has_table = r.u8();
  if (has_table > 1) r.fail();
  v.has_table = has_table == 1;
  if (v.has_table) {
    v.mgs = r.nid();
    v.nodes = r.u32();
    v.nodes_up = r.u32();
    if (v.nodes_up > v.nodes) r.fail();
  }
  const size_t n = r.count(6 + 8 + 1);  // a problem at its smallest, and its muted byte
  if (n > kMaxListedProblems) r.fail();
  for (size_t i = 0; r.ok() && i < n; ++i) {
    v.problems.push_back(read_problem(r));
    const uint8_t muted = r.u8();
    if (muted > 1) r.fail();
    v.problems.back().muted = muted == 1;
  }
  v.left_off = r.u32();
  const size_t m = r.count(1 + 1 + 8 + 8 + 1 + 4 + 1 + 4 + 1 + 1);
  if (m > kMaxHealthMutes) r.fail();
  for (size_t i = 0; r.ok() && i < m; ++i) {
    MuteState s;
    s.mute = read_mute(r);
    s.covers = r.u32();
    const uint8_t hides = r.u8();
    if (hides > 1 || s.mute.cause.empty()) r.fail();
    s.hides = hides == 1;
    s.reason = r.str();
    v.mutes.push_back(std::move(s));
  }
  v.mutes_error = r.str();
  return finish_decode(r, std::move(v), "HEALTH_LIST reply");
}

Buffer encode_health_list_request(const HealthReport& r) {
  return encode_health_report_up_to(r, kMaxListedProblems);
}

Result<HealthReport> decode_health_list_request(std::span<const uint8_t> b) {
  return decode_health_report_up_to(b, kMaxListedProblems, "HEALTH_LIST");
}

}  // namespace pfsnet
