#include "pfsnetd/daemon.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <thread>

#include "admin/stats_json.h"
#include "base/log.h"
#include "rpc/ping.h"
#include "selftest/selftest.h"
#include "transport/tcp_transport.h"

namespace pfsnet {

using nlohmann::json;

Daemon::Daemon(Config cfg, std::string cluster_key)
    : cfg_(std::move(cfg)), key_(std::move(cluster_key)) {
  std::vector<Nid> nids;
  bool verbs = false;
  for (const NetConfig& n : cfg_.nets) {
    nids.push_back(n.nid);
    verbs = verbs || n.nid.is_verbs();
  }
  stats_ = std::make_unique<RpcStats>(cfg_.stats, clock_, verbs);
  TransportOptions to;
  to.cluster_key = key_;
  to.limits.max_bulk = static_cast<uint32_t>(cfg_.max_bulk());
  for (const EmulationConfig& e : cfg_.emulation) {
    EmulationRule r;
    if (!e.ni.empty()) r.local = *Nid::parse(e.ni);
    if (!e.peer.empty()) r.peer = *Nid::parse(e.peer);
    r.delay =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(e.delay_ms));
    r.bits_per_second = e.rate_mbit * 1e6;
    to.emulation.push_back(r);
    PFS_LOG_WARN(
        "LINK EMULATION ON: frames from {} to {} are delayed {} ms one way{} -- this "
        "node does not run at the speed of its network",
        e.ni.empty() ? "any NI" : e.ni, e.peer.empty() ? "any peer" : e.peer, e.delay_ms,
        e.rate_mbit > 0 ? " and limited to " + std::to_string(e.rate_mbit) + " Mbit/s"
                        : std::string());
  }
  net_ = std::make_unique<Net>(NetOptions::from(cfg_), nids, clock_,
                               [this, to, nids](TransportEvents& ev) {
                                 return std::make_unique<TcpTransport>(to, nids, clock_, ev);
                               });
  RpcOptions ro;
  ro.max_rpcs_in_flight = cfg_.rpc.max_rpcs_in_flight;
  ro.default_timeout = std::chrono::seconds(cfg_.lnet.transaction_timeout);
  ro.max_bulk = static_cast<uint32_t>(cfg_.max_bulk());
  ro.retry_count = cfg_.lnet.retry_count;
  rpc_ = std::make_unique<RpcEngine>(*net_, ro, stats_.get());
  serve_ping(*rpc_, static_cast<size_t>(cfg_.max_bulk()));
  membership_ = std::make_unique<MembershipService>(cfg_, *net_, *rpc_, clock_);
  serve_selftest(*rpc_, clock_);
  serve_tune_probe(*rpc_, clock_);
  autotune_ = std::make_unique<AutoTuner>(cfg_.tune);
  admin_ = std::make_unique<AdminServer>(
      [this](const json& req, const AdminEmit& emit) { return handle_admin(req, emit); });
}

Daemon::~Daemon() { stop(); }

Status Daemon::start() {
  Status s = net_->start();
  if (!s.ok()) return s;
  rpc_->start_ticker(std::chrono::milliseconds(100));
  watch_links();
  membership_->start();
  start_tuning();
  s = admin_->start(cfg_.node.admin_socket);
  if (!s.ok()) return s;
  if (!cfg_.node.http.empty()) {
    HttpRoutes routes;
    routes.metrics = [this] { return metrics_text(); };
    routes.api = [this](
                     const std::string& name,
                     const std::multimap<std::string, std::string>& params) -> Result<std::string> {
      json req = {{"cmd", name == "diag/rpc" ? "diag_rpc"
                          : name == "config" ? "config_show"
                                             : name}};
      for (const auto& [k, v] : params) req[k] = v;
      if (req["cmd"] != "nis" && req["cmd"] != "peers" && req["cmd"] != "config_show" &&
          req["cmd"] != "diag_rpc" && req["cmd"] != "status")
        return Status(Code::kNotFound, "no such API: " + name);
      auto r = handle_admin(req, [](const json&) { return true; });
      if (!r.ok()) return r.status();
      return r->dump();
    };
    http_ = std::make_unique<HttpServer>(std::move(routes));
    s = http_->start(cfg_.node.http);
    if (!s.ok()) return s;
  }
  std::string nids;
  for (const Nid& n : net_->local_nids()) nids += (nids.empty() ? "" : " ") + n.to_string();
  PFS_LOG_INFO("pfsnetd started: node {} NIDs {} admin socket {}", cfg_.node.name, nids,
               cfg_.node.admin_socket);
  return Status::Ok();
}

