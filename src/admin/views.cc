#include "admin/views.h"

#include <cmath>
#include <map>
#include <optional>

#include "wire/frame.h"

namespace pfsnet {

using nlohmann::json;

namespace {
double round3(double v) { return std::round(v * 1000) / 1000; }
}  // namespace

json tcp_kernel_info_json(const TcpKernelInfo& k) {
  double loss = k.segs_out ? double(k.total_retrans) / double(k.segs_out) : 0.0;
  return {{"rtt_ms", round3(k.rtt_us / 1000.0)},
          {"rttvar_ms", round3(k.rttvar_us / 1000.0)},
          {"min_rtt_ms", round3(k.min_rtt_us / 1000.0)},
          {"cwnd", k.snd_cwnd},
          {"mss", k.snd_mss},
          {"pmtu", k.pmtu},
          {"lost", k.lost},
          {"unacked", k.unacked},
          {"retransmitting", k.retransmitting},
          {"retransmits", k.total_retrans},
          {"segments_out", k.segs_out},
          {"retransmit_ratio", std::round(loss * 1e6) / 1e6},
          {"bytes_sent", k.bytes_sent},
          {"bytes_retransmitted", k.bytes_retrans},
          {"delivery_rate_bytes_s", k.delivery_rate},
          {"busy_ms", round3(double(k.busy_us) / 1000.0)},
          {"rwnd_limited_ms", round3(double(k.rwnd_limited_us) / 1000.0)},
          {"sndbuf_limited_ms", round3(double(k.sndbuf_limited_us) / 1000.0)},
          {"peer_window_bytes", k.snd_wnd},
          {"sndbuf_bytes", k.sndbuf},
          {"rcvbuf_bytes", k.rcvbuf}};
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
            {"connects", i.connects},
            {"connect_failures", i.connect_failures},
            {"reconnect_waits", i.reconnect_waits},
            {"errors", errors},
            {"last_change", format_unix_ms(i.last_change_unix_ms)},
            {"last_change_unix_ms", i.last_change_unix_ms},
            {"since_change_s", std::round(i.since_change_s * 1000) / 1000},
            {"recovery_pings", i.recovery_pings},
            {"next_recovery_s",
             i.next_recovery_s < 0 ? -1.0 : std::round(i.next_recovery_s * 1000) / 1000}};
  // Slowness: "" while not degraded.
  j["degraded"] = i.degraded;
  if (!i.degraded.empty()) {
    j["degraded_penalty"] = i.degraded_penalty;
    j["degraded_evidence"] = i.degraded_evidence;
    j["degraded_since"] = format_unix_ms(i.degraded_since_unix_ms);
    j["degraded_since_unix_ms"] = i.degraded_since_unix_ms;
  }
  if (!i.peer_nids.empty()) {
    json nids = json::array();
    for (const Nid& n : i.peer_nids) nids.push_back(n.to_string());
    j["peer_nids"] = nids;
    j["peer"] = i.peer.to_string();
    // What the connection speaks (0 and "" while none is open).
    j["wire_version"] = i.wire_version;
    j["wire_versions"] =
        i.wire_version ? std::to_string(i.peer_wire_min) + "-" + std::to_string(i.peer_wire_max)
                       : "";
    j["features"] = feature_names(i.features);
    j["release"] = i.release;
    j["cluster_key"] = i.cluster_key;
  }
  if (!i.paths.empty()) {
    json paths = json::array();
    for (const PathInfo& p : i.paths) {
      json pj = {{"local", p.local.to_string()},
                 {"kind", p.local.is_verbs() ? "verbs" : "tcp"},
                 {"send_count", p.send_count},
                 {"send_bytes", p.send_bytes},
                 {"recv_count", p.recv_count},
                 {"recv_bytes", p.recv_bytes},
                 {"connections", p.connections},
                 {"wire_version", p.wire_version},
                 {"features", feature_names(p.features)},
                 {"reconnect_interval_ms", p.reconnect_interval_ms},
                 {"next_connect_s",
                  p.next_connect_s < 0 ? -1.0 : std::round(p.next_connect_s * 1000) / 1000}};
      if (p.tcp) pj["tcp"] = tcp_kernel_info_json(*p.tcp);
      if (p.tcp_total)
        pj["tcp_total"] = {{"segments_out", p.tcp_total->segs_out},
                           {"retransmits", p.tcp_total->retrans},
                           {"bytes_sent", p.tcp_total->bytes_sent},
                           {"bytes_retransmitted", p.tcp_total->bytes_retrans}};
      paths.push_back(std::move(pj));
    }
    j["paths"] = paths;
  }
  return j;
}

