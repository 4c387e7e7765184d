#include "health/view.h"

#include <future>
#include <map>
#include <set>

#include "rpc/msg_types.h"
#include "rpc/op_tracker.h"
#include "rpc/rpc_method.h"

namespace pfsnet {

namespace {

Duration seconds(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

}  // namespace

namespace {

// The cluster's list judged at the MGS, in the reply's bulk, built on a worker.
const RpcMethod<HealthReport, HealthListReply> kListRpc{
    .type = kMsgHealthList,
    .name = "HEALTH_LIST",
    .exec = Execution::kRepeatable,
    .encode_request = encode_health_list_request,
    .decode_request = decode_health_list_request,
    .encode_reply = encode_health_list,
    .decode_reply = decode_health_list,
    .mode = HandlerMode::kWorker,
    .reply_in = ReplyIn::kBulk};

}  // namespace

HealthFetchers HealthView::fetchers_of(const HealthSources& s) {
  HealthFetchers f;
  MembershipService* m = s.membership;
  const bool has_mgs = m && (m->is_mgs() || m->has_agent());
  if (has_mgs) f.table = [m](Duration t) { return m->status(t); };
  if (MeshService* mesh = s.mesh)
    f.mesh = [mesh](Duration t) -> Result<std::vector<MeshRow>> {
      auto r = mesh->matrix(t);
      if (!r.ok()) return r.status();
      return std::move(r->rows);
    };
  if (ClusterHealthService* ch = s.cluster_health; ch && has_mgs) {
    f.others = [ch](Duration t) { return ch->cluster(t); };
    f.mutes = [ch](Duration t) { return ch->mutes(MuteReq{}, t); };
  }
  if (has_mgs && !m->is_mgs() && s.cluster_health)
    f.judged = [m, &rpc = s.rpc](const HealthReport& mine, Duration t) -> Result<HealthListReply> {
      std::optional<Nid> mgs = m->current_mgs();
      if (!mgs) return Status(Code::kUnreachable, "no MGS known");
      CallOptions co;
      co.timeout = t;
      auto r = call(rpc, kListRpc, *mgs, mine, co);
      if (!r.ok() && r.status().code() != Code::kNotFound)
        return Status(r.status().code(),
                      "asking MGS " + mgs->to_string() + " for the list: " + r.status().message());
      return r;
    };
  return f;
}

ProblemInputs HealthView::own_inputs(std::vector<NiInfo> nis, std::vector<NiInfo> peers) const {
  ProblemInputs in;
  in.node = s_.cfg.read([](const Config& c) { return c.node.name; });
  in.nis = std::move(nis);
  in.peers = std::move(peers);
  in.routes = s_.net.routes();
  if (s_.tune) in.settings = s_.tune->status().active;
  if (s_.tls) in.certificates = s_.tls->certificates();
  in.now_unix_ms = unix_ms(s_.clock.wall_now());
  if (s_.health) {
    HealthMonitor::CpuState cpu = s_.health->cpu();
    in.cpu_starved = cpu.starved;
    in.cpu_since_unix_ms = cpu.since_unix_ms;
    in.cpu_evidence = std::move(cpu.evidence);
  }
  const TimePoint now = s_.clock.now();
  SlowOpsRule rule;
  s_.cfg.read([&](const Config& c) {
    rule.threshold = seconds(c.health.slow_ops_s);
    rule.p99_factor = c.health.slow_ops_p99_factor;
    rule.p99_min = seconds(c.health.slow_ops_p99_min_s);
  });
  // Asked once per end and type in this look, not once per RPC in flight (each asking takes
  // the statistics' lock and merges two histograms).
  RpcStats& stats = s_.stats;
  std::map<std::pair<bool, uint32_t>, std::optional<Duration>> p99s;
  rule.type_p99 = [&stats, &p99s](bool client, uint32_t type) -> std::optional<Duration> {
    if (monitoring_msg(type)) return std::nullopt;  // the services that send them report it
    auto [it, fresh] = p99s.try_emplace({client, type});
    if (fresh) it->second = stats.type_p99(client, type);
    return it->second;
  };
  RpcEngine& rpc = s_.rpc;
  // An RPC this node waits on a peer for that the MGS declared dead, or one of whose NIs this
  // node's errors made unhealthy, is not SLOW_OPS: that peer's DEAD, or its NI's UNHEALTHY,
  // names why (drilled: a ping load to a killed server listed every client).
  std::set<Nid> failing;
  for (const NiInfo& i : in.peers)
    if (i.health < kMaxHealth) failing.insert({i.peer, i.nid});
  std::vector<Op> ops = rpc.ops_in_flight();
  std::erase_if(ops, [&](const Op& op) {
    return op.client && (failing.count(op.peer) || s_.net.peer_dead(op.peer));
  });
  if (auto so = find_slow_ops(ops, now, rule, [&rpc](uint32_t t) { return rpc.type_name(t); }))
    in.slow_ops = {
        in.now_unix_ms -
            std::chrono::duration_cast<std::chrono::milliseconds>(now - so->since).count(),
        std::move(so->evidence)};
  return in;
}

std::vector<Problem> HealthView::own_findings() const {
  return find_problems(own_inputs(s_.net.nis(), s_.net.peers()));
}

struct HealthView::Fetched {
  std::optional<Result<StatusTable>> table;
  std::optional<Result<std::vector<MeshRow>>> mesh;
  std::optional<Result<std::vector<NodeProblems>>> others;
  std::optional<Result<std::vector<HealthMute>>> mutes;
};

HealthView::Fetched HealthView::fetch(Duration deadline) const {
  // Asked at once: a slow MGS costs one deadline, not one per question.
  Fetched got;
  std::vector<std::function<void()>> asks;
  if (f_.table) asks.push_back([&] { got.table = f_.table(deadline); });
  if (f_.mesh) asks.push_back([&] { got.mesh = f_.mesh(deadline); });
  if (f_.others) asks.push_back([&] { got.others = f_.others(deadline); });
  if (f_.mutes) asks.push_back([&] { got.mutes = f_.mutes(deadline); });
  if (f_.run) {
    f_.run(asks);
  } else {
    std::vector<std::future<void>> running;
    for (const auto& a : asks) running.push_back(std::async(std::launch::async, a));
    for (auto& r : running) r.get();
  }
  return got;
}

HealthList HealthView::finish(ClusterInputs in, Fetched got) const {
  in.rule = MeshOutlierRule::from(s_.cfg.get());
  HealthList out;
  std::optional<StatusTable> table;
  if (got.table) {
    if (got.table->ok()) {
      table = std::move(**got.table);
      in.table = &*table;
      TableSummary t{table->mgs, table->nodes.size(), 0};
      for (const StatusNode& n : table->nodes) t.up += n.state == NodeState::kUp;
      out.table = t;
    } else {
      in.mgs_error = got.table->status().message();
    }
  }
  if (got.mesh && got.mesh->ok()) in.rows = std::move(**got.mesh);
  if (got.others) {
    if (got.others->ok())
      in.others = std::move(**got.others);
    else if (in.mgs_error.empty())
      in.mgs_error =
          "other nodes' own problems could not be had: " + got.others->status().message();
  }
  out.node = in.own.node;
  out.mgs_ok = got.table.has_value() && in.mgs_error.empty();
  out.problems = judge(std::move(in));
  if (got.mutes && out.mgs_ok) {
    if (got.mutes->ok())
      out.mutes = apply_mutes(out.problems, **got.mutes, unix_ms(s_.clock.wall_now()));
    else
      out.mutes_error = got.mutes->status().message();
  }
  return out;
}

HealthList HealthView::list(Duration deadline) const {
  ClusterInputs in;
  in.own = own_inputs(s_.net.nis(), s_.net.peers());
  if (f_.judged) {
    // This node's own findings (no table, no mesh: those are the MGS's to judge).
    auto r = f_.judged(HealthReport{in.own.node, find_problems(in.own)}, deadline);
    if (r.ok()) {
      HealthList out;
      out.node = in.own.node;
      if (r->has_table) out.table = TableSummary{r->mgs, r->nodes, r->nodes_up};
      out.problems = std::move(r->problems);
      out.left_off = r->left_off;
      out.mutes = std::move(r->mutes);
      out.mutes_error = std::move(r->mutes_error);
      out.mgs_ok = r->has_table;
      out.judged_at_mgs = true;
      return out;
    }
    // An MGS of a release before HEALTH_LIST has no handler for it: asked as it was then.
    // Any other failure is the MGS's: judged here from this node's own view, as when the
    // four questions all fail.
    if (r.status().code() != Code::kNotFound) {
      in.mgs_error = r.status().message();
      return finish(std::move(in), Fetched{});
    }
  }
  return finish(std::move(in), fetch(deadline));
}

HealthList HealthView::judged_for(const HealthReport& asker, Duration deadline) const {
  ClusterInputs in;
  in.own.node = asker.node;
  in.own.now_unix_ms = unix_ms(s_.clock.wall_now());
  in.found = asker.problems;
  return finish(std::move(in), fetch(deadline));
}

HealthListReply health_list_reply(const HealthList& l) {
  HealthListReply r;
  if (l.table) {
    r.has_table = true;
    r.mgs = l.table->mgs;
    r.nodes = static_cast<uint32_t>(l.table->nodes);
    r.nodes_up = static_cast<uint32_t>(l.table->up);
  }
  r.problems = l.problems;
  r.left_off = static_cast<uint32_t>(l.left_off);
  r.mutes = l.mutes;
  r.mutes_error = l.mutes_error;
  return r;
}

void serve_health_list(RpcEngine& rpc, std::function<HealthView()> view) {
  serve(rpc, kListRpc,
        [view = std::move(view)](HealthReport&& asker, RpcRequest&) -> Result<HealthListReply> {
          // Its own questions are local on the MGS; the asker's deadline bounds them anyway.
          return health_list_reply(view().judged_for(asker, std::chrono::seconds(5)));
        });
}

std::vector<Problem> HealthView::scrape(std::vector<NiInfo> nis, std::vector<NiInfo> peers) const {
  ClusterInputs in;
  in.own = own_inputs(std::move(nis), std::move(peers));
  const int64_t now_ms = in.own.now_unix_ms;
  std::vector<Problem> v = judge(std::move(in));
  if (s_.cluster_health)  // the mutes as last learnt: no RPC on a scrape
    (void)apply_mutes(v, s_.cluster_health->known_mutes(), now_ms);
  return v;
}

}  // namespace pfsnet
