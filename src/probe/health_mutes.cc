#include "probe/health_mutes.h"

#include <algorithm>

#include "wire/byte_codec.h"

namespace pfsnet {

void write_mute(ByteWriter& w, const HealthMute& m) {
  w.str(m.cause);
  w.str(m.subject);
  w.i64(m.set_unix_ms);
  w.i64(m.until_unix_ms);
  w.u8(m.sticky ? 1 : 0);
  w.u32(m.matched);
  w.str(m.by);
}

HealthMute read_mute(ByteReader& r) {
  HealthMute m;
  m.cause = r.str();
  m.subject = r.str();
  m.set_unix_ms = r.i64();
  m.until_unix_ms = r.i64();
  uint8_t sticky = r.u8();
  m.sticky = sticky == 1;
  m.matched = r.u32();
  m.by = r.str();
  if (sticky > 1 || m.set_unix_ms < 0 || m.until_unix_ms < m.set_unix_ms) r.fail();
  return m;
}

namespace {

bool same_target(const HealthMute& a, const HealthMute& b) {
  return a.cause == b.cause && a.subject == b.subject;
}

}  // namespace

Buffer encode_mute_req(const MuteReq& q) {
  ByteWriter w;
  w.u8(static_cast<uint8_t>(q.op));
  write_mute(w, q.mute);
  return w.take();
}

Result<MuteReq> decode_mute_req(std::span<const uint8_t> b) {
  ByteReader r(b);
  MuteReq q;
  uint8_t op = r.u8();
  if (op > static_cast<uint8_t>(MuteOp::kClear)) r.fail();
  q.op = static_cast<MuteOp>(op);
  q.mute = read_mute(r);
  if (q.op != MuteOp::kList && q.mute.cause.empty()) r.fail();
  return finish_decode(r, std::move(q), "HEALTH_MUTE");
}

Buffer encode_mute_list(const MuteList& l) {
  ByteWriter w;
  size_t n = std::min(l.mutes.size(), kMaxHealthMutes);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) write_mute(w, l.mutes[i]);
  return w.take();
}

Result<MuteList> decode_mute_list(std::span<const uint8_t> b) {
  ByteReader r(b);
  MuteList l;
  size_t n = r.count(1 + 1 + 8 + 8 + 1 + 4 + 1);  // the fields at their smallest
  if (n > kMaxHealthMutes) r.fail();
  for (size_t i = 0; r.ok() && i < n; ++i) {
    l.mutes.push_back(read_mute(r));
    if (l.mutes.back().cause.empty()) r.fail();
  }
  return finish_decode(r, std::move(l), "HEALTH_MUTE reply");
}

bool mute_covers(const HealthMute& m, const Problem& p) {
  return p.cause == m.cause && (m.subject.empty() || p.subject == m.subject);
}

std::vector<MuteState> apply_mutes(std::vector<Problem>& list, const std::vector<HealthMute>& mutes,
                                   int64_t now_unix_ms) {
  std::vector<MuteState> out;
  for (const HealthMute& m : mutes) {
    if (m.until_unix_ms <= now_unix_ms) continue;
    MuteState s{m, 0, true, ""};
    for (const Problem& p : list) s.covers += mute_covers(m, p) ? 1 : 0;
    if (!m.sticky && s.covers > m.matched) {
      s.hides = false;
      s.reason = "grew worse: " + std::to_string(s.covers) + " " + m.cause +
                 (m.subject.empty() ? "" : " of " + m.subject) + " listed, " +
                 std::to_string(m.matched) + " when muted";
    }
    if (s.hides)
      for (Problem& p : list)
        if (mute_covers(m, p)) p.muted = true;
    out.push_back(std::move(s));
  }
  return out;
}

Status MuteBoard::set(HealthMute m, int64_t now_unix_ms) {
  if (m.cause.empty()) return Status(Code::kInvalidArgument, "a mute names a cause");
  if (m.until_unix_ms <= now_unix_ms)
    return Status(Code::kInvalidArgument, "a mute's TTL must end in the future");
  (void)list(now_unix_ms);  // expired ones leave first
  for (HealthMute& x : mutes_)
    if (same_target(x, m)) {
      x = std::move(m);
      return Status::Ok();
    }
  if (mutes_.size() >= kMaxHealthMutes)
    return Status(Code::kRejected,
                  "the MGS keeps at most " + std::to_string(kMaxHealthMutes) + " mutes");
  mutes_.push_back(std::move(m));
  return Status::Ok();
}

bool MuteBoard::clear(const std::string& cause, const std::string& subject) {
  auto it = std::find_if(mutes_.begin(), mutes_.end(), [&](const HealthMute& x) {
    return x.cause == cause && x.subject == subject;
  });
  if (it == mutes_.end()) return false;
  mutes_.erase(it);
  return true;
}

std::vector<HealthMute> MuteBoard::list(int64_t now_unix_ms) {
  std::erase_if(mutes_, [&](const HealthMute& x) { return x.until_unix_ms <= now_unix_ms; });
  return mutes_;
}

}  // namespace pfsnet
