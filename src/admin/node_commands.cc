#include "admin/node_commands.h"

#include <charconv>
#include <map>
#include <memory>
#include <set>

#include "admin/stats_json.h"
#include "admin/views.h"
#include "base/json_fields.h"
#include "base/mutex.h"
#include "rpc/health_monitor.h"
#include "rpc/op_tracker.h"
#include "selftest/selftest.h"
#include "transport/transport.h"

namespace pfsnet {

using nlohmann::json;

namespace {

json ni_list_json(const std::vector<NiInfo>& list, const char* key) {
  json a = json::array();
  for (const NiInfo& i : list) a.push_back(ni_info_json(i));
  return {{key, a}};
}

Result<json> diag_rpc(const NodeParts& node, const json& req) {
  auto q = parse_stats_query(req, [](const std::string& name) -> Result<Nid> {
    // Nodes are named by NID until membership (the MGS table) names them.
    auto nid = Nid::parse(name);
    if (!nid.ok())
      return Status(Code::kInvalidArgument,
                    "unknown node '" + name + "': " + nid.status().message());
    return *nid;
  });
  if (!q.ok()) return q.status();
  StatsReport rep = node.stats.query(*q);
  auto nid_of = [](const Nid& n) { return n.to_string(); };
  json j = stats_report_json(rep, *q, nid_of, nid_of,
                             [&](uint32_t type) { return node.rpc.type_name(type); });
  // Exactly-once execution of the requests served here (rpc/reply_cache.h).
  ReplyCacheStats rc = node.rpc.replay_stats();
  j["reply_cache"] = {{"clients", rc.clients},
                      {"entries", rc.entries},
                      {"bytes", rc.bytes},
                      {"max_entries", rc.max_entries},
                      {"window", rc.window},
                      {"replayed", rc.replayed},
                      {"running_copies", rc.running_copies},
                      {"finished_copies", rc.finished_copies},
                      {"unknown", rc.unknown},
                      {"before_start", rc.before_start},
                      {"over_window", rc.over_window},
                      {"done_acks", rc.done_acks},
                      {"idle_clients", rc.idle_clients},
                      {"evicted_clients", rc.evicted_clients}};
  return j;
}

Result<json> health(const NodeParts& node) {
  return health_json(health_view(node).list(std::chrono::seconds(5)));
}

// `pfsnet health mute CAUSE [SUBJECT] --ttl S [--sticky]` and `unmute`: at the MGS, for
// the whole cluster. A mute remembers how many problems it covered when set (from this
// node's view), so that more later make it lift unless sticky.
Result<json> health_mute(const NodeParts& node, const json& req) {
  if (!node.cluster_health) return Status(Code::kNotFound, "cluster health is not running here");
  const std::string cause = req.value("cause", std::string());
  const std::string subject = req.value("subject", std::string());
  const bool clear = req.value("clear", false);
  const auto& causes = problem_causes();
  if (std::find(causes.begin(), causes.end(), cause) == causes.end()) {
    std::string all;
    for (const std::string& c : causes) all += (all.empty() ? "" : ", ") + c;
    return Status(Code::kInvalidArgument, "unknown cause '" + cause + "' (one of " + all + ")");
  }
  MuteReq q;
  q.op = clear ? MuteOp::kClear : MuteOp::kSet;
  q.mute.cause = cause;
  q.mute.subject = subject;
  q.mute.by = node.cfg.read([](const Config& c) { return c.node.name; });
  if (!clear) {
    const double ttl_s = req.value("ttl_s", 0.0);
    if (!(ttl_s >= 1 && ttl_s <= 366.0 * 86400))
      return Status(Code::kInvalidArgument, "--ttl must be from 1 s to 366 days");
    q.mute.sticky = req.value("sticky", false);
    q.mute.set_unix_ms = unix_ms(node.clock.wall_now());
    q.mute.until_unix_ms = q.mute.set_unix_ms + static_cast<int64_t>(ttl_s * 1000);
    HealthList h = health_view(node).list(std::chrono::seconds(5));
    for (const Problem& p : h.problems) q.mute.matched += mute_covers(q.mute, p) ? 1 : 0;
  }
  auto m = node.cluster_health->mutes(q, std::chrono::seconds(5));
  if (!m.ok()) return m.status();
  std::vector<Problem> none;
  return json{{"mutes", mutes_json(apply_mutes(none, *m, unix_ms(node.clock.wall_now())))}};
}

// The probe mesh: the MGS's rows (every node's), or with "local" this node's own row, each
// cell marked when it stands out from the others.
Result<json> mesh(const NodeParts& node, const json& req) {
  if (!node.mesh) return Status(Code::kNotFound, "the probe mesh is not running on this node");
  MeshMatrix m;
  if (req.value("local", false)) {
    m.mgs = Nid{};
    m.rows = {node.mesh->local_row()};
    m.total = 1;
  } else {
    auto r = node.mesh->matrix(std::chrono::seconds(5));
    if (!r.ok()) return r.status();
    m = std::move(*r);
  }
  auto marks = mark_outliers(m.rows, MeshOutlierRule::from(node.cfg.get()));
  return mesh_json(m, marks, node.mesh->counters(), node.mesh->options());
}

// `pfsnet netverify`: every path to the nodes asked for (default: all the MGS knows),
// checked and judged (probe/netverify.h).
Result<json> netverify(const NodeParts& node, const json& req) {
  if (!node.netverify) return Status(Code::kNotFound, "netverify is not running on this node");
  NetverifyRequest r;
  auto num = [&](const char* key, double lo, double hi, double& out) -> Status {
    if (!req.contains(key)) return Status::Ok();
    if (!req[key].is_number() || req[key].get<double>() < lo || req[key].get<double>() > hi)
      return Status(Code::kInvalidArgument, std::string(key) + ": a number from " +
                                                std::to_string(lo) + " to " + std::to_string(hi));
    out = req[key].get<double>();
    return Status::Ok();
  };
  double size = r.size, timeout = 5;
  for (Status s : {num("max_clock_offset_ms", 0, 1e9, r.limits.max_clock_offset_ms),
                   num("max_rtt_ms", 0, 1e9, r.limits.max_rtt_ms),
                   num("min_bandwidth_mib", 0, 1e9, r.limits.min_bandwidth_mib),
                   num("size", 1, 1e9, size), num("timeout", 0.1, 600, timeout)})
    if (!s.ok()) return s;
  r.size = static_cast<uint32_t>(size);
  r.timeout = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(timeout));
  r.bandwidth = req.value("bandwidth", true);
  if (req.contains("nodes")) {
    if (!req["nodes"].is_array()) return Status(Code::kInvalidArgument, "nodes: a list");
    for (const json& n : req["nodes"]) {
      if (!n.is_string() || n.get<std::string>().empty())
        return Status(Code::kInvalidArgument, "nodes: names or NIDs");
      r.nodes.push_back(n.get<std::string>());
    }
  }
  auto rep = node.netverify->run(r);
  if (!rep.ok()) return rep.status();
  return netverify_json(*rep);
}

Result<json> config_show(const NodeParts& node) {
  json a = json::array();
  const Config cfg = node.cfg.get();
  for (const auto& [k, v] : config_entries(cfg)) {
    json e = {{"key", k}, {"value", v}, {"runtime", runtime_key(k)}};
    // A 0 that stands for a rule's count: the count in force beside it.
    if (k == "lnet.io_threads" && cfg.lnet.io_threads == 0)
      e["in_force"] = std::to_string(io_threads_in_force(cfg));
    a.push_back(std::move(e));
  }
  return json{{"config", a}};
}

Result<json> config_set(const NodeParts& node, const json& req) {
  auto r = node.cfg.set(req.value("set", std::vector<std::string>{}));
  if (!r.ok()) return r.status();
  return config_applied_json(*r);
}

Result<json> status(const NodeParts& node) {
  if (!node.membership) return Status(Code::kNotFound, "membership is not running on this node");
  auto t = node.membership->status(std::chrono::seconds(5));
  if (!t.ok()) return t.status();
  json j = status_table_json(*t);
  j["local"] = membership_counters_json(node.membership->counters());
  return j;
}

// The op tracker (pfsnet diag ops): RPCs in flight now, oldest first; with "history", the
// slowest that ended lately, each with its timeline.
Result<json> diag_ops(const NodeParts& node, const json& req) {
  bool history = false;
  if (req.contains("history")) {
    const json& h = req["history"];
    if (h.is_boolean())
      history = h.get<bool>();
    else if (h.is_string() && (h == "1" || h == "true" || h == "0" || h == "false"))
      history = h == "1" || h == "true";
    else
      return Status(Code::kInvalidArgument, "history must be true or false");
  }
  const TimePoint now = node.clock.now();
  const int64_t wall = unix_ms(node.clock.wall_now());
  json j = {{"node", node.cfg.read([](const Config& c) { return c.node.name; })}};
  j["in_flight"] = ops_json(node.rpc.ops_in_flight(), node.rpc.type_names(), now, wall);
  if (history) j["history"] = ops_json(node.rpc.ops_history(), node.rpc.type_names(), now, wall);
  return j;
}

// What each job and each client asked of this node as a server (stats/job_stats.h; Lustre's
// job_stats): the top `top` (0: every one kept) of each by `by` (bytes, rpcs, time), and
// `other`.
Result<json> diag_jobs(const NodeParts& node, const json& req) {
  JobStats::By by = JobStats::By::kBytes;
  if (req.contains("by") &&
      (!req["by"].is_string() || !parse_job_stats_by(req["by"].get<std::string>(), &by)))
    return Status(Code::kInvalidArgument, "by must be bytes, rpcs or time");
  json q = req;  // the HTTP API's query gives "top" as a string
  if (q.contains("top") && q["top"].is_string()) {
    const std::string t = q["top"];
    int64_t n = -1;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
    if (ec == std::errc() && end == t.data() + t.size()) q["top"] = n;
  }
  auto top = json_int(q, "top", 10, 0, 1'000'000);
  if (!top.ok()) return top.status();
  const size_t k = *top == 0 ? SIZE_MAX : static_cast<size_t>(*top);
  const TimePoint now = node.clock.now();
  const int64_t wall = unix_ms(node.clock.wall_now());
  JobStats& jobs = node.stats.jobs();
  return json{
      {"node", node.cfg.read([](const Config& c) { return c.node.name; })},
      {"by", req.value("by", std::string("bytes"))},
      {"unix_ms", wall},
      {"jobs", job_view_json(jobs.top_jobs(k, by), node.rpc.type_names(), now, wall)},
      {"clients", job_view_json(jobs.top_clients(k, by), node.rpc.type_names(), now, wall)}};
}

// The cluster's minimum release level (pfsnet upgrade check|commit): asked of the MGS.
Result<json> upgrade(const NodeParts& node, const json& req) {
  if (!node.membership) return Status(Code::kNotFound, "membership is not running on this node");
  UpgradeReq q;
  q.commit = req.value("commit", false);
  q.force = req.value("force", false);
  auto level = json_int(req, "level", 0, 0, 65535);
  if (!level.ok()) return level.status();
  q.level = static_cast<uint16_t>(*level);
  if (q.force && !q.commit) return Status(Code::kInvalidArgument, "force goes with commit");
  auto r = node.membership->upgrade(q, std::chrono::seconds(10));
  if (!r.ok()) return r.status();
  json j = upgrade_json(*r);
  j["commit"] = q.commit;
  std::optional<Nid> mgs = node.membership->leads() ? std::nullopt : node.membership->current_mgs();
  j["mgs"] = mgs ? mgs->to_string() : node.cfg.read([](const Config& c) {
    return c.nets.empty() ? std::string() : c.nets[0].nid.to_string();
  });
  return j;
}

Result<json> selftest(const NodeParts& node, const json& req) {
  auto spec = SelftestSpec::from_json(req);
  if (!spec.ok()) return spec.status();
  int64_t max_bulk = node.cfg.read([](const Config& c) { return c.max_bulk(); });
  if (spec->size > max_bulk)
    return Status(Code::kInvalidArgument,
                  "size must be at most " + std::to_string(max_bulk) + " (2 x maxBlockSize)");
  return run_selftest(node.rpc, *spec);
}

Result<json> tune(const NodeParts& node, const json& req) {
  if (!node.tune) return Status(Code::kNotFound, "tuning is not running on this node");
  auto tr = parse_tune_request(req);
  if (!tr.ok()) return tr.status();
  auto r = node.tune->tune(*tr);
  if (!r.ok()) return r.status();
  json out = tune_report_json(*r);
  auto storage = storage_advice_json(node, req);
  if (!storage.ok()) return storage.status();
  out["storage"] = *storage;
  return out;
}

Result<json> fault_add(const NodeParts& node, const json& req) {
  auto r = parse_fault_rule(req, node.rpc);
  if (!r.ok()) return r.status();
  r->id = node.net.add_fault(*r);
  return json{{"added", fault_json(*r)}};
}

Result<json> fault_list(const NodeParts& node) {
  json a = json::array();
  for (const FaultRule& r : node.net.faults()) a.push_back(fault_json(r));
  return json{{"faults", a}};
}

Result<json> fault_del(const NodeParts& node, const json& req) {
  if (req.value("all", false)) {
    size_t n = 0;
    for (const FaultRule& r : node.net.faults()) n += node.net.del_fault(r.id) ? 1 : 0;
    return json{{"deleted", n}};
  }
  auto id = json_int(req, "id", 0, 0, INT64_MAX);
  if (!id.ok()) return id.status();
  if (!node.net.del_fault(static_cast<uint64_t>(*id)))
    return Status(Code::kNotFound, "no fault rule " + std::to_string(*id));
  return json{{"deleted", 1}};
}

}  // namespace