void Daemon::watch_links() {
  for (const Nid& n : net_->local_nids()) {
    auto ifname = LinkMonitor::interface_of(n.addr);
    if (!ifname.ok()) {
      PFS_LOG_WARN("NI {}: no interface holds {}; its link state is not followed", n.to_string(),
                   n.address_string());
      continue;
    }
    ni_ifaces_[*ifname].push_back(n);
    auto up = LinkMonitor::link_up(*ifname);
    PFS_LOG_INFO("NI {} is on interface {} (link {})", n.to_string(), *ifname,
                 up.ok() ? (*up ? "up" : "down") : "unknown");
    if (up.ok() && !*up) net_->set_link_state(n, false, /*penalize=*/false);
  }
  Status s = links_.start([this](const std::string& ifname, bool up) {
    auto it = ni_ifaces_.find(ifname);
    if (it == ni_ifaces_.end()) return;
    for (const Nid& n : it->second) net_->set_link_state(n, up);
  });
  if (!s.ok())
    PFS_LOG_WARN("link monitor not started: {}; link events are not followed", s.message());
}

void Daemon::stop() {
  if (stopped_) return;
  stopped_ = true;
  tune_ticker_.stop();
  links_.stop();
  membership_->stop();
  rpc_->shutdown();  // pending RPCs fail now, so admin sessions end
  if (http_) http_->stop();
  admin_->stop();
  net_->shutdown();
}

json ni_info_json(const NiInfo& i) {
  json errors = json::object();
  for (int k = 1; k < kNumHealthKinds; ++k)
    errors[std::string(health_kind_name(static_cast<HealthKind>(k)))] = i.errors[k];
  json j = {{"nid", i.nid.to_string()},
            // Peer NIs: up = connected; idle = not connected and healthy; down = neither.
            {"state", i.up                                             ? "up"
                      : !i.peer_nids.empty() && i.health == kMaxHealth ? "idle"
                                                                       : "down"},
            {"health", i.health},
            {"credits", i.credits},
            {"credits_max", i.credits_max},
            {"credits_min", i.credits_min},
            {"queued", i.queued},
            {"connections", i.connections},
            {"send_count", i.send_count},
            {"send_bytes", i.send_bytes},
            {"recv_count", i.recv_count},
            {"recv_bytes", i.recv_bytes},
            {"timeouts", i.local_timeouts + i.remote_timeouts},
            {"local_timeouts", i.local_timeouts},
            {"remote_timeouts", i.remote_timeouts},
            {"resends", i.resends},
            {"drops", i.drops},
            {"faults", i.faults},
            {"credit_waits", i.credit_waits},
            {"errors", errors},
            {"last_change", format_unix_ms(i.last_change_unix_ms)},
            {"last_change_unix_ms", i.last_change_unix_ms},
            {"since_change_s", std::round(i.since_change_s * 1000) / 1000},
            {"recovery_pings", i.recovery_pings},
            {"next_recovery_s",
             i.next_recovery_s < 0 ? -1.0 : std::round(i.next_recovery_s * 1000) / 1000}};
  if (!i.peer_nids.empty()) {
    json nids = json::array();
    for (const Nid& n : i.peer_nids) nids.push_back(n.to_string());
    j["peer_nids"] = nids;
    j["peer"] = i.peer.to_string();
  }
  return j;
}

json Daemon::nis_json() const {
  json a = json::array();
  for (const NiInfo& i : net_->nis()) a.push_back(ni_info_json(i));
  return {{"nis", a}};
}

json Daemon::peers_json() const {
  json a = json::array();
  for (const NiInfo& i : net_->peers()) a.push_back(ni_info_json(i));
  return {{"peers", a}};
}

