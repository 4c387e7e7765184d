#include "admin/prometheus.h"

#include <pfsnet/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "wire/frame.h"

namespace pfsnet {

void PromText::family(const std::string& name, const char* type, const char* help) {
  out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

std::string prom_number(double v) {
  char b[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(b, sizeof(b), "%.0f", v);
  else
    std::snprintf(b, sizeof(b), "%.15g", v);
  return b;
}

void PromText::sample(const std::string& name, const std::string& labels, double v) {
  std::string b = prom_number(v);
  out_ += labels.empty() ? name + " " + b + "\n" : name + "{" + labels + "} " + b + "\n";
}

WindowSummary summarize_seconds(const StatView& v) {
  WindowSummary s;
  double sum = 0;
  for (const IntervalView& i : v.seconds) {
    if (!i.count) continue;
    s.min_ms = s.count ? std::min(s.min_ms, i.min_ms) : i.min_ms;
    s.max_ms = std::max(s.max_ms, i.max_ms);
    sum += i.avg_ms * double(i.count);
    s.count += i.count;
  }
  s.avg_ms = s.count ? sum / double(s.count) : 0;
  return s;
}

namespace {

// A label's value with the bytes that could end it escaped (a peer's release, a job id: the
// words of others).
std::string label_escaped(std::string_view v) {
  std::string out;
  for (char ch : v) {
    if (ch == '\\' || ch == '"') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out;
}

// Routes (one series per route) and, on a router, what it forwarded and its buffers
// (routerstat's figures).
void route_metrics(PromText& t, const std::vector<RouteInfo>& routes, const RouterStats& r) {
  if (!routes.empty()) {
    auto l = [](const RouteInfo& i) {
      return "net=\"" + lnet_net_name(i.route.net) + "\",gateway=\"" + i.route.gateway.to_string() +
             "\"";
    };
    t.family("pfsnet_route_usable", "gauge",
             "1 while the route's gateway may be chosen (reachable, not backing off, not dead).");
    for (const RouteInfo& i : routes) t.sample("pfsnet_route_usable", l(i), i.usable ? 1 : 0);
    t.family("pfsnet_route_hops", "gauge", "The route's hops.");
    for (const RouteInfo& i : routes) t.sample("pfsnet_route_hops", l(i), double(i.route.hops));
    t.family("pfsnet_route_queued", "gauge",
             "Messages waiting at this node for the route's gateway (a credit, its window, a "
             "connection).");
    for (const RouteInfo& i : routes) t.sample("pfsnet_route_queued", l(i), double(i.queued));
    t.family("pfsnet_route_priority", "gauge", "The route's priority (lower is preferred).");
    for (const RouteInfo& i : routes)
      t.sample("pfsnet_route_priority", l(i), double(i.route.priority));
  }
  t.family("pfsnet_routed_frames_total", "counter",
           "Frames of this node's own sent through a router, and routed frames received here.");
  t.sample("pfsnet_routed_frames_total", "direction=\"sent\"", double(r.sent_routed));
  t.sample("pfsnet_routed_frames_total", "direction=\"received\"", double(r.received_routed));
  t.family("pfsnet_router_dropped_total", "counter",
           "Routed frames for other nodes this node dropped, by reason.");
  t.sample("pfsnet_router_dropped_total", "reason=\"not_router\"", double(r.dropped_not_router));
  if (!r.routing) return;
  t.sample("pfsnet_router_dropped_total", "reason=\"no_route\"", double(r.dropped_no_route));
  t.sample("pfsnet_router_dropped_total", "reason=\"failed\"", double(r.dropped_failed));
  t.sample("pfsnet_router_dropped_total", "reason=\"loop\"", double(r.dropped_loop));
  t.sample("pfsnet_router_dropped_total", "reason=\"no_window\"", double(r.dropped_no_window));
  t.family("pfsnet_router_forwarded_frames_total", "counter", "Frames forwarded for others.");
  t.sample("pfsnet_router_forwarded_frames_total", "", double(r.forwarded));
  t.family("pfsnet_router_forwarded_bytes_total", "counter",
           "Bytes forwarded for others (headers, payload and bulk).");
  t.sample("pfsnet_router_forwarded_bytes_total", "", double(r.forwarded_bytes));
  t.family("pfsnet_router_corrupt_total", "counter",
           "Frames whose data failed its checksum on the hop into this router (forwarded as "
           "they came, for their destination to refuse).");
  t.sample("pfsnet_router_corrupt_total", "", double(r.corrupt));
  // One series per pool (tiny, small, large) of each of its figures.
  struct PoolFamily {
    const char *name, *type, *help;
    double (*get)(const RouterPoolStats&);
  };
  static constexpr PoolFamily kPoolFamilies[] = {
      {"pfsnet_router_buffers", "gauge",
       "Router buffers of each pool (lnet.tiny/small/large_router_buffers).",
       [](const RouterPoolStats& p) { return double(p.buffers); }},
      {"pfsnet_router_buffers_in_use", "gauge", "Router buffers held by frames now.",
       [](const RouterPoolStats& p) { return double(p.in_use); }},
      {"pfsnet_router_buffers_min_free", "gauge",
       "The fewest free a pool has had (negative: frames waited for one).",
       [](const RouterPoolStats& p) { return double(p.min_free); }},
      {"pfsnet_router_buffer_waits_total", "counter", "Frames that waited for a buffer.",
       [](const RouterPoolStats& p) { return double(p.waits); }},
  };
  for (const PoolFamily& f : kPoolFamilies) {
    t.family(f.name, f.type, f.help);
    for (size_t i = 0; i < kRouterPools; ++i)
      t.sample(f.name, "pool=\"" + std::string(router_pool_name(RouterPool(i))) + "\"",
               f.get(r.pools[i]));
  }
  t.family("pfsnet_router_held_bytes", "gauge",
           "Bytes of frames held to forward now (in buffers or waiting for one).");
  t.sample("pfsnet_router_held_bytes", "", double(r.held_bytes));
  t.family("pfsnet_router_held_bytes_max", "gauge", "The most bytes held to forward at once.");
  t.sample("pfsnet_router_held_bytes_max", "", double(r.held_bytes_max));
  t.family("pfsnet_router_peer_credit_waits_total", "counter",
           "Frames that waited for a router credit of their peer (lnet.peer_buffer_credits).");
  t.sample("pfsnet_router_peer_credit_waits_total", "", double(r.peer_waits));
}

// The top K jobs and clients of this server (stats/job_stats.h) and one `other` series each
// (label value "__other__"): at most K + 1 series per family, however many jobs there are.
void job_metrics(PromText& t, const JobStats::View& jobs, const JobStats::View& clients) {
  struct Table {
    const char* what;  // "job", "client"
    const JobStats::View& v;
  };
  for (const Table& tb : {Table{"job", jobs}, Table{"client", clients}}) {
    const std::string p = std::string("pfsnet_") + tb.what;
    std::vector<std::pair<std::string, const JobEntry*>> rows;
    for (const JobEntry& e : tb.v.top)
      rows.emplace_back(std::string(tb.what) + "=\"" + label_escaped(e.key) + "\"", &e);
    rows.emplace_back(std::string(tb.what) + "=\"__other__\"", &tb.v.other);
    t.family(p + "_rpcs_total", "counter",
             "RPCs this server answered, per top job or client by bytes (stats.metrics_top_jobs) "
             "and __other__ for the rest.");
    for (const auto& [l, e] : rows) t.sample(p + "_rpcs_total", l, double(e->rpcs));
    t.family(p + "_bytes_total", "counter",
             "Bytes of requests (in) and replies (out), payload and bulk.");
    for (const auto& [l, e] : rows) {
      t.sample(p + "_bytes_total", l + ",direction=\"in\"", double(e->bytes_in));
      t.sample(p + "_bytes_total", l + ",direction=\"out\"", double(e->bytes_out));
    }
    t.family(p + "_exec_seconds_total", "counter", "Time its requests' handlers ran.");
    for (const auto& [l, e] : rows)
      t.sample(p + "_exec_seconds_total", l, double(e->exec_ns) / 1e9);
    t.family(p + "_queue_seconds_total", "counter", "Time its requests waited for a worker.");
    for (const auto& [l, e] : rows)
      t.sample(p + "_queue_seconds_total", l, double(e->queue_ns) / 1e9);
    t.family(p + "_stats_entries", "gauge",
             "Entries counted one by one (at most stats.job_stats_max).");
    t.sample(p + "_stats_entries", "", double(tb.v.kept));
    t.family(p + "_stats_overflow_total", "counter",
             "Distinct ids counted straight into __other__: the table was full.");
    t.sample(p + "_stats_overflow_total", "", double(tb.v.overflow_keys));
  }
}

void tune_metrics(PromText& t, const TuneStatus& s) {
  t.family("pfsnet_tune_settings_fit", "gauge",
           "1 when the last check found the settings fit the measured RTT, bandwidth and peers.");
  t.sample("pfsnet_tune_settings_fit", "", s.active.empty() ? 1 : 0);
  t.family("pfsnet_tune_problem", "gauge",
           "A reason the settings do not fit, from the last check (1 while it holds).");
  for (const TuneProblem& p : s.active)
    t.sample("pfsnet_tune_problem", "problem=\"" + p.code + "\",peer=\"" + p.peer + "\"", 1);
  t.family("pfsnet_tune_warnings_total", "counter",
           "Warning events: the settings stopped fitting the measured paths.");
  t.sample("pfsnet_tune_warnings_total", "", double(s.warnings));
  t.family("pfsnet_tune_autotune_changes_total", "counter", "Settings changed by auto-tune.");
  t.sample("pfsnet_tune_autotune_changes_total", "", double(s.autotune_changes));
  if (!s.last_advice) return;
  const Advice& a = *s.last_advice;
  t.family("pfsnet_tune_recommended", "gauge", "The advisor's value for a setting.");
  t.sample("pfsnet_tune_recommended", "setting=\"max_rpcs_in_flight\"",
           double(a.recommended.max_rpcs_in_flight));
  t.sample("pfsnet_tune_recommended", "setting=\"peer_credits\"",
           double(a.recommended.peer_credits));
  t.sample("pfsnet_tune_recommended", "setting=\"credits\"", double(a.recommended.credits));
  t.family("pfsnet_tune_peer_rtt_seconds", "gauge", "Measured round trip to a peer (0: unknown).");
  for (const PeerAdvice& p : a.peers)
    t.sample("pfsnet_tune_peer_rtt_seconds", "peer=\"" + p.m.peer + "\"", p.m.rtt_ms / 1000);
  t.family("pfsnet_tune_peer_bandwidth_bytes_per_second", "gauge",
           "Measured or configured bandwidth to a peer (0: unknown).");
  for (const PeerAdvice& p : a.peers)
    t.sample("pfsnet_tune_peer_bandwidth_bytes_per_second", "peer=\"" + p.m.peer + "\"",
             p.m.bandwidth);
  t.family("pfsnet_tune_peer_rpcs_in_flight", "gauge",
           "A peer's max_rpcs_in_flight at the last check (its own, or the node's).");
  for (const PeerAdvice& p : a.peers)
    t.sample("pfsnet_tune_peer_rpcs_in_flight", "peer=\"" + p.m.peer + "\"", double(p.rpcs_now));
  t.family("pfsnet_tune_peer_bdp_bytes", "gauge", "Bandwidth-delay product of the path to a peer.");
  for (const PeerAdvice& p : a.peers)
    t.sample("pfsnet_tune_peer_bdp_bytes", "peer=\"" + p.m.peer + "\"", p.bdp_bytes);
}

}  // namespace

namespace {

// Latency as Prometheus histograms, from every value since the statistic appeared: the
// upper bounds are powers of two of nanoseconds (4.1 us to 34 s), which are bounds of the
// statistics' own log-scale buckets, so each cumulative count is exact (a value counts
// below a bound when it is less than it).
void latency_histograms(PromText& text, const MetricsSnapshot& m) {
  struct Row {
    std::string labels;
    const StatTotal* t;
  };
  auto family = [&](const std::string& name, const char* help, const std::vector<Row>& rows) {
    text.family(name, "histogram", help);
    for (const Row& r : rows) {
      size_t next = 0;
      uint64_t below = 0;
      for (int k = kHistogramLowPow2; k <= kHistogramHighPow2; ++k) {
        int64_t bound = int64_t(1) << k;
        while (next < r.t->buckets.size() && r.t->buckets[next].first <= bound)
          below += r.t->buckets[next++].second;
        text.sample(name + "_bucket",
                    r.labels + ",le=\"" + prom_number(double(bound) * 1e-9) + "\"", double(below));
      }
      text.sample(name + "_bucket", r.labels + ",le=\"+Inf\"", double(r.t->count));
      text.sample(name + "_sum", r.labels, r.t->sum_ms / 1000.0);
      text.sample(name + "_count", r.labels, double(r.t->count));
    }
  };
  std::vector<Row> nodes, sizes, messages;
  for (const NodeReport& n : m.rpc.nodes) {
    std::string id = n.node.to_string();
    for (const auto& [k, v] : n.stats)
      if (k == NodeStat::kLatencyTcp || k == NodeStat::kLatencyVerbs ||
          k == NodeStat::kLatencyMixed)
        nodes.push_back(
            {"nid=\"" + id + "\",stat=\"" + std::string(node_stat_name(k)) + "\"", &v.total});
  }
  for (const SizeReport& s : m.rpc.sizes)
    sizes.push_back(
        {"low=\"" + std::to_string(s.low) + "\",high=\"" + std::to_string(s.high) + "\"",
         &s.latency.total});
  for (const MessageReport& msg : m.rpc.messages)
    messages.push_back({"type=\"" + m.type_name(msg.type) + "\"", &msg.execution.total});
  family("pfsnet_rpc_node_latency_seconds",
         "RPC latency (request sent to reply received) to a node, since it was first seen.", nodes);
  family("pfsnet_rpc_size_latency_seconds",
         "RPC latency per size range (bytes sent + received, or the larger when 16 times the "
         "other), since start.",
         sizes);
  family("pfsnet_rpc_message_execution_seconds",
         "Execution time of the requests served here, per message type, since start.", messages);
}

void membership_metrics(PromText& text, const MetricsSnapshot::Membership& m) {
  if (m.table) {
    const StatusTable& t = *m.table;
    text.family("pfsnet_membership_node_state", "gauge",
                "The MGS's state of each node: 1 for its state (up, suspect or dead), 0 for the "
                "others.");
    for (const StatusNode& n : t.nodes)
      for (NodeState s : {NodeState::kUp, NodeState::kSuspect, NodeState::kDead})
        text.sample("pfsnet_membership_node_state",
                    "node=\"" + n.name + "\",roles=\"" + roles_string(n.roles) + "\",state=\"" +
                        node_state_name(s) + "\"",
                    n.state == s ? 1 : 0);
    text.family("pfsnet_membership_node_last_heard_timestamp_seconds", "gauge",
                "When the MGS last heard from a node (its ping, or a server's report), Unix "
                "seconds.");
    for (const StatusNode& n : t.nodes)
      text.sample("pfsnet_membership_node_last_heard_timestamp_seconds", "node=\"" + n.name + "\"",
                  double(n.last_heard_unix_ms) / 1000.0);
    text.family("pfsnet_membership_node_last_change_timestamp_seconds", "gauge",
                "When a node's state last changed, Unix seconds.");
    for (const StatusNode& n : t.nodes)
      text.sample("pfsnet_membership_node_last_change_timestamp_seconds", "node=\"" + n.name + "\"",
                  double(n.last_change_unix_ms) / 1000.0);
    text.family("pfsnet_membership_nodes", "gauge", "Nodes in the MGS's table, by state.");
    for (NodeState s : {NodeState::kUp, NodeState::kSuspect, NodeState::kDead})
      text.sample("pfsnet_membership_nodes", std::string("state=\"") + node_state_name(s) + "\"",
                  double(std::count_if(t.nodes.begin(), t.nodes.end(),
                                       [&](const StatusNode& n) { return n.state == s; })));
  }
  if (m.counters.mgs) {
    const MgsCore::Counters& c = *m.counters.mgs;
    for (auto [name, help, v] :
         {std::tuple{"registers", "Registrations the MGS took.", c.registers},
          std::tuple{"pings", "Pings the MGS answered.", c.pings},
          std::tuple{"notifications_sent", "State notifications the MGS sent.",
                     c.notifications_sent},
          std::tuple{"notification_failures", "State notifications that failed.",
                     c.notification_failures},
          std::tuple{"verified_dead", "Nodes reported unreachable that the MGS found dead.",
                     c.verified_dead}}) {
      std::string n = std::string("pfsnet_membership_mgs_") + name + "_total";
      text.family(n, "counter", help);
      text.sample(n, "", double(v));
    }
  }
  if (m.counters.leadership) {
    const LeaderLease::View& v = m.counters.leadership->view;
    text.family("pfsnet_membership_leader", "gauge",
                "1 while this MGS leads (MGS leadership in etcd), 0 while it does not.");
    text.sample("pfsnet_membership_leader", "", v.role == LeaderLease::Role::kLeader ? 1 : 0);
    text.family("pfsnet_membership_epoch", "gauge",
                "The newest MGS leader epoch this MGS knows (the leader key's revision).");
    text.sample("pfsnet_membership_epoch", "", double(v.epoch));
  }
  // The cluster's minimum release level: the MGS's own, or as the MGS told this node.
  uint16_t level = m.counters.level ? m.counters.level->level : 0;
  if (m.counters.agent) level = std::max(level, m.counters.agent->cluster_level);
  if (level > 0) {
    text.family("pfsnet_cluster_release_level", "gauge",
                "The cluster's minimum release level (pfsnet upgrade): peers below it are "
                "refused.");
    text.sample("pfsnet_cluster_release_level", "", level);
  }
  if (m.counters.agent) {
    const MembershipCounters::Agent& a = *m.counters.agent;
    text.family("pfsnet_membership_registered", "gauge",
                "1 when this node is registered with its MGS (named by the label).");
    text.sample("pfsnet_membership_registered", "mgs=\"" + a.mgs.to_string() + "\"",
                a.registered ? 1 : 0);
    for (auto [name, help, v] :
         {std::tuple{"registers", "Registrations this node sent to an MGS.", a.counters.registers},
          std::tuple{"pings", "Pings this node sent to its MGS.", a.counters.pings},
          std::tuple{"failovers", "Times this node moved to another MGS.", a.counters.failovers}}) {
      std::string n = std::string("pfsnet_membership_agent_") + name + "_total";
      text.family(n, "counter", help);
      text.sample(n, "", double(v));
    }
  }
}

}  // namespace

std::string prometheus_text(const MetricsSnapshot& m) {
  const std::vector<NiInfo>& nis = m.nis;
  const std::vector<NiInfo>& peers = m.peers;
  const StatsReport& rep = m.rpc;
  PromText text;
  text.family("pfsnet_build_info", "gauge",
              "Always 1; the labels name this daemon's release and the commit it was built from.");
  text.sample(
      "pfsnet_build_info",
      "version=\"" + std::string(version()) + "\",commit=\"" + std::string(build_commit()) + "\"",
      1);
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
      {"connects_total", "counter", "Connects started (to a peer NI, or from this NI).",
       [](const NiInfo& i) { return double(i.connects); }},
      {"connect_failures_total", "counter", "Connects that failed (refused, unreachable).",
       [](const NiInfo& i) { return double(i.connect_failures); }},
      {"reconnect_waits_total", "counter",
       "Sends that waited for a backed-off reconnect (lnet.min_reconnect_ms).",
       [](const NiInfo& i) { return double(i.reconnect_waits); }},
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
    std::string degraded = std::string("pfsnet_") + scope + "_degraded";
    text.family(degraded, "gauge",
                "1 for an NI health calls degraded (cause SLOW, LOSSY or SERVER), with the "
                "health points selection takes off it; absent while not degraded.");
    for (const NiInfo& i : list)
      if (!i.degraded.empty())
        text.sample(degraded,
                    "nid=\"" + i.nid.to_string() + "\",cause=\"" + i.degraded + "\",penalty=\"" +
                        std::to_string(i.degraded_penalty) + "\"",
                    1);
    std::string name = std::string("pfsnet_") + scope + "_errors_total";
    text.family(name, "counter", "Failures by LNet health error kind.");
    for (const NiInfo& i : list)
      for (int k = 1; k < kNumHealthKinds; ++k)
        text.sample(name,
                    "nid=\"" + i.nid.to_string() + "\",kind=\"" +
                        std::string(health_kind_name(static_cast<HealthKind>(k))) + "\"",
                    double(i.errors[k]));
  }
  // The wire each peer's connection speaks (none while none is open); the release is the
  // peer's own words, so every byte that could end the label is escaped.
  text.family("pfsnet_peer_wire_version", "gauge",
              "The wire version the peer's connection speaks, with the features both ends use "
              "and the peer's release (empty from a version-1 peer); absent while none is open.");
  for (const NiInfo& i : peers) {
    if (i.wire_version == 0) continue;
    const std::string release = label_escaped(i.release);
    text.sample("pfsnet_peer_wire_version",
                "nid=\"" + i.nid.to_string() + "\",features=\"" + feature_names(i.features) +
                    "\",release=\"" + release + "\"",
                double(i.wire_version));
  }
  // What TCP hides, per path (local NI -> peer NI), from the kernel (TCP_INFO): gauges of
  // the path's busiest connection, counters over all its connections (reconnects too).
  struct TcpFigure {
    const char* name;
    const char* type;
    const char* help;
    std::function<double(const TcpKernelInfo&)> get;
  };
  const TcpFigure tcp_figures[] = {
      {"pfsnet_path_tcp_rtt_seconds", "gauge", "The kernel's smoothed round trip of the path.",
       [](const TcpKernelInfo& k) { return k.rtt_us / 1e6; }},
      {"pfsnet_path_tcp_rttvar_seconds", "gauge", "The variation of that round trip.",
       [](const TcpKernelInfo& k) { return k.rttvar_us / 1e6; }},
      {"pfsnet_path_tcp_lost_segments", "gauge", "Segments TCP considers lost now.",
       [](const TcpKernelInfo& k) { return double(k.lost); }},
      {"pfsnet_path_tcp_cwnd_segments", "gauge", "TCP's congestion window.",
       [](const TcpKernelInfo& k) { return double(k.snd_cwnd); }},
      {"pfsnet_path_tcp_delivery_rate_bytes_per_second", "gauge",
       "The kernel's latest estimate of the path's delivery rate.",
       [](const TcpKernelInfo& k) { return double(k.delivery_rate); }},
      {"pfsnet_path_tcp_pmtu_bytes", "gauge", "Path MTU as TCP sees it.",
       [](const TcpKernelInfo& k) { return double(k.pmtu); }},
  };
  for (const TcpFigure& f : tcp_figures) {
    text.family(f.name, f.type, f.help);
    for (const NiInfo& i : peers)
      for (const PathInfo& p : i.paths)
        if (p.tcp)
          text.sample(f.name,
                      "local=\"" + p.local.to_string() + "\",nid=\"" + i.nid.to_string() + "\"",
                      f.get(*p.tcp));
  }

  struct TcpTotal {
    const char* name;
    const char* help;
    uint64_t TcpTotals::*field;
  };
  const TcpTotal tcp_totals[] = {
      {"pfsnet_path_tcp_retransmits_total", "Segments TCP retransmitted, over all connections.",
       &TcpTotals::retrans},
      {"pfsnet_path_tcp_segments_sent_total",
       "Segments TCP sent, retransmits included, over all connections.", &TcpTotals::segs_out},
  };
  for (const auto& [name, help, field] : tcp_totals) {
    text.family(name, "counter", help);
    for (const NiInfo& i : peers)
      for (const PathInfo& p : i.paths)
        if (p.tcp_total)
          text.sample(name,
                      "local=\"" + p.local.to_string() + "\",nid=\"" + i.nid.to_string() + "\"",
                      double((*p.tcp_total).*field));
  }
  if (m.slowness) {
    text.family("pfsnet_health_degraded_events_total", "counter",
                "Times an NI was called degraded, by cause.");
    for (SlowCause c : {SlowCause::kSlow, SlowCause::kLossy, SlowCause::kServer})
      text.sample("pfsnet_health_degraded_events_total",
                  std::string("cause=\"") + slow_cause_name(c) + "\"",
                  double(m.slowness->degraded[static_cast<size_t>(c)]));
    text.family("pfsnet_health_degraded_seconds_total", "counter",
                "Seconds NIs stayed degraded, by cause, summed over the states that ended.");
    for (SlowCause c : {SlowCause::kSlow, SlowCause::kLossy, SlowCause::kServer})
      text.sample("pfsnet_health_degraded_seconds_total",
                  std::string("cause=\"") + slow_cause_name(c) + "\"",
                  m.slowness->degraded_seconds[static_cast<size_t>(c)]);
    // One sample each: the probes, and this node's CPU.
    const MetricsSnapshot::Slowness& sl = *m.slowness;
    for (const auto& [name, type, help, value] :
         {std::tuple{"pfsnet_health_probes_total", "counter",
                     "Probes sent to degraded peer NIs (which carry no traffic to recover by).",
                     double(sl.probes)},
          std::tuple{"pfsnet_cpu_wait_seconds_total", "counter",
                     "Seconds this node's threads waited for a CPU (runnable, not run), summed.",
                     sl.cpu_wait_seconds},
          std::tuple{"pfsnet_cpu_starved", "gauge", "1 while this node is starved of CPU.",
                     sl.cpu_starved ? 1.0 : 0.0},
          std::tuple{"pfsnet_cpu_starved_events_total", "counter",
                     "Times this node was called starved of CPU.", double(sl.cpu_starved_events)},
          std::tuple{"pfsnet_cpu_starved_seconds_total", "counter",
                     "Seconds this node stayed starved of CPU, summed over the states that ended.",
                     sl.cpu_starved_seconds}}) {
      text.family(name, type, help);
      text.sample(name, "", value);
    }
  }

  if (m.mesh) {
    text.family("pfsnet_mesh_probes_total", "counter", "Probes of the probe mesh sent.");
    text.sample("pfsnet_mesh_probes_total", "", double(m.mesh->probes));
    text.family("pfsnet_mesh_probes_lost_total", "counter",
                "Probes of the probe mesh that failed or timed out.");
    text.sample("pfsnet_mesh_probes_lost_total", "", double(m.mesh->lost));
    text.family("pfsnet_mesh_bulk_bytes_total", "counter",
                "Bytes the probe mesh's bulk probes moved, both ways.");
    text.sample("pfsnet_mesh_bulk_bytes_total", "", double(m.mesh->bulk_bytes));
    auto path = [](const MeshCell& c) {
      return "node=\"" + c.to + "\",local=\"" + c.local.to_string() + "\",peer=\"" +
             c.peer.to_string() + "\"";
    };
    const std::vector<MeshCell>& cells = m.mesh->row.cells;
    struct Gauge {
      const char* name;
      const char* help;
      double MeshCell::*field;
      double scale;
    };
    for (const Gauge& g :
         {Gauge{"pfsnet_mesh_rtt_p50_seconds",
                "Small-probe round trip of a probed path, median over the mesh window.",
                &MeshCell::p50_ms, 1e-3},
          Gauge{"pfsnet_mesh_rtt_p99_seconds",
                "Small-probe round trip of a probed path, 99th percentile over the mesh window.",
                &MeshCell::p99_ms, 1e-3}}) {
      text.family(g.name, "gauge", g.help);
      for (const MeshCell& c : cells)
        if (c.rtt_count) text.sample(g.name, path(c), c.*g.field * g.scale);
    }
    text.family("pfsnet_mesh_bulk_bytes_per_second", "gauge",
                "Bulk-probe throughput of a probed path, the best over the mesh window, by "
                "direction (write: to the peer).");
    for (const MeshCell& c : cells)
      for (auto [dir, v] : {std::pair{"write", c.write_mib_s}, std::pair{"read", c.read_mib_s}})
        if (v > 0)
          text.sample("pfsnet_mesh_bulk_bytes_per_second", path(c) + ",direction=\"" + dir + "\"",
                      v * 1048576.0);
    text.family("pfsnet_mesh_window_probes", "gauge",
                "Probes of a probed path in the mesh window, by outcome.");
    for (const MeshCell& c : cells) {
      text.sample("pfsnet_mesh_window_probes", path(c) + ",outcome=\"answered\"",
                  double(c.sent - c.lost));
      text.sample("pfsnet_mesh_window_probes", path(c) + ",outcome=\"lost\"", double(c.lost));
    }
  }

  if (m.health_events) {
    for (auto [name, help, counts] :
         {std::tuple{"pfsnet_health_problems_started_total",
                     "Health events: problems this node saw start, by cause.",
                     &m.health_events->started},
          std::tuple{"pfsnet_health_problems_ended_total",
                     "Health events: problems this node saw end, by cause.",
                     &m.health_events->ended}}) {
      text.family(name, "counter", help);
      for (const auto& [cause, n] : *counts)
        text.sample(name, "cause=\"" + cause + "\"", double(n));
    }
    text.family("pfsnet_health_problem_seconds_total", "counter",
                "Seconds this node's problems that ended were listed, summed, by cause.");
    for (const auto& [cause, secs] : m.health_events->lasted_seconds)
      text.sample("pfsnet_health_problem_seconds_total", "cause=\"" + cause + "\"", secs);
  }

  // What `pfsnet health` lists: on the MGS the cluster's list (list="cluster"), elsewhere
  // the node's own findings (list="node"); 1 while it holds, with its start; muted="1" while
  // a mute of the cluster's hides it (pfsnet health mute).
  text.family("pfsnet_problem", "gauge",
              "A problem pfsnet health lists (list=cluster: the MGS's list of the whole cluster; "
              "list=node: this node's own findings): 1 while it holds; absent otherwise.");
  const std::string list = m.cluster_list ? "cluster" : "node";
  auto labels = [&list](const Problem& p) {
    return "kind=\"" + p.kind + "\",subject=\"" + p.subject + "\",cause=\"" + p.cause +
           "\",code=\"" + p.code + "\",muted=\"" + (p.muted ? "1" : "0") + "\",list=\"" + list +
           "\"";
  };
  for (const Problem& p : m.problems) text.sample("pfsnet_problem", labels(p), 1);
  text.family("pfsnet_problem_since_timestamp_seconds", "gauge",
              "When a problem pfsnet health lists began, Unix seconds (0: not known).");
  for (const Problem& p : m.problems)
    text.sample("pfsnet_problem_since_timestamp_seconds", labels(p),
                double(p.since_unix_ms) / 1000.0);

  // The worker pool (rpc.workers): a busy server shows here, not in the network's figures.
  const WorkerStats& w = m.workers;
  text.family("pfsnet_rpc_workers", "gauge", "Worker threads for handlers that may block.");
  text.sample("pfsnet_rpc_workers", "", double(w.threads));
  text.family("pfsnet_rpc_workers_busy", "gauge", "Worker threads running a handler now.");
  text.sample("pfsnet_rpc_workers_busy", "", double(w.busy));
  text.family("pfsnet_rpc_worker_queue_length", "gauge", "Requests waiting for a worker now.");
  text.sample("pfsnet_rpc_worker_queue_length", "", double(w.queued));
  text.family("pfsnet_rpc_worker_queue_length_max", "gauge",
              "Most requests ever waiting for a worker at once.");
  text.sample("pfsnet_rpc_worker_queue_length_max", "", double(w.queued_max));
  text.family("pfsnet_rpc_worker_jobs_total", "counter", "Requests a worker has taken.");
  text.sample("pfsnet_rpc_worker_jobs_total", "", double(w.jobs));
  text.family("pfsnet_rpc_worker_wait_seconds_total", "counter",
              "Time requests waited for a worker, summed (divide by jobs for the mean).");
  text.sample("pfsnet_rpc_worker_wait_seconds_total", "",
              std::chrono::duration<double>(w.wait_total).count());
  text.family("pfsnet_rpc_worker_wait_max_seconds", "gauge", "Longest wait for a worker.");
  text.sample("pfsnet_rpc_worker_wait_max_seconds", "",
              std::chrono::duration<double>(w.wait_max).count());

  // Exactly-once execution: what the reply cache holds and what it did with copies.
  if (m.jobs && m.clients) job_metrics(text, *m.jobs, *m.clients);
  const ReplyCacheStats& rc = m.replay;
  text.family("pfsnet_rpc_reply_cache_clients", "gauge",
              "Client incarnations whose requests this server remembers.");
  text.sample("pfsnet_rpc_reply_cache_clients", "", double(rc.clients));
  text.family("pfsnet_rpc_reply_cache_entries", "gauge", "Requests run, remembered.");
  text.sample("pfsnet_rpc_reply_cache_entries", "", double(rc.entries));
  text.family("pfsnet_rpc_reply_cache_bytes", "gauge",
              "Memory of the reply cache: records and saved replies.");
  text.sample("pfsnet_rpc_reply_cache_bytes", "", double(rc.bytes));
  text.family("pfsnet_rpc_request_copies_total", "counter",
              "Copies of requests that ran or run (resends), by what was done with them.");
  text.sample("pfsnet_rpc_request_copies_total", "outcome=\"replayed\"", double(rc.replayed));
  text.sample("pfsnet_rpc_request_copies_total", "outcome=\"running\"", double(rc.running_copies));
  text.sample("pfsnet_rpc_request_copies_total", "outcome=\"finished\"",
              double(rc.finished_copies));
  text.sample("pfsnet_rpc_request_copies_total", "outcome=\"unknown\"", double(rc.unknown));
  text.sample("pfsnet_rpc_request_copies_total", "outcome=\"before_start\"",
              double(rc.before_start));
  text.family("pfsnet_rpc_reply_cache_max_entries", "gauge",
              "The most requests one client incarnation has unacknowledged here.");
  text.sample("pfsnet_rpc_reply_cache_max_entries", "", double(rc.max_entries));
  text.family("pfsnet_rpc_reply_cache_window", "gauge",
              "Requests a client incarnation may have unacknowledged here "
              "(rpc.reply_cache_entries).");
  text.sample("pfsnet_rpc_reply_cache_window", "", double(rc.window));
  text.family("pfsnet_rpc_reply_cache_refused_total", "counter",
              "New requests refused, not run: their client was over its window.");
  text.sample("pfsnet_rpc_reply_cache_refused_total", "", double(rc.over_window));
  text.family("pfsnet_rpc_done_acks_total", "counter",
              "DONE messages applied: clients saying which requests they are finished with.");
  text.sample("pfsnet_rpc_done_acks_total", "", double(rc.done_acks));

  route_metrics(text, m.routes, m.router);

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
    std::string id = n.node.to_string();
    for (const auto& [k, v] : n.stats)
      groups[0].second.push_back(
          {"nid=\"" + id + "\",stat=\"" + std::string(node_stat_name(k)) + "\"", &v});
  }
  for (const SizeReport& s : rep.sizes)
    groups[1].second.push_back({"low=\"" + std::to_string(s.low) + "\",high=\"" +
                                    std::to_string(s.high) + "\",stat=\"latency\"",
                                &s.latency});
  for (const MessageReport& msg : rep.messages)
    groups[2].second.push_back(
        {"type=\"" + m.type_name(msg.type) + "\",stat=\"execution\"", &msg.execution});
  for (const auto& [prefix, rows] : groups) {
    text.family(prefix + "_rpcs", "gauge", "RPCs in the last 60 seconds.");
    for (const Row& r : rows) {
      int64_t n = 0;
      for (const IntervalView& i : r.v->seconds) n += i.count;
      text.sample(prefix + "_rpcs", r.labels, double(n));
    }
    const char* what[] = {"avg", "min", "max"};
    for (int w = 0; w < 3; ++w) {
      std::string name = prefix + "_" + what[w] + "_seconds";
      text.family(name, "gauge", "Average, minimum or maximum over the last 60 seconds.");
      for (const Row& r : rows) {
        WindowSummary s = summarize_seconds(*r.v);
        text.sample(name, r.labels, (w == 0 ? s.avg_ms : w == 1 ? s.min_ms : s.max_ms) / 1000.0);
      }
    }
  }
  latency_histograms(text, m);
  if (m.membership) membership_metrics(text, *m.membership);
  if (m.tune) tune_metrics(text, *m.tune);
  return text.take();
}

}  // namespace pfsnet