Result<TuneRequest> parse_tune_request(const json& req) {
  TuneRequest tr;
  tr.probe = req.value("probe", false);
  tr.apply = req.value("apply", false);
  if (req.contains("peers")) {
    if (!req["peers"].is_array()) return Status(Code::kInvalidArgument, "peers: a list of NIDs");
    if (req["peers"].size() > 4096) return Status(Code::kInvalidArgument, "peers: at most 4096");
    for (const json& p : req["peers"]) {
      auto n = Nid::parse(p.is_string() ? p.get<std::string>() : std::string());
      if (!n.ok()) return Status(Code::kInvalidArgument, "bad --peer: " + n.status().message());
      tr.peers.push_back(*n);
    }
  }
  if (req.contains("size")) {
    auto size = json_int(req, "size", 0, 1, int64_t(1) << 30);
    if (!size.ok()) return size.status();
    tr.size = *size;
  }
  return tr;
}

HealthView health_view(const NodeParts& node) {
  return HealthView(HealthSources{node.net, node.rpc, node.stats, node.cfg, node.clock,
                                  node.membership, node.tune, node.health, node.mesh,
                                  node.cluster_health, node.tls});
}

std::vector<Problem> local_problems(const NodeParts& node) {
  return health_view(node).own_findings();
}

void add_node_commands(AdminCommands& cmds, const NodeParts& n) {
  using E = const AdminEmit&;
  cmds.add(
      "nis", [n](const json&, E) -> Result<json> { return ni_list_json(n.net.nis(), "nis"); },
      "nis");
  cmds.add(
      "peers",
      [n](const json&, E) -> Result<json> {
        return ni_list_json(n.net.peers(/*kernel_tcp=*/true), "peers");
      },
      "peers");
  cmds.add(
      "diag_rpc", [n](const json& r, E) { return diag_rpc(n, r); }, "diag/rpc");
  cmds.add(
      "diag_ops", [n](const json& r, E) { return diag_ops(n, r); }, "diag/ops");
  cmds.add(
      "diag_jobs", [n](const json& r, E) { return diag_jobs(n, r); }, "diag/jobs");
  cmds.add(
      "config_show", [n](const json&, E) { return config_show(n); }, "config");
  cmds.add("config_set", [n](const json& r, E) { return config_set(n, r); });
  cmds.add(
      "status", [n](const json&, E) { return status(n); }, "status");
  cmds.add(
      "health", [n](const json&, E) { return health(n); }, "health");
  cmds.add("health_mute", [n](const json& r, E) { return health_mute(n, r); });
  cmds.add("upgrade", [n](const json& r, E) { return upgrade(n, r); });
  cmds.add(
      "mesh", [n](const json& r, E) { return mesh(n, r); }, "mesh");
  cmds.add("netverify", [n](const json& r, E) { return netverify(n, r); });
  // The last sweep run from this node, for the dashboard (GET /api/v1/selftest/last).
  struct LastSweep {
    Mutex mu;
    json result GUARDED_BY(mu) = json::object();
  };
  auto last = std::make_shared<LastSweep>();
  cmds.add("selftest", [n, last](const json& r, E) {
    auto res = selftest(n, r);
    if (res.ok()) {
      json kept = *res;
      kept["finished"] = format_unix_ms(unix_ms(n.clock.wall_now()));
      MutexLock lk(last->mu);
      last->result = std::move(kept);
    }
    return res;
  });
  cmds.add(
      "selftest_last",
      [last](const json&, E) -> Result<json> {
        MutexLock lk(last->mu);
        return last->result;
      },
      "selftest/last");
  cmds.add("tune", [n](const json& r, E) { return tune(n, r); });
  cmds.add("ping", [n](const json& r, E emit) { return run_ping(n, r, emit); });
  cmds.add("fault_add", [n](const json& r, E) { return fault_add(n, r); });
  cmds.add("fault_list", [n](const json&, E) { return fault_list(n); });
  cmds.add("fault_del", [n](const json& r, E) { return fault_del(n, r); });
  add_storage_commands(cmds, n);
  add_route_commands(cmds, n);
  add_nrs_commands(cmds, n);
}