Result<json> Daemon::handle_admin(const json& req, const AdminEmit& emit) {
  std::string cmd = req.value("cmd", std::string());
  if (cmd == "ping") return ping(req, emit);
  if (cmd == "nis") return nis_json();
  if (cmd == "peers") return peers_json();
  if (cmd == "diag_rpc") return diag_rpc(req);
  if (cmd == "config_show") return config_show();
  if (cmd == "config_set") return config_set(req);
  if (cmd == "selftest") {
    auto spec = SelftestSpec::from_json(req);
    if (!spec.ok()) return spec.status();
    if (spec->size > cfg_.max_bulk())
      return Status(
          Code::kInvalidArgument,
          "size must be at most " + std::to_string(cfg_.max_bulk()) + " (2 x maxBlockSize)");
    return run_selftest(*rpc_, *spec);
  }
  if (cmd == "status") {
    auto text = membership_->status_json(std::chrono::seconds(5));
    if (!text.ok()) return text.status();
    json j = json::parse(*text, nullptr, false);
    if (j.is_discarded()) return Status(Code::kProtocol, "malformed status table");
    j["local"] = json::parse(membership_->counters_json());
    return j;
  }
  if (cmd == "fault_add" || cmd == "fault_list" || cmd == "fault_del") return fault(req);
  if (cmd == "tune") return tune(req);
  return Status(Code::kInvalidArgument, "unknown command '" + cmd + "'");
}

Result<json> Daemon::diag_rpc(const json& req) {
  auto q = parse_stats_query(req, [](const std::string& name) -> Result<uint64_t> {
    // Nodes are named by NID until membership (the MGS table) names them.
    auto nid = Nid::parse(name);
    if (!nid.ok())
      return Status(Code::kInvalidArgument,
                    "unknown node '" + name + "': " + nid.status().message());
    return nid->pack();
  });
  if (!q.ok()) return q.status();
  StatsReport rep = stats_->query(*q);
  auto nid_of = [](uint64_t key) {
    auto n = Nid::unpack(key);
    return n.ok() ? n->to_string() : std::to_string(key);
  };
  return stats_report_json(rep, *q, nid_of, nid_of,
                           [this](uint32_t type) { return rpc_->type_name(type); });
}

namespace {
json fault_json(const FaultRule& r) {
  auto ms = [](Duration d) {
    return double(std::chrono::duration_cast<std::chrono::microseconds>(d).count()) / 1000.0;
  };
  return {{"id", r.id},
          {"action", r.action == FaultRule::Action::kDrop ? "drop" : "delay"},
          {"src", r.src ? r.src->to_string() : "*"},
          {"dst", r.dst ? r.dst->to_string() : "*"},
          {"type", r.msg_type},
          {"rate", r.rate},
          {"interval_ms", ms(r.interval)},
          {"latency_ms", ms(r.latency)},
          {"health", std::string(health_kind_name(r.health))},
          {"matched", r.matched},
          {"injected", r.injected},
          {"rule", r.describe()}};
}

Result<std::optional<Nid>> nid_or_any(const json& req, const char* key) {
  std::string v = req.value(key, std::string("*"));
  if (v == "*" || v.empty()) return std::optional<Nid>();
  auto n = Nid::parse(v);
  if (!n.ok())
    return Status(Code::kInvalidArgument,
                  std::string("bad --") + key + " '" + v + "': " + n.status().message());
  return std::optional<Nid>(*n);
}
}  // namespace

