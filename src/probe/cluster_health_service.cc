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

// The cluster's mutes: listed, set or cleared at the MGS; the reply is every mute now.
const RpcMethod<MuteReq, MuteList> kMuteRpc{.type = kMsgHealthMute,
                                            .name = "HEALTH_MUTE",
                                            .exec = Execution::kRepeatable,
                                            .encode_request = encode_mute_req,
                                            .decode_request = decode_mute_req,
                                            .encode_reply = encode_mute_list,
                                            .decode_reply = decode_mute_list};

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
      mute_board_.emplace();
    }
    serve(rpc_, kMuteRpc, [this](MuteReq&& q, RpcRequest&) -> Result<MuteList> {
      MutexLock lk(mu_);
      return change_mutes(q);
    });
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
  auto fields = [](const Problem& p, std::string_view event, std::optional<double> lasted) {
    std::vector<LogField> f{
        {"event", event}, {"code", p.cause}, {"kind", p.kind}, {"subject", p.subject}};
    if (!p.code.empty()) f.push_back({"check", p.code});  // SETTINGS: which check
    if (lasted) f.push_back({"lasted_s", {}, *lasted});
    return f;
  };
  for (const Problem& p : problems)
    if (!has(local_, p)) {
      const auto f = fields(p, "health_problem_started", std::nullopt);
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
      const auto f = fields(p, "health_problem_ended", lasted);
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
  // A node with problems learns the cluster's mutes as often as it reports them (its
  // /metrics marks the muted ones); a healthy node has none to mark and asks nothing.
  refresh_mutes();
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

int64_t ClusterHealthService::now_unix_ms() const {
  return clock_.wall_now().time_since_epoch().count() / 1000000;
}

Result<MuteList> ClusterHealthService::change_mutes(const MuteReq& q) {
  const int64_t now = now_unix_ms();
  if (q.op == MuteOp::kSet) {
    if (Status s = mute_board_->set(q.mute, now); !s.ok()) return s;
    PFS_LOG_INFO("health: {} muted{} until {} by {}{}", q.mute.cause,
                 q.mute.subject.empty() ? "" : " for " + q.mute.subject,
                 q.mute.until_unix_ms / 1000, q.mute.by, q.mute.sticky ? " (sticky)" : "");
  } else if (q.op == MuteOp::kClear) {
    if (!mute_board_->clear(q.mute.cause, q.mute.subject))
      return Status(Code::kNotFound, "no mute of " + q.mute.cause +
                                         (q.mute.subject.empty() ? "" : " " + q.mute.subject));
    PFS_LOG_INFO("health: {}{} unmuted by {}", q.mute.cause,
                 q.mute.subject.empty() ? "" : " for " + q.mute.subject, q.mute.by);
  }
  MuteList l{mute_board_->list(now)};
  mutes_ = l.mutes;
  return l;
}

Result<std::vector<HealthMute>> ClusterHealthService::mutes(const MuteReq& q, Duration timeout) {
  const bool leads = membership_.leads();
  {
    MutexLock lk(mu_);
    if (mute_board_ && leads) {
      auto l = change_mutes(q);
      if (!l.ok()) return l.status();
      return std::move(l->mutes);
    }
  }
  std::optional<Nid> mgs = membership_.current_mgs();
  if (!mgs) return Status(Code::kNotFound, "no MGS configured (node.mgs is empty)");
  CallOptions co;
  co.timeout = timeout;
  Result<MuteList> l = call(rpc_, kMuteRpc, *mgs, q, co);
  // An MGS of a release before mutes has no handler for them (kNotFound): it keeps none.
  if (!l.ok() && l.status().code() == Code::kNotFound && q.op == MuteOp::kList)
    return std::vector<HealthMute>{};
  if (!l.ok() && l.status().code() == Code::kNotFound && q.op == MuteOp::kSet)
    return Status(Code::kNotFound,
                  "MGS " + mgs->to_string() +
                      " is of a release before health mutes: " + l.status().message());
  if (!l.ok())
    return Status(l.status().code(),
                  "asking MGS " + mgs->to_string() + ": " + l.status().message());
  MutexLock lk(mu_);
  mutes_ = l->mutes;
  return std::move(l->mutes);
}

std::vector<HealthMute> ClusterHealthService::known_mutes() const {
  MutexLock lk(mu_);
  return mutes_;
}

void ClusterHealthService::refresh_mutes() {
  std::optional<Nid> mgs = membership_.current_mgs();
  if (!mgs) return;
  {
    MutexLock lk(mu_);
    if (mutes_in_flight_) return;
    mutes_in_flight_ = true;
  }
  CallOptions co;
  co.timeout = std::max<Duration>(interval_, std::chrono::seconds(1));
  call_async(
      rpc_, kMuteRpc, *mgs, MuteReq{},
      [this](Result<MuteList> r) {
        MutexLock lk(mu_);
        mutes_in_flight_ = false;
        if (r.ok()) mutes_ = std::move(r->mutes);  // an MGS without mutes (older): none
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