MetricsSnapshot metrics_snapshot(const NodeParts& node) {
  MetricsSnapshot m;
  m.nis = node.net.nis();
  m.peers = node.net.peers(/*kernel_tcp=*/true);
  StatsQuery q;
  q.what = StatsQuery::What::kAll;
  q.granularity = Granularity::kSecond;
  q.last = 60;
  q.totals = true;
  m.rpc = node.stats.query(q);
  RpcEngine* rpc = &node.rpc;
  m.type_name = [rpc](uint32_t t) { return rpc->type_name(t); };
  if (node.tune) m.tune = node.tune->status();
  if (node.membership) {
    MetricsSnapshot::Membership ms;
    ms.counters = node.membership->counters();
    if (node.membership->leads()) {  // its own table: no RPC
      auto t = node.membership->status(std::chrono::seconds(5));
      if (t.ok()) ms.table = std::move(*t);
    }
    m.membership = std::move(ms);
  }
  // The health view's list from what this node holds (no RPC on a scrape): on the MGS that
  // leads, the cluster's -- its table, the probe mesh's rows, every node's own list and the
  // mutes are all its own, judged as `pfsnet health` judges them there; on any other node
  // its own findings (the NIs and peers this snapshot took already: not walked again).
  if (m.membership && m.membership->table) {  // taken above only where this node leads
    m.problems = health_view(node).list(std::chrono::seconds(5)).problems;
    m.cluster_list = true;
  } else {
    m.problems = health_view(node).scrape(m.nis, m.peers);
  }
  if (node.cluster_health) {
    ClusterHealthService::Counters hc = node.cluster_health->counters();
    m.health_events = MetricsSnapshot::HealthEvents{hc.started, hc.ended, hc.lasted_seconds};
  }
  m.workers = node.rpc.worker_stats();
  m.replay = node.rpc.replay_stats();
  m.routes = node.net.routes();
  m.router = node.net.router_stats();
  const int64_t top_jobs = node.cfg.read([](const Config& c) { return c.stats.metrics_top_jobs; });
  if (top_jobs > 0) {
    m.jobs = node.stats.jobs().top_jobs(size_t(top_jobs), JobStats::By::kBytes);
    m.clients = node.stats.jobs().top_clients(size_t(top_jobs), JobStats::By::kBytes);
  }
  if (node.health) {
    MetricsSnapshot::Slowness s;
    for (SlowCause c : {SlowCause::kSlow, SlowCause::kLossy, SlowCause::kServer}) {
      s.degraded[static_cast<size_t>(c)] = node.health->degraded_total(c);
      s.degraded_seconds[static_cast<size_t>(c)] = node.health->degraded_seconds(c);
    }
    s.probes = node.health->probes_sent();
    s.cpu_wait_seconds = node.health->cpu_wait_seconds();
    s.cpu_starved_events = node.health->cpu_starved_total();
    s.cpu_starved_seconds = node.health->cpu_starved_seconds();
    s.cpu_starved = node.health->cpu().starved;
    m.slowness = s;
  }
  if (node.mesh) {
    MeshService::Counters c = node.mesh->counters();
    m.mesh = MetricsSnapshot::Mesh{node.mesh->local_row(), c.probes, c.lost, c.bulk_bytes};
  }
  return m;
}

}  // namespace pfsnet