Result<json> Daemon::fault(const json& req) {
  std::string cmd = req.value("cmd", std::string());
  if (cmd == "fault_list") {
    json a = json::array();
    for (const FaultRule& r : net_->faults()) a.push_back(fault_json(r));
    return json{{"faults", a}};
  }
  if (cmd == "fault_del") {
    if (req.value("all", false)) {
      size_t n = 0;
      for (const FaultRule& r : net_->faults()) n += net_->del_fault(r.id) ? 1 : 0;
      return json{{"deleted", n}};
    }
    uint64_t id = req.value("id", uint64_t{0});
    if (!net_->del_fault(id)) return Status(Code::kNotFound, "no fault rule " + std::to_string(id));
    return json{{"deleted", 1}};
  }
  FaultRule r;
  std::string action = req.value("action", std::string());
  if (action == "drop")
    r.action = FaultRule::Action::kDrop;
  else if (action == "delay")
    r.action = FaultRule::Action::kDelay;
  else
    return Status(Code::kInvalidArgument, "action must be drop or delay, not '" + action + "'");
  auto src = nid_or_any(req, "src");
  if (!src.ok()) return src.status();
  auto dst = nid_or_any(req, "dst");
  if (!dst.ok()) return dst.status();
  r.src = *src;
  r.dst = *dst;
  if (req.contains("type") && req["type"].is_string()) {
    std::string name = req["type"].get<std::string>();
    r.msg_type = rpc_->type_by_name(name);
    if (!r.msg_type && name != "any")
      return Status(Code::kInvalidArgument, "unknown message type '" + name + "'");
  } else {
    r.msg_type = req.value("type", uint32_t{0});
  }
  r.rate = req.value("rate", uint64_t{0});
  double interval = req.value("interval", 0.0), latency = req.value("latency", 0.0);
  if (interval < 0 || latency < 0 || latency > 3600 || interval > 86400)
    return Status(Code::kInvalidArgument, "interval and latency must be >= 0 (seconds)");
  r.interval = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(interval));
  r.latency = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(latency));
  if ((r.rate > 0) == (r.interval.count() > 0))
    return Status(Code::kInvalidArgument, "give exactly one of --rate N or --interval SECONDS");
  if (r.action == FaultRule::Action::kDelay && r.latency.count() <= 0)
    return Status(Code::kInvalidArgument, "a delay rule needs --latency SECONDS > 0");
  std::string health = req.value("health", std::string("NONE"));
  bool found = false;
  for (int k = 0; k < kNumHealthKinds; ++k)
    if (health_kind_name(static_cast<HealthKind>(k)) == health) {
      r.health = static_cast<HealthKind>(k);
      found = true;
    }
  if (!found) return Status(Code::kInvalidArgument, "unknown health error kind '" + health + "'");
  if (r.action == FaultRule::Action::kDelay && r.health != HealthKind::kNone)
    return Status(Code::kInvalidArgument, "--health applies to drop rules only");
  r.id = net_->add_fault(r);
  return json{{"added", fault_json(r)}};
}

namespace {
// Keys that take effect at run time; every other key needs a restart.
bool runtime_key(const std::string& key) {
  return key.rfind("stats.", 0) == 0 || key == "node.log_level" ||
         key == "rpc.max_rpcs_in_flight" || key == "lnet.credits" || key == "lnet.peer_credits" ||
         key.rfind("tune.", 0) == 0;
}
}  // namespace

Result<json> Daemon::config_show() {
  std::lock_guard lk(cfg_mu_);
  json a = json::array();
  for (const auto& [k, v] : config_entries(cfg_))
    a.push_back({{"key", k}, {"value", v}, {"runtime", runtime_key(k)}});
  return json{{"config", a}};
}

json Daemon::apply_locked(Config next, bool refuse_restart_keys, Status* err) {
  auto before = config_entries(cfg_), after = config_entries(next);
  json changed = json::array(), later = json::array();
  for (size_t i = 0; i < std::max(before.size(), after.size()); ++i) {
    bool same = i < before.size() && i < after.size() && before[i] == after[i];
    if (same) continue;
    const std::string& key = i < after.size() ? after[i].first : before[i].first;
    if (!runtime_key(key)) {
      if (refuse_restart_keys) {
        *err = Status(Code::kInvalidArgument,
                      "key '" + key +
                          "' cannot change at run time: edit the config file and restart pfsnetd");
        return json();
      }
      later.push_back(key);
      continue;
    }
    changed.push_back({{"key", key}, {"from", before[i].second}, {"to", after[i].second}});
  }
  stats_->set_config(next.stats);
  (void)init_logging(next.node.log_level);
  if (next.lnet.credits != cfg_.lnet.credits || next.lnet.peer_credits != cfg_.lnet.peer_credits)
    net_->set_credits(next.lnet.credits, next.lnet.peer_credits);
  if (next.rpc.max_rpcs_in_flight != cfg_.rpc.max_rpcs_in_flight)
    rpc_->set_max_rpcs_in_flight(next.rpc.max_rpcs_in_flight);
  for (const json& c : changed)
    PFS_LOG_INFO("config: {} changed from {} to {}", c["key"].get<std::string>(),
                 c["from"].get<std::string>(), c["to"].get<std::string>());
  for (const json& k : later)
    PFS_LOG_WARN("config: {} changed in the file; it takes effect at the next restart",
                 k.get<std::string>());
  // Keep what is in force: restart-only keys stay as they were.
  Config in_force = cfg_;
  in_force.stats = next.stats;
  in_force.node.log_level = next.node.log_level;
  in_force.lnet.credits = next.lnet.credits;
  in_force.lnet.peer_credits = next.lnet.peer_credits;
  in_force.rpc.max_rpcs_in_flight = next.rpc.max_rpcs_in_flight;
  in_force.tune = next.tune;  // the tuning thread reads it on its next round
  cfg_ = std::move(in_force);
  *err = Status::Ok();
  return json{{"changed", changed}, {"at_restart", later}};
}