json fault_json(const FaultRule& r) {
  auto ms = [](Duration d) {
    return double(std::chrono::duration_cast<std::chrono::microseconds>(d).count()) / 1000.0;
  };
  return {{"id", r.id},
          {"action", r.action == FaultRule::Action::kDrop    ? "drop"
                     : r.action == FaultRule::Action::kDelay ? "delay"
                                                             : "corrupt"},
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

json config_changes_json(const std::vector<ConfigChange>& c) {
  json a = json::array();
  for (const ConfigChange& x : c) a.push_back({{"key", x.key}, {"from", x.from}, {"to", x.to}});
  return a;
}

json config_applied_json(const ConfigApplied& a) {
  return {{"changed", config_changes_json(a.changed)}, {"at_restart", a.at_restart}};
}

json tune_report_json(const TuneReport& r) {
  json errors = json::object();
  for (const auto& [peer, why] : r.probe_errors) errors[peer] = why;
  constexpr double kMiB = 1024.0 * 1024.0;
  json peers = json::array();
  for (const PeerAdvice& p : r.advice.peers)
    peers.push_back({{"peer", p.m.peer},
                     {"rtt_ms", round3(p.m.rtt_ms)},
                     {"rtt_source", p.m.rtt_source},
                     {"bandwidth_mib_s", round3(p.m.bandwidth / kMiB)},
                     {"bandwidth_gbit_s", round3(p.m.bandwidth * 8 / 1e9)},
                     {"bandwidth_source", p.m.bandwidth_source},
                     {"throughput_mib_s", round3(p.m.throughput / kMiB)},
                     {"window_limited", p.m.window_limited},
                     {"rpc_bytes", static_cast<int64_t>(p.m.rpc_bytes)},
                     {"bdp_bytes", static_cast<int64_t>(p.bdp_bytes)},
                     {"bdp_mib", round3(p.bdp_bytes / kMiB)},
                     {"rpcs_needed", p.rpcs_needed},
                     {"rpcs_now", p.rpcs_now},
                     {"retransmit_ratio", std::round(p.m.retrans_ratio * 1e6) / 1e6},
                     {"probe_segments", p.m.probe_segments},
                     {"probe_retransmits", p.m.probe_retransmits},
                     {"lossy", p.lossy},
                     {"ceiling_mib_s", round3(p.ceiling / kMiB)}});
  auto setting = [](int64_t now, int64_t rec, const std::string& why) {
    return json{{"current", now}, {"recommended", rec}, {"why", why}};
  };
  // Peers with a max_rpcs_in_flight of their own, now or recommended (null: none).
  json own = json::array();
  std::map<std::string, std::pair<std::optional<int64_t>, std::optional<int64_t>>> peers_own;
  for (const auto& [peer, n] : r.current.peer_rpcs_in_flight) peers_own[peer].first = n;
  for (const auto& [peer, n] : r.advice.recommended.peer_rpcs_in_flight) peers_own[peer].second = n;
  for (const auto& [peer, v] : peers_own) {
    auto why = r.advice.why_peer_rpcs.find(peer);
    own.push_back({{"peer", peer},
                   {"current", v.first ? json(*v.first) : json(nullptr)},
                   {"recommended", v.second ? json(*v.second) : json(nullptr)},
                   {"why", why != r.advice.why_peer_rpcs.end()
                               ? why->second
                               : std::string("kept: the peer was not measured")}});
  }
  json problems = json::array();
  for (const TuneProblem& p : r.advice.problems)
    problems.push_back({{"problem", p.code}, {"peer", p.peer}, {"text", p.text}});
  json out = {
      {"peers", peers},
      {"active_peers", r.advice.active_peers},
      {"settings",
       {{"max_rpcs_in_flight", setting(r.current.max_rpcs_in_flight,
                                       r.advice.recommended.max_rpcs_in_flight, r.advice.why_rpcs)},
        {"peer_credits", setting(r.current.peer_credits, r.advice.recommended.peer_credits,
                                 r.advice.why_peer_credits)},
        {"peer_rpcs_in_flight", own},
        {"credits", setting(r.current.credits, r.advice.recommended.credits, r.advice.why_credits)},
        {"conns_per_peer", setting(r.current.conns_per_peer, r.advice.recommended.conns_per_peer,
                                   r.advice.why_conns)}}},
      {"problems", problems},
      {"probe_errors", errors},
      {"warmed_bytes", r.warmed_bytes},
      {"auto", r.auto_tune}};
  if (r.applied) out["applied"] = config_changes_json(*r.applied);
  return out;
}

json status_table_json(const StatusTable& t) {
  json nodes = json::array();
  for (const StatusNode& n : t.nodes) {
    json nids = json::array();
    for (const Nid& x : n.nids) nids.push_back(x.to_string());
    nodes.push_back({{"id", n.id},
                     {"name", n.name},
                     {"roles", roles_string(n.roles)},
                     {"nids", nids},
                     {"state", node_state_name(n.state)},
                     {"last_heard", format_unix_ms(n.last_heard_unix_ms)},
                     {"last_heard_s_ago", double(n.last_heard_ago_ms) / 1000.0},
                     {"heard_via", n.heard_by_report ? "report" : "ping"},
                     {"registered", format_unix_ms(n.registered_unix_ms)},
                     {"registered_unix_ms", n.registered_unix_ms},
                     {"last_change", format_unix_ms(n.last_change_unix_ms)},
                     {"release", n.release}});
  }
  const StatusCounters& c = t.counters;
  return {{"mgs", t.mgs.to_string()},
          {"releases_error", t.releases_error},
          {"generation", t.generation},
          {"total", t.total},
          {"offset", t.offset},
          {"nodes", nodes},
          {"counters",
           {{"registers", c.registers},
            {"pings", c.pings},
            {"reported", c.reported},
            {"notifications_sent", c.notifications_sent},
            {"notification_failures", c.notification_failures},
            {"notifications_dropped", c.notifications_dropped},
            {"events_delivered", c.events_delivered}}}};
}

json membership_counters_json(const MembershipCounters& m) {
  json j = json::object();
  if (m.agent) {
    const AgentCore::Counters& c = m.agent->counters;
    j["agent"] = {{"mgs", m.agent->mgs.to_string()},
                  {"registered", m.agent->registered},
                  {"registers", c.registers},
                  {"pings", c.pings},
                  {"skipped", c.skipped},
                  {"failovers", c.failovers},
                  {"unknown", c.unknown},
                  {"epoch", m.agent->epoch},
                  {"cluster_level", m.agent->cluster_level},
                  {"redirects", c.redirects},
                  {"stale", c.stale},
                  {"evictions", c.evictions}};
  }
  if (m.leadership) {
    const LeaderLease::View& v = m.leadership->view;
    const LeaderLease::Counters& c = m.leadership->counters;
    j["leadership"] = {
        {"role", role_name(v.role)},  {"epoch", v.epoch},         {"leader", v.leader},
        {"grants", c.grants},         {"campaigns", c.campaigns}, {"won", c.won},
        {"keepalives", c.keepalives}, {"failures", c.failures},   {"lease_lost", c.lease_lost}};
    const EtcdLeadership::TableCounters& tc = m.leadership->table;
    j["leadership"]["table"] = {{"loads", tc.loads},
                                {"chunks_loaded", tc.chunks_loaded},
                                {"saves", tc.saves},
                                {"chunks_saved", tc.chunks_saved},
                                {"save_failures", tc.save_failures}};
  }
  if (m.level)
    j["level"] = {
        {"level", m.level->level}, {"set_unix_ms", m.level->set_unix_ms}, {"by", m.level->by}};
  if (m.mgs) {
    const MgsCore::Counters& c = *m.mgs;
    j["mgs"] = {{"registers", c.registers},
                {"pings", c.pings},
                {"reported", c.reported},
                {"notifications_sent", c.notifications_sent},
                {"notification_failures", c.notification_failures},
                {"notifications_dropped", c.notifications_dropped},
                {"resyncs", c.resyncs},
                {"evicted_pings", c.evicted_pings},
                {"relays", c.relays},
                {"relayed", c.relayed},
                {"fenced", c.fenced}};
  }
  return j;
}

json health_json(const HealthList& h) {
  const std::vector<Problem>& problems = h.problems;
  const TableSummary* table = h.table ? &*h.table : nullptr;
  json list = json::array();
  for (const Problem& p : problems)
    list.push_back({{"kind", p.kind},
                    {"subject", p.subject},
                    {"cause", p.cause},
                    {"since", p.since_unix_ms ? format_unix_ms(p.since_unix_ms) : ""},
                    {"since_unix_ms", p.since_unix_ms},
                    {"seen_by", p.seen_by},
                    {"evidence", p.evidence},
                    {"code", p.code},
                    {"muted", p.muted}});
  size_t muted = 0;
  for (const Problem& p : problems) muted += p.muted ? 1 : 0;
  json j = {{"node", h.node},
            {"mgs", table ? table->mgs.to_string() : ""},
            {"nodes", table ? table->nodes : 0},
            {"nodes_up", table ? table->up : 0},
            {"problems", list},
            {"muted", muted},
            {"mutes", mutes_json(h.mutes)},
            {"judged_at", h.judged_at_mgs ? "mgs" : "node"}};
  if (h.left_off) j["problems_left_off"] = h.left_off;
  if (!h.mutes_error.empty()) j["mutes_error"] = h.mutes_error;
  return j;
}

json mutes_json(const std::vector<MuteState>& mutes) {
  json ms = json::array();
  for (const MuteState& s : mutes)
    ms.push_back({{"cause", s.mute.cause},
                  {"subject", s.mute.subject},
                  {"until", format_unix_ms(s.mute.until_unix_ms)},
                  {"until_unix_ms", s.mute.until_unix_ms},
                  {"sticky", s.mute.sticky},
                  {"by", s.mute.by},
                  {"covers", s.covers},
                  {"matched", s.mute.matched},
                  {"hides", s.hides},
                  {"reason", s.reason}});
  return ms;
}

json mesh_json(const MeshMatrix& m, const std::vector<std::vector<MeshMark>>& marks,
               const MeshService::Counters& c, const MeshOptions& o) {
  json rows = json::array();
  size_t outliers = 0;
  for (size_t i = 0; i < m.rows.size(); ++i) {
    const MeshRow& r = m.rows[i];
    json cells = json::array();
    for (size_t j = 0; j < r.cells.size(); ++j) {
      const MeshCell& x = r.cells[j];
      const std::string& why = marks[i][j].reason;
      outliers += why.empty() ? 0 : 1;
      cells.push_back({{"to", x.to},
                       {"local", x.local.to_string()},
                       {"peer", x.peer.to_string()},
                       {"sent", x.sent},
                       {"lost", x.lost},
                       {"rtt_count", x.rtt_count},
                       {"p50_ms", round3(x.p50_ms)},
                       {"p99_ms", round3(x.p99_ms)},
                       {"write_mib_s", std::round(x.write_mib_s * 10) / 10},
                       {"read_mib_s", std::round(x.read_mib_s * 10) / 10},
                       {"local_mtu", x.local_mtu},
                       {"peer_mtu", x.peer_mtu},
                       {"on_link", x.on_link},
                       {"outlier", why}});
    }
    json nis = json::array();
    for (const MeshNi& n : r.nis)
      nis.push_back({{"nid", n.nid.to_string()},
                     {"speed_mbit", n.speed_mbit},
                     {"tx_peak_mib_s", n.tx_mib_s},
                     {"rx_peak_mib_s", n.rx_mib_s}});
    rows.push_back(
        {{"from", r.from}, {"updated_unix_ms", r.updated_unix_ms}, {"cells", cells}, {"nis", nis}});
  }
  auto secs = [](Duration d) { return std::chrono::duration<double>(d).count(); };
  return {{"mgs", m.mgs != Nid() ? m.mgs.to_string() : std::string()},
          {"epoch", m.epoch},
          {"rows", rows},
          {"outliers", outliers},
          {"local",
           {{"probes", c.probes},
            {"lost", c.lost},
            {"bulk_bytes", c.bulk_bytes},
            {"syncs", c.syncs},
            {"sync_failures", c.sync_failures},
            {"epoch", c.epoch},
            {"targets", c.targets},
            {"paths", c.paths},
            {"peers", o.peers},
            {"interval_s", secs(o.interval)},
            {"bulk_interval_s", secs(o.bulk_interval)},
            {"bulk_bytes_each", o.bulk_bytes},
            {"window_s", secs(o.window)}}}};
}

json netverify_json(const NetverifyReport& r) {
  constexpr double kMiB = 1024.0 * 1024.0;
  json nodes = json::array();
  int passed = 0, failed = 0;
  for (const NetverifyNode& n : r.nodes) {
    json paths = json::array();
    for (size_t i = 0; i < n.paths.size(); ++i) {
      const NvPath& p = n.paths[i];
      json checks = json::array();
      bool bad = false;
      for (const NvCheck& c : n.checks[i]) {
        bad = bad || c.verdict == NvVerdict::kFail;
        checks.push_back(
            {{"check", c.name}, {"result", nv_verdict_name(c.verdict)}, {"detail", c.detail}});
      }
      (bad ? failed : passed)++;
      uint32_t peer_mtu = 0;
      if (p.info)
        for (const NvNi& x : p.info->nis)
          if (x.nid == p.peer) peer_mtu = x.mtu;
      json fig = {{"rtt_ms", p.rtt_ms},
                  {"write_mib_s", p.write_bps / kMiB},
                  {"read_mib_s", p.read_bps / kMiB},
                  {"mtu_out", p.fwd.largest_ok},
                  {"mtu_back", p.rev.largest_ok},
                  {"local_mtu", p.local_mtu},
                  {"peer_mtu", peer_mtu}};
      if (p.clock) {
        fig["clock_offset_ms"] = p.clock->offset_ms;
        fig["clock_error_ms"] = p.clock->error_ms;
      }
      json via = json::array();
      for (const Nid& g : p.via) via.push_back(g.to_string());
      paths.push_back({{"local", p.local.to_string()},
                       {"peer", p.peer.to_string()},
                       {"via", via},
                       {"local_if", p.local_if},
                       {"failed", bad},
                       {"checks", checks},
                       {"figures", fig}});
    }
    if (!n.error.empty()) ++failed;
    nodes.push_back({{"name", n.name}, {"state", n.state}, {"error", n.error}, {"paths", paths}});
  }
  const NvLimits& l = r.limits;
  return {{"node", r.node},
          {"limits",
           {{"max_clock_offset_ms", l.max_clock_offset_ms},
            {"max_rtt_ms", l.max_rtt_ms},
            {"min_bandwidth_mib", l.min_bandwidth_mib},
            {"max_bandwidth_asymmetry", l.max_bandwidth_asymmetry}}},
          {"passed", passed},
          {"failed", failed},
          {"nodes", nodes}};
}

json upgrade_json(const UpgradeRep& r) {
  json nodes = json::array();
  for (const NodeLevel& n : r.nodes)
    nodes.push_back({{"id", n.id},
                     {"name", n.name},
                     {"state", node_state_name(n.state)},
                     {"level", n.level},
                     {"release", n.release}});
  json features = json::array();
  for (const LevelFeature& f : features_between(r.level, r.target))
    features.push_back(
        {{"level", f.level}, {"name", f.name}, {"what", f.what}, {"breaks", f.breaks}});
  return {{"level", r.level},           {"mgs_level", r.mgs_level}, {"target", r.target},
          {"committed", r.committed},   {"refusal", r.refusal},     {"total", r.total},
          {"below", r.below},           {"nodes", nodes},           {"features", features},
          {"this_level", kReleaseLevel}};
}

json ops_json(const std::vector<Op>& ops, const TypeNames& names, TimePoint now,
              int64_t wall_now_unix_ms) {
  auto ms = [](Duration d) { return static_cast<double>(d.count()) / 1e6; };
  json a = json::array();
  for (const Op& op : ops) {
    json j = {{"side", op.client ? "client" : "server"},
              {"xid", op.xid},
              {"type", names.name(op.type)},
              {"peer", op.peer.to_string()},
              {"job", op.job},
              {"trace", op.trace ? op.trace->to_string() : std::string()},
              {"phase", op_phase_name(op.phase)},
              {"attempts", op.attempts},
              {"detail", op.detail}};
    if (op.phase == OpPhase::kDone) {
      j["duration_ms"] = ms(op.ended - op.started);
      j["status"] = op.status.ok() ? std::string("OK") : op.status.to_string();
      j["ended_unix_ms"] = wall_now_unix_ms - static_cast<int64_t>(ms(now - op.ended));
      json ev = json::array();
      for (const OpEvent& e : op.events)
        ev.push_back({{"at_ms", ms(e.at - op.started)}, {"what", e.what}});
      j["events"] = ev;
      if (op.blame)
        j["blame"] = {{"slot_ms", ms(op.blame->slot)},
                      {"net_wait_ms", ms(op.blame->net_wait)},
                      {"wire_ms", ms(op.blame->wire)},
                      {"server_queue_ms", ms(op.blame->server_queue)},
                      {"server_exec_ms", ms(op.blame->server_exec)},
                      {"verdict", op.blame->verdict}};
    } else {
      j["age_ms"] = ms(now - op.started);
      j["in_phase_ms"] = ms(now - op.phase_since);
      j["verdict"] = op_verdict_now(op, now);  // whose it is now (SLOW_OPS's evidence)
    }
    a.push_back(std::move(j));
  }
  return a;
}

json job_view_json(const JobStats::View& v, const TypeNames& names, TimePoint now,
                   int64_t wall_now_unix_ms) {
  auto ms = [](double ns) { return ns / 1e6; };
  auto wall = [&](TimePoint t) {
    return t == TimePoint{}
               ? int64_t{0}
               : wall_now_unix_ms -
                     std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count();
  };
  auto entry = [&](const JobEntry& e) {
    json types = json::array();
    for (const auto& [type, c] : e.types)
      types.push_back({{"type", names.name(type)},
                       {"rpcs", c.rpcs},
                       {"bytes_in", c.bytes_in},
                       {"bytes_out", c.bytes_out}});
    return json{{"key", e.key},
                {"rpcs", e.rpcs},
                {"bytes_in", e.bytes_in},
                {"bytes_out", e.bytes_out},
                {"exec_ms", ms(double(e.exec_ns))},
                {"queue_ms", ms(double(e.queue_ns))},
                {"p50_ms", ms(double(e.exec.quantile(0.5)))},
                {"p99_ms", ms(double(e.exec.quantile(0.99)))},
                {"first_unix_ms", wall(e.first)},
                {"last_unix_ms", wall(e.last)},
                {"keys", e.keys},
                {"types", types}};
  };
  json top = json::array();
  for (const JobEntry& e : v.top) top.push_back(entry(e));
  return {{"top", top},
          {"other", entry(v.other)},
          {"kept", v.kept},
          {"overflow_keys", v.overflow_keys},
          {"memory_bytes", v.memory_bytes}};
}

}  // namespace pfsnet
