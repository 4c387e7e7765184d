#include "probe/cluster_health_service.h"

#include <memory>
#include <set>

#include "base/log.h"
#include "membership/protocol.h"
#include "rpc/rpc_method.h"

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

// A node's problems, told to the MGS.
const RpcMethod<HealthReport, Empty> kReportRpc{.type = kMsgHealthReport,
                                                .name = "HEALTH_REPORT",
                                                .exec = Execution::kOnce,
                                                .encode_request = encode_health_report,
                                                .decode_request = decode_health_report,
                                                .encode_reply = encode_empty,
                                                .decode_reply = decode_empty};
// A page of the cluster's problems, in the reply's bulk, built on a worker.
const RpcMethod<PageReq, HealthPage> kClusterRpc{.type = kMsgHealthCluster,
                                                 .name = "HEALTH_CLUSTER",
                                                 .exec = Execution::kRepeatable,
                                                 .encode_request = encode,
                                                 .decode_request = decode_page_req,
                                                 .encode_reply = encode_health_page,
                                                 .decode_reply = decode_health_page,
                                                 .mode = HandlerMode::kWorker,
                                                 .reply_in = ReplyIn::kBulk};

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
    serve(rpc_, kReportRpc, [this](HealthReport&& rep, RpcRequest&) -> Result<Empty> {
      TimePoint now = clock_.now();
      MutexLock lk(mu_);
      board_->expire(now);
      board_->report(std::move(rep), now, clock_.wall_now().time_since_epoch().count() / 1000000);
      ++counters_.reports_received;
      return Empty{};
    });
    serve(rpc_, kClusterRpc, [this](PageReq&& q, RpcRequest&) -> Result<HealthPage> {
      MutexLock lk(mu_);
      board_->expire(clock_.now());
      return board_->page(q.offset, q.limit);
    });
  }
}

void ClusterHealthService::set_local(std::vector<Problem> problems) {
  const TimePoint now = clock_.now();
  MutexLock lk(mu_);
  // Each start and end a line with a stable code (the JSON format's "event" and "code":
  // the cause, as `pfsnet health` and docs/health.md name it).
  auto fields = [](const Problem& p, std::string_view event, const std::string& lasted) {
    std::vector<LogField> f{
        {"event", event}, {"code", p.cause}, {"kind", p.kind}, {"subject", p.subject}};
    if (!p.code.empty()) f.push_back({"check", p.code});  // SETTINGS: which check
    if (!lasted.empty()) f.push_back({"lasted_s", lasted, true});
    return f;
  };
  for (const Problem& p : problems)
    if (!has(local_, p)) {
      const auto f = fields(p, "health_problem_started", "");
      ScopedLogFields ev(f);
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
      const std::string lasted_s = std::to_string(static_cast<int64_t>(lasted));
      const auto f = fields(p, "health_problem_ended", lasted_s);
      ScopedLogFields ev(f);
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

Status ClusterHealthService::start(TimerQueue& queue) {
  if (!local_of_ || (!membership_.is_mgs() && !membership_.has_agent())) return Status::Ok();
  ticker_.start(queue, clock_, interval_, [this](TimePoint now) {
    set_local(local_of_());
    tick(now);
  });
  return Status::Ok();
}

void ClusterHealthService::tick(TimePoint now) {
  forget_the_dead();
  HealthReport rep;
  rep.node = name_;
  const bool leads = membership_.leads();  // an MGS that follows reports to the leader
  {
    MutexLock lk(mu_);
    // A node without problems sends only the change to none: the MGS keeps nothing for it,
    // so there is nothing to refresh (at 100,000 healthy nodes, no traffic at all).
    bool changed = !acked_ || !same_problems(*acked_, local_);
    if (in_flight_ || (!changed && (local_.empty() || now < next_refresh_))) return;
    rep.problems = local_;
    if (board_ && leads) {  // this node is the MGS
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
  call_async(
      rpc_, kReportRpc, *mgs, rep,
      [this, sent, now](Result<Empty> r) {
        MutexLock lk(mu_);
        in_flight_ = false;
        if (r.ok()) {
          acked_ = std::move(*sent);
          next_refresh_ = now + interval_ * kRefreshIntervals;
          ++counters_.reports_sent;
        } else {
          ++counters_.report_failures;  // tried again at the next tick
        }
      },
      co);
}

Result<std::vector<NodeProblems>> ClusterHealthService::cluster(Duration timeout) {
  const bool leads = membership_.leads();
  {
    MutexLock lk(mu_);
    if (board_ && leads) {
      board_->expire(clock_.now());
      return board_->all();
    }
  }
  std::optional<Nid> mgs = membership_.current_mgs();
  if (!mgs) return Status(Code::kNotFound, "no MGS configured (node.mgs is empty)");
  std::vector<NodeProblems> all;
  for (uint32_t offset = 0;;) {
    CallOptions co;
    co.timeout = timeout;
    Result<HealthPage> page = call(rpc_, kClusterRpc, *mgs, PageReq{offset, kMaxHealthPage}, co);
    if (!page.ok())
      return Status(page.status().code(),
                    "asking MGS " + mgs->to_string() + ": " + page.status().message());
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