Result<json> Daemon::config_set(const json& req) {
  std::vector<std::string> assignments = req.value("set", std::vector<std::string>{});
  if (assignments.empty()) return Status(Code::kInvalidArgument, "nothing to set (KEY=VALUE ...)");
  std::lock_guard lk(cfg_mu_);
  Config next = cfg_;
  Status s = apply_config_assignments(&next, assignments);
  if (!s.ok()) return s;
  json r = apply_locked(std::move(next), true, &s);
  if (!s.ok()) return s;
  return r;
}

Status Daemon::reload(const std::string& path) {
  auto next = load_config(path);
  if (!next.ok()) {
    PFS_LOG_ERROR("config reload refused, the old settings stay: {}", next.status().message());
    return next.status();
  }
  std::lock_guard lk(cfg_mu_);
  Status s;
  apply_locked(std::move(*next), false, &s);
  PFS_LOG_INFO("config reloaded from {}", path);
  return s;
}

std::string Daemon::metrics_text() {
  StatsQuery q;
  q.what = StatsQuery::What::kAll;
  q.granularity = Granularity::kSecond;
  q.last = 60;
  return prometheus_metrics(net_->nis(), net_->peers(), stats_->query(q),
                            [this](uint32_t t) { return rpc_->type_name(t); }) +
         tune_metrics();
}

