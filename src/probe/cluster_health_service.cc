#include "probe/cluster_health_service.h"

#include <memory>
#include <set>

#include "base/log.h"
#include "wire/le.h"

namespace pfsnet {
namespace {

std::string describe(const Problem& p) {
  return p.kind + " " + p.subject + " " + p.cause + (p.evidence.empty() ? "" : ": " + p.evidence);
}

bool has(const std::vector<Problem>& v, const Problem& p) {
  for (const Problem& x : v)
    if (x.kind == p.kind && x.subject == p.subject && x.cause == p.cause) return true;
  return false;
}

constexpr int kRefreshIntervals = 6;  // a list is sent at least every 6 intervals
constexpr int kKeepRefreshes = 3;     // and dropped by the MGS after 3 refreshes unheard

}  // namespace

ClusterHealthService::ClusterHealthService(const Config& cfg, RpcEngine& rpc,
                                           MembershipService& membership, Clock& clock)
    : name_(cfg.node.name),
      rpc_(rpc),
      membership_(membership),
      clock_(clock),
      interval_(std::chrono::duration_cast<Duration>(
          std::chrono::duration<double>(cfg.health.report_interval))) {
  if (membership_.is_mgs()) {
    {
      MutexLock lk(mu_);
      board_.emplace(interval_ * kRefreshIntervals * kKeepRefreshes);
    }
    rpc_.handle(
        kMsgHealthReport, [this](RpcRequest& r) { return serve_report(r); }, HandlerMode::kInline);
    rpc_.handle(
        kMsgHealthCluster, [this](RpcRequest& r) { return serve_cluster(r); }, HandlerMode::kWorker,
        Execution::kRepeatable);
  }
}

void ClusterHealthService::set_local(std::vector<Problem> problems) {
  const TimePoint now = clock_.now();
  MutexLock lk(mu_);
  for (const Problem& p : problems)
    if (!has(local_, p)) {
      PFS_LOG_WARN("health: problem started: {}", describe(p));
      ++counters_.started[p.cause];
      began_[{p.kind, p.subject, p.cause}] = now;
    }
  for (const Problem& p : local_)
    if (!has(problems, p)) {
      auto it = began_.find({p.kind, p.subject, p.cause});
      double lasted =
          it == began_.end() ? 0 : std::chrono::duration<double>(now - it->second).count();
      if (it != began_.end()) began_.erase(it);
      PFS_LOG_INFO("health: problem ended: {} (listed for {:.0f} s)", describe(p), lasted);
      ++counters_.ended[p.cause];
      counters_.lasted_seconds[p.cause] += lasted;
    }
  local_ = std::move(problems);
}

void ClusterHealthService::forget_the_dead() {
  {
    MutexLock lk(mu_);
    if (!board_) return;
  }
  uint64_t g = membership_.table_generation();
  {
    MutexLock lk(mu_);
    if (g == seen_generation_) return;
  }
  std::vector<std::string> dead = membership_.dead_nodes();
  MutexLock lk(mu_);
  seen_generation_ = g;
  for (const std::string& n : dead) board_->forget(n);
}

void ClusterHealthService::tick(TimePoint now) {
  forget_the_dead();
  HealthReport rep;
  rep.node = name_;
  {
    MutexLock lk(mu_);
    // A node without problems sends only the change to none: the MGS keeps nothing for it,
    // so there is nothing to refresh (at 100,000 healthy nodes, no traffic at all).
    bool changed = !acked_ || !same_problems(*acked_, local_);
    if (in_flight_ || (!changed && (local_.empty() || now < next_refresh_))) return;
    rep.problems = local_;
    if (board_) {  // this node is the MGS
      board_->expire(now);
      board_->report(rep, now, clock_.wall_now().time_since_epoch().count() / 1000000);
      acked_ = local_;
      next_refresh_ = now + interval_ * kRefreshIntervals;
      return;
    }
  }
  std::optional<Nid> mgs = membership_.current_mgs();
  if (!mgs) return;
  {
    MutexLock lk(mu_);
    in_flight_ = true;
  }
  auto sent = std::make_shared<std::vector<Problem>>(rep.problems);
  CallOptions co;
  co.timeout = std::max<Duration>(interval_, std::chrono::seconds(1));
  rpc_.call_async(
      *mgs, kMsgHealthReport, encode_health_report(rep), nullptr,
      [this, sent, now](RpcReply&& r) {
        MutexLock lk(mu_);
        in_flight_ = false;
        if (r.status.ok()) {
          acked_ = std::move(*sent);
          next_refresh_ = now + interval_ * kRefreshIntervals;
          ++counters_.reports_sent;
        } else {
          ++counters_.report_failures;  // tried again at the next tick
        }
      },
      co);
}

RpcResponse ClusterHealthService::serve_report(RpcRequest& r) {
  RpcResponse out;
  auto rep = decode_health_report(r.payload.span());
  if (!rep.ok()) {
    out.status = rep.status();
    return out;
  }
  TimePoint now = clock_.now();
  MutexLock lk(mu_);
  board_->expire(now);
  board_->report(std::move(*rep), now, clock_.wall_now().time_since_epoch().count() / 1000000);
  ++counters_.reports_received;
  return out;
}

RpcResponse ClusterHealthService::serve_cluster(RpcRequest& r) {
  RpcResponse out;
  if (r.payload.size() != 8) {
    out.status = Status(Code::kProtocol, "malformed HEALTH_CLUSTER request");
    return out;
  }
  uint32_t offset = le::get<uint32_t>(r.payload.data());
  uint32_t limit = le::get<uint32_t>(r.payload.data() + 4);
  MutexLock lk(mu_);
  board_->expire(clock_.now());
  out.bulk = make_bulk(encode_health_page(board_->page(offset, limit)));
  return out;
}

Result<std::vector<NodeProblems>> ClusterHealthService::cluster(Duration timeout) {
  {
    MutexLock lk(mu_);
    if (board_) {
      board_->expire(clock_.now());
      return board_->all();
    }
  }
  std::optional<Nid> mgs = membership_.current_mgs();
  if (!mgs) return Status(Code::kNotFound, "no MGS configured (node.mgs is empty)");
  std::vector<NodeProblems> all;
  for (uint32_t offset = 0;;) {
    Buffer req(8);
    le::put<uint32_t>(req.data(), offset);
    le::put<uint32_t>(req.data() + 4, kMaxHealthPage);
    CallOptions co;
    co.timeout = timeout;
    RpcReply r = rpc_.call(*mgs, kMsgHealthCluster, std::move(req), nullptr, co);
    if (!r.status.ok())
      return Status(r.status.code(), "asking MGS " + mgs->to_string() + ": " + r.status.message());
    auto page = decode_health_page(r.bulk.span());
    if (!page.ok())
      return Status(Code::kProtocol, "MGS " + mgs->to_string() +
                                         " sent malformed problems: " + page.status().message());
    size_t got = page->nodes.size();
    for (NodeProblems& n : page->nodes) all.push_back(std::move(n));
    offset += static_cast<uint32_t>(got);
    if (got == 0 || offset >= page->total) break;
  }
  return all;
}

ClusterHealthService::Counters ClusterHealthService::counters() const {
  MutexLock lk(mu_);
  return counters_;
}

}  // namespace pfsnet
