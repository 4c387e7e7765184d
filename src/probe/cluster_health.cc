#include "probe/cluster_health.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <tuple>

#include "wire/byte_codec.h"

namespace pfsnet {

void write_problem(ByteWriter& w, const Problem& p) {
  for (const std::string* s : {&p.kind, &p.subject, &p.cause, &p.seen_by, &p.evidence, &p.code})
    w.str(*s);
  w.i64(p.since_unix_ms);
}

Problem read_problem(ByteReader& r) {
  Problem p;
  for (std::string* s : {&p.kind, &p.subject, &p.cause, &p.seen_by, &p.evidence, &p.code})
    *s = r.str();
  p.since_unix_ms = r.i64();
  if (p.kind.empty() || p.subject.empty() || p.cause.empty() || p.since_unix_ms < 0) r.fail();
  return p;
}

namespace {
void write_problems(ByteWriter& w, const std::vector<Problem>& v, size_t max) {
  size_t n = std::min(v.size(), max);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) write_problem(w, v[i]);
}

std::vector<Problem> read_problems(ByteReader& r, size_t max) {
  size_t n = r.count(6 + 8);
  std::vector<Problem> v;
  if (n > max) {
    r.fail();
    return v;
  }
  for (size_t i = 0; r.ok() && i < n; ++i) v.push_back(read_problem(r));
  return v;
}

using Key = std::tuple<std::string, std::string, std::string>;
Key key_of(const Problem& p) { return {p.kind, p.subject, p.cause}; }

}  // namespace

Buffer encode_health_report_up_to(const HealthReport& r, size_t max_problems) {
  ByteWriter w;
  w.str(r.node);
  write_problems(w, r.problems, max_problems);
  return w.take();
}

Result<HealthReport> decode_health_report_up_to(std::span<const uint8_t> b, size_t max_problems,
                                                const char* what) {
  ByteReader r(b);
  HealthReport v;
  v.node = r.str();
  if (v.node.empty()) r.fail();
  v.problems = read_problems(r, max_problems);
  return finish_decode(r, std::move(v), what);
}

Buffer encode_health_report(const HealthReport& r) {
  return encode_health_report_up_to(r, kMaxReportedProblems);
}

Result<HealthReport> decode_health_report(std::span<const uint8_t> b) {
  return decode_health_report_up_to(b, kMaxReportedProblems, "HEALTH_REPORT");
}

Buffer encode_health_page(const HealthPage& p) {
  ByteWriter w;
  w.u32(p.total);
  w.u32(p.offset);
  size_t n = std::min<size_t>(p.nodes.size(), kMaxHealthPage);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    w.str(p.nodes[i].node);
    w.i64(p.nodes[i].updated_unix_ms);
    write_problems(w, p.nodes[i].problems, kMaxReportedProblems);
  }
  return w.take();
}

Result<HealthPage> decode_health_page(std::span<const uint8_t> b) {
  ByteReader r(b);
  HealthPage p;
  p.total = r.u32();
  p.offset = r.u32();
  size_t n = r.count(1 + 8 + 4);
  if (n > kMaxHealthPage) r.fail();
  for (size_t i = 0; r.ok() && i < n; ++i) {
    NodeProblems np;
    np.node = r.str();
    np.updated_unix_ms = r.i64();
    np.problems = read_problems(r, kMaxReportedProblems);
    if (np.node.empty()) r.fail();
    p.nodes.push_back(std::move(np));
  }
  return finish_decode(r, std::move(p), "HEALTH_CLUSTER reply");
}

bool same_problems(const std::vector<Problem>& a, const std::vector<Problem>& b) {
  std::set<Key> ka, kb;
  for (const Problem& p : a) ka.insert(key_of(p));
  for (const Problem& p : b) kb.insert(key_of(p));
  return ka == kb;
}

void HealthBoard::report(HealthReport r, TimePoint now, int64_t wall_ms) {
  if (r.problems.empty()) {
    nodes_.erase(r.node);
    return;
  }
  Entry& e = nodes_[r.node];
  e.np.node = r.node;
  e.np.updated_unix_ms = wall_ms;
  e.np.problems = std::move(r.problems);
  e.heard = now;
}

void HealthBoard::expire(TimePoint now) {
  std::erase_if(nodes_, [&](const auto& kv) { return now - kv.second.heard > keep_; });
}

HealthPage HealthBoard::page(uint32_t offset, uint32_t limit) const {
  HealthPage p;
  p.total = static_cast<uint32_t>(nodes_.size());
  p.offset = offset;
  limit = std::min(limit, kMaxHealthPage);
  size_t bytes = 12;
  uint32_t i = 0;
  for (const auto& [name, e] : nodes_) {
    if (i++ < offset) continue;
    size_t size = 1 + name.size() + 8 + 4;
    for (const Problem& x : e.np.problems)
      size += 6 + 8 + x.kind.size() + x.subject.size() + x.cause.size() + x.seen_by.size() +
              x.evidence.size() + x.code.size();
    if (p.nodes.size() >= limit || (!p.nodes.empty() && bytes + size > kHealthPageBytes)) break;
    bytes += size;
    p.nodes.push_back(e.np);
  }
  return p;
}

std::vector<NodeProblems> HealthBoard::all() const {
  std::vector<NodeProblems> v;
  for (const auto& [name, e] : nodes_) v.push_back(e.np);
  return v;
}

}  // namespace pfsnet