void PromText::family(const std::string& name, const char* type, const char* help) {
  out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void PromText::sample(const std::string& name, const std::string& labels, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.9g", v);
  out_ += labels.empty() ? name + " " + b + "\n" : name + "{" + labels + "} " + b + "\n";
}

std::string prometheus_metrics(const std::vector<NiInfo>& nis, const std::vector<NiInfo>& peers,
                               const StatsReport& rep,
                               const std::function<std::string(uint32_t)>& type_name) {
  PromText text;
  struct Counter {
    const char* suffix;
    const char* type;
    const char* help;
    std::function<double(const NiInfo&)> get;
  };
  const Counter counters[] = {
      {"sent_messages_total", "counter", "Messages sent.",
       [](const NiInfo& i) { return double(i.send_count); }},
      {"sent_bytes_total", "counter", "Bytes sent, frame headers included.",
       [](const NiInfo& i) { return double(i.send_bytes); }},
      {"received_messages_total", "counter", "Messages received.",
       [](const NiInfo& i) { return double(i.recv_count); }},
      {"received_bytes_total", "counter", "Bytes received, frame headers included.",
       [](const NiInfo& i) { return double(i.recv_bytes); }},
      {"local_timeouts_total", "counter",
       "Sends that passed their deadline before leaving the queue (local).",
       [](const NiInfo& i) { return double(i.local_timeouts); }},
      {"remote_timeouts_total", "counter",
       "Sends or replies that did not complete by their deadline once sent (remote).",
       [](const NiInfo& i) { return double(i.remote_timeouts); }},
      {"resends_total", "counter", "Messages that failed here and were sent again.",
       [](const NiInfo& i) { return double(i.resends); }},
      {"drops_total", "counter", "Frames dropped (misaddressed, or by fault injection).",
       [](const NiInfo& i) { return double(i.drops); }},
      {"faults_total", "counter", "Messages dropped or delayed by fault injection.",
       [](const NiInfo& i) { return double(i.faults); }},
      {"credit_waits_total", "counter",
       "Sends that queued because the connection's window or the NI's credits were used up.",
       [](const NiInfo& i) { return double(i.credit_waits); }},
      {"last_change_timestamp_seconds", "gauge",
       "Time of the last state change (up/down, healthy/unhealthy), Unix seconds.",
       [](const NiInfo& i) { return double(i.last_change_unix_ms) / 1000.0; }},
      {"credits", "gauge", "Credits available now.",
       [](const NiInfo& i) { return double(i.credits); }},
      {"credits_max", "gauge", "Credits configured.",
       [](const NiInfo& i) { return double(i.credits_max); }},
      {"credits_min", "gauge", "Low-water mark of available credits.",
       [](const NiInfo& i) { return double(i.credits_min); }},
      {"queued", "gauge", "Sends waiting for a connection or credits.",
       [](const NiInfo& i) { return double(i.queued); }},
      {"health", "gauge", "Health value (1000 = healthy).",
       [](const NiInfo& i) { return double(i.health); }},
      {"up", "gauge", "1 when up (NI) or connected (peer NI).",
       [](const NiInfo& i) { return i.up ? 1.0 : 0.0; }},
  };
  for (const char* scope : {"ni", "peer"}) {
    const auto& list = std::string(scope) == "ni" ? nis : peers;
    for (const Counter& c : counters) {
      std::string name = std::string("pfsnet_") + scope + "_" + c.suffix;
      text.family(name, c.type, c.help);
      for (const NiInfo& i : list) text.sample(name, "nid=\"" + i.nid.to_string() + "\"", c.get(i));
    }
    std::string name = std::string("pfsnet_") + scope + "_errors_total";
    text.family(name, "counter", "Failures by LNet health error kind.");
    for (const NiInfo& i : list)
      for (int k = 1; k < kNumHealthKinds; ++k)
        text.sample(name,
                    "nid=\"" + i.nid.to_string() + "\",kind=\"" +
                        std::string(health_kind_name(static_cast<HealthKind>(k))) + "\"",
                    double(i.errors[k]));
  }
  text.family("pfsnet_rpc_raw_dropped_total", "counter",
              "Raw statistics records dropped (buffer full).");
  text.sample("pfsnet_rpc_raw_dropped_total", "buffer=\"stat\"", double(rep.dropped_stat));
  text.sample("pfsnet_rpc_raw_dropped_total", "buffer=\"exec\"", double(rep.dropped_exec));

  // RPC statistics over the last 60 one-second intervals.
  struct Row {
    std::string labels;
    const StatView* v;
  };
  std::vector<std::pair<std::string, std::vector<Row>>> groups(3);
  groups[0].first = "pfsnet_rpc_node";
  groups[1].first = "pfsnet_rpc_size";
  groups[2].first = "pfsnet_rpc_message";
  for (const NodeReport& n : rep.nodes) {
    auto nid = Nid::unpack(n.node);
    std::string id = nid.ok() ? nid->to_string() : std::to_string(n.node);
    for (const auto& [k, v] : n.stats)
      groups[0].second.push_back(
          {"nid=\"" + id + "\",stat=\"" + std::string(node_stat_name(k)) + "\"", &v});
  }
  for (const SizeReport& s : rep.sizes)
    groups[1].second.push_back({"low=\"" + std::to_string(s.low) + "\",high=\"" +
                                    std::to_string(s.high) + "\",stat=\"latency\"",
                                &s.latency});
  for (const MessageReport& m : rep.messages)
    groups[2].second.push_back(
        {"type=\"" + type_name(m.type) + "\",stat=\"execution\"", &m.execution});
  for (const auto& [prefix, rows] : groups) {
    text.family(prefix + "_count", "gauge", "RPCs in the last 60 seconds.");
    for (const Row& r : rows) {
      int64_t n = 0;
      for (const IntervalView& i : r.v->seconds) n += i.count;
      text.sample(prefix + "_count", r.labels, double(n));
    }
    const char* what[] = {"avg", "min", "max"};
    for (int w = 0; w < 3; ++w) {
      std::string name = prefix + "_" + what[w] + "_seconds";
      text.family(name, "gauge", "Average, minimum or maximum over the last 60 seconds.");
      for (const Row& r : rows) {
        double sum = 0, mn = 0, mx = 0;
        int64_t n = 0;
        for (const IntervalView& i : r.v->seconds) {
          if (!i.count) continue;
          mn = n ? std::min(mn, i.min_ms) : i.min_ms;
          mx = std::max(mx, i.max_ms);
          sum += i.avg_ms * double(i.count);
          n += i.count;
        }
        double v = w == 0 ? (n ? sum / double(n) : 0) : w == 1 ? mn : mx;
        text.sample(name, r.labels, v / 1000.0);
      }
    }
  }
  return text.take();
}

Result<json> Daemon::ping(const json& req, const AdminEmit& emit) {
  auto nid = Nid::parse(req.value("nid", std::string()));
  if (!nid.ok()) return nid.status();
  int64_t count = req.value("count", int64_t(1));
  int64_t size = req.value("size", int64_t(0));
  double timeout_s = req.value("timeout", double(cfg_.lnet.transaction_timeout));
  if (count < 1 || count > 1'000'000)
    return Status(Code::kInvalidArgument, "count must be 1..1000000");
  if (size < 0 || size > cfg_.max_bulk())
    return Status(Code::kInvalidArgument,
                  "size must be 0.." + std::to_string(cfg_.max_bulk()) + " (2 x maxBlockSize)");
  if (!(timeout_s > 0)) return Status(Code::kInvalidArgument, "timeout must be positive");
  double interval_s = req.value("interval", 0.0);
  if (!(interval_s >= 0 && interval_s <= 60))
    return Status(Code::kInvalidArgument, "interval must be 0..60 seconds");
  timeout_s = std::min<double>(timeout_s, double(cfg_.lnet.transaction_timeout));
  std::string mode = req.value("mode", std::string("echo"));
  if (mode != "echo" && mode != "write" && mode != "read")
    return Status(Code::kInvalidArgument, "mode must be echo, write or read");
  // echo: PING with the data both ways; write: BRW_WRITE (data to the peer, checked
  // there); read: BRW_READ (data from the peer).
  uint32_t type = mode == "echo" ? kMsgPing : mode == "write" ? kMsgBrwWrite : kMsgBrwRead;
  BulkData data =
      size && mode != "read" ? make_bulk(make_ping_pattern(static_cast<size_t>(size))) : nullptr;
  size_t expect = mode == "write" ? 0 : static_cast<size_t>(size);
  CallOptions co{std::chrono::duration_cast<Duration>(std::chrono::duration<double>(timeout_s))};

  int64_t ok = 0, failed = 0;
  double mn = 0, mx = 0, sum = 0, total_max = 0;
  json errors = json::object();
  for (int64_t seq = 1; seq <= count; ++seq) {
    if (seq > 1 && interval_s > 0)  // pacing, as ping -i: not a synchronization
      std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    Buffer payload = mode == "read" ? ping_payload(static_cast<uint32_t>(size)) : Buffer();
    RpcReply r = rpc_->call(*nid, type, std::move(payload), data, co);
    Status st = r.status;
    // From submission to the end: includes waiting and resends, which rtt does not.
    double total_ms = to_ms(clock_.now() - r.times.submit);
    total_max = std::max(total_max, total_ms);
    if (st.ok() && (r.bulk.size() != expect || !check_ping_pattern(r.bulk.span())))
      st = Status(Code::kProtocol, "the data that came back is not what was sent");
    if (st.ok()) {
      double ms = to_ms(r.round_trip());
      mn = ok == 0 ? ms : std::min(mn, ms);
      mx = std::max(mx, ms);
      sum += ms;
      ++ok;
      if (!emit({{"event", "reply"},
                 {"seq", seq},
                 {"nid", nid->to_string()},
                 {"bytes", size},
                 {"rtt_ms", ms},
                 {"total_ms", total_ms}}))
        break;  // the client went away
    } else {
      ++failed;
      std::string kind(st.health_kind() != HealthKind::kNone ? health_kind_name(st.health_kind())
                                                             : code_name(st.code()));
      errors[kind] = errors.value(kind, 0) + 1;
      if (!emit({{"event", "error"},
                 {"seq", seq},
                 {"nid", nid->to_string()},
                 {"kind", kind},
                 {"error", st.message()},
                 {"total_ms", total_ms}}))
        break;
      if (st.code() == Code::kCancelled) break;  // shutting down
    }
  }
  return json{{"target", nid->to_string()},
              {"count", count},
              {"ok", ok},
              {"failed", failed},
              {"rtt_ms", {{"min", mn}, {"avg", ok ? sum / double(ok) : 0.0}, {"max", mx}}},
              {"total_max_ms", total_max},
              {"errors", errors}};
}

}  // namespace pfsnet
