// The network request scheduler's policies (rpc/nrs.h).
#include "rpc/nrs.h"

#include <algorithm>
#include <functional>

namespace pfsnet {

namespace {
// A flow silent this long goes (and its figures with it).
constexpr auto kForget = std::chrono::minutes(10);
}  // namespace

const char* nrs_policy_name(NrsPolicyKind k) {
  switch (k) {
    case NrsPolicyKind::kFifo:
      return "fifo";
    case NrsPolicyKind::kFair:
      return "fair";
  }
  return "?";
}

Result<NrsPolicyKind> parse_nrs_policy(std::string_view name) {
  if (name == "fifo") return NrsPolicyKind::kFifo;
  if (name == "fair") return NrsPolicyKind::kFair;
  return Status(Code::kInvalidArgument,
                "unknown request scheduling policy '" + std::string(name) +
                    "': fifo (first come, first served) or fair (round-robin across clients "
                    "and jobs)");
}

std::string NrsFlowKey::to_string() const {
  return job.empty() ? client.to_string() : client.to_string() + " job " + job;
}

size_t NrsFlowKeyHash::operator()(const NrsFlowKey& k) const {
  const size_t h = std::hash<Nid>()(k.client);
  return k.job.empty() ? h : h * 0x9e3779b97f4a7c15ull ^ std::hash<std::string>()(k.job);
}

FairShare::FairShare(FairShareOptions o) { set_options(std::move(o)); }

void FairShare::set_options(FairShareOptions o) {
  o.slots = std::max(1, o.slots);
  o.reserve = std::max(0, o.reserve);
  opts_ = std::move(o);
  for (auto& [key, f] : flows_) f.stats.weight = weight_of(key);
}

int64_t FairShare::weight_of(const NrsFlowKey& k) const {
  if (!k.job.empty())
    if (auto it = opts_.job_weights.find(k.job); it != opts_.job_weights.end())
      return std::max<int64_t>(1, it->second);
  if (auto it = opts_.client_weights.find(k.client.to_string()); it != opts_.client_weights.end())
    return std::max<int64_t>(1, it->second);
  return 1;
}

void FairShare::unlist_idle(Flow& f) {
  if (!f.idle_listed) return;
  idle_.erase(f.idle_pos);
  f.idle_listed = false;
}

void FairShare::expire(TimePoint now) {
  while (!idle_.empty() && now - idle_.front().first >= opts_.idle) {
    flows_[idle_.front().second].idle_listed = false;
    idle_.pop_front();
  }
  if (now - swept_ < std::chrono::minutes(1)) return;
  swept_ = now;
  std::erase_if(flows_, [&](const auto& kv) {
    const Flow& f = kv.second;
    return !f.in_ring && !f.idle_listed && f.stats.active == 0 && now - f.last >= kForget;
  });
}

void FairShare::push(const NrsFlowKey& flow, uint64_t bytes, TimePoint now, uint64_t id) {
  expire(now);
  auto [it, fresh] = flows_.try_emplace(flow);
  Flow& f = it->second;
  if (fresh) {
    f.stats.key = flow;
    f.stats.weight = weight_of(flow);
  }
  unlist_idle(f);
  f.queue.push_back({id, bytes, now, refusals_});
  f.last = now;
  ++waiting_;
  if (!f.in_ring) {
    ring_.push_back(flow);
    f.in_ring = true;
    f.turn_left = f.stats.weight;
    if (f.stats.active == 0) ++ring_unserved_;
  }
}

bool FairShare::may_start(const Flow& f) const {
  if (f.stats.active == 0) return true;
  // Other flows present with nothing in service: those lately done, and those waiting (not
  // `f`, which has one in service).
  const size_t unserved = idle_.size() + ring_unserved_;
  const size_t reserve = std::min<size_t>(
      {unserved, static_cast<size_t>(opts_.reserve), static_cast<size_t>(opts_.slots / 2)});
  const size_t free = static_cast<size_t>(opts_.slots - active_);
  return free > reserve;
}

uint64_t FairShare::take(Flow& f, TimePoint now, bool* held) {
  Waiting w = f.queue.front();
  f.queue.pop_front();
  --waiting_;
  ++active_;
  if (f.in_ring && f.stats.active == 0) --ring_unserved_;
  ++f.stats.active;
  f.last = now;
  NrsFlowStats& s = f.stats;
  ++s.requests;
  s.bytes += w.bytes;
  if (held) *held = w.refusals != refusals_;
  if (w.refusals != refusals_) {
    const Duration waited = now - w.arrived;
    ++s.held;
    s.held_bytes += w.bytes;
    s.held_total += waited;
    s.held_max = std::max(s.held_max, waited);
  }
  return w.id;
}

std::optional<uint64_t> FairShare::pop(TimePoint now, bool* held) {
  expire(now);
  std::optional<uint64_t> id = next(now, held);
  if (!id && waiting_ > 0) ++refusals_;
  return id;
}

std::optional<uint64_t> FairShare::next(TimePoint now, bool* held) {
  if (active_ >= opts_.slots) return std::nullopt;
  for (size_t n = ring_.size(); n > 0; --n) {
    NrsFlowKey key = ring_.front();
    Flow& f = flows_.at(key);
    if (!may_start(f)) {  // its turn waits for the next pass
      ring_.pop_front();
      ring_.push_back(std::move(key));
      continue;
    }
    const uint64_t id = take(f, now, held);
    if (--f.turn_left <= 0 || f.queue.empty()) {
      ring_.pop_front();
      if (f.queue.empty()) {
        f.in_ring = false;
      } else {
        f.turn_left = f.stats.weight;
        ring_.push_back(std::move(key));
      }
    }
    return id;
  }
  return std::nullopt;
}

void FairShare::done(const NrsFlowKey& flow, TimePoint now) {
  auto it = flows_.find(flow);
  if (it == flows_.end() || it->second.stats.active == 0) return;
  Flow& f = it->second;
  --active_;
  --f.stats.active;
  f.last = now;
  if (f.in_ring && f.stats.active == 0) ++ring_unserved_;
  if (f.stats.active == 0 && f.queue.empty()) {
    idle_.emplace_back(now, flow);
    f.idle_listed = true;
    f.idle_pos = std::prev(idle_.end());
  }
}

std::vector<uint64_t> FairShare::drain(TimePoint now) {
  std::vector<std::pair<TimePoint, std::pair<Flow*, uint64_t>>> all;
  for (const NrsFlowKey& k : ring_) {
    Flow& f = flows_.at(k);
    f.in_ring = false;
    for (const Waiting& w : f.queue) all.push_back({w.arrived, {&f, w.id}});
  }
  ring_.clear();
  ring_unserved_ = 0;
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<uint64_t> out;
  for (auto& [t, fw] : all) {
    Flow& f = *fw.first;
    out.push_back(take(f, now));  // its queue is in arrival order: the front is this one
  }
  return out;
}

std::vector<NrsFlowStats> FairShare::flows() const {
  std::vector<NrsFlowStats> v;
  for (const auto& [k, f] : flows_) {
    v.push_back(f.stats);
    v.back().waiting = f.queue.size();
  }
  std::sort(v.begin(), v.end(), [](const NrsFlowStats& a, const NrsFlowStats& b) {
    if (a.held_total != b.held_total) return a.held_total > b.held_total;
    return a.key.to_string() < b.key.to_string();
  });
  return v;
}

}  // namespace pfsnet
