#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "admin/prometheus.h"

namespace pfsnet {
namespace {

// The HELP, TYPE and sample lines of one family, in order.
std::string family_block(const std::string& text, const std::string& family) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    bool comment = line.rfind("# HELP " + family + " ", 0) == 0 ||
                   line.rfind("# TYPE " + family + " ", 0) == 0;
    bool sample = line.rfind(family + "{", 0) == 0 || line.rfind(family + " ", 0) == 0;
    if (comment || sample) out += line + "\n";
  }
  return out;
}

IntervalView iv(int64_t start, int64_t count, double avg, double mn, double mx) {
  return {start, count, avg, mn, mx};
}

MetricsSnapshot snapshot() {
  MetricsSnapshot m;
  NiInfo ni;
  ni.nid = *Nid::parse("127.0.0.2@tcp");
  ni.up = true;
  ni.health = 900;
  ni.credits = 60;
  ni.credits_max = 64;
  ni.send_count = 12;
  ni.send_bytes = 1234567;
  ni.errors[static_cast<size_t>(HealthKind::kPeerNiUnreachable)] = 3;
  ni.last_change_unix_ms = 1700000000500;
  m.nis.push_back(ni);
  NiInfo peer;
  peer.nid = *Nid::parse("127.0.0.3@tcp");
  m.peers.push_back(peer);
  StatView wait;
  // Two busy seconds and an idle one: 3 RPCs of 1, 2 and 3 ms; avg 2 ms over RPCs.
  wait.seconds = {iv(100, 1, 1.0, 1.0, 1.0), iv(101, 0, 0, 0, 0), iv(102, 2, 2.5, 2.0, 3.0)};
  m.rpc.nodes.push_back({ni.nid, {{NodeStat::kChannelWait, wait}}});
  StatView lat;
  lat.seconds = {iv(100, 4, 0.5, 0.25, 1.0)};
  m.rpc.sizes.push_back({0, 64, lat});
  m.rpc.messages.push_back({1, lat});
  m.rpc.dropped_stat = 7;
  m.type_name = [](uint32_t t) {
    return t == 1 ? std::string("PING") : "type-" + std::to_string(t);
  };
  return m;
}

TEST(PrometheusTextTest, SummarizesSecondsOverRpcs) {
  WindowSummary s = summarize_seconds(snapshot().rpc.nodes[0].stats[0].second);
  EXPECT_EQ(s.count, 3);
  EXPECT_DOUBLE_EQ(s.avg_ms, 2.0);
  EXPECT_DOUBLE_EQ(s.min_ms, 1.0);
  EXPECT_DOUBLE_EQ(s.max_ms, 3.0);
  EXPECT_EQ(summarize_seconds(StatView{}).count, 0);
}

TEST(PrometheusTextTest, NiFamilies) {
  std::string t = prometheus_text(snapshot());
  EXPECT_EQ(family_block(t, "pfsnet_ni_sent_bytes_total"),
            "# HELP pfsnet_ni_sent_bytes_total Bytes sent, frame headers included.\n"
            "# TYPE pfsnet_ni_sent_bytes_total counter\n"
            "pfsnet_ni_sent_bytes_total{nid=\"127.0.0.2@tcp\"} 1234567\n");
  EXPECT_EQ(family_block(t, "pfsnet_ni_health"),
            "# HELP pfsnet_ni_health Health value (1000 = healthy).\n"
            "# TYPE pfsnet_ni_health gauge\n"
            "pfsnet_ni_health{nid=\"127.0.0.2@tcp\"} 900\n");
  EXPECT_EQ(family_block(t, "pfsnet_ni_last_change_timestamp_seconds"),
            "# HELP pfsnet_ni_last_change_timestamp_seconds Time of the last state change "
            "(up/down, healthy/unhealthy), Unix seconds.\n"
            "# TYPE pfsnet_ni_last_change_timestamp_seconds gauge\n"
            "pfsnet_ni_last_change_timestamp_seconds{nid=\"127.0.0.2@tcp\"} 1700000000.5\n");
  EXPECT_EQ(family_block(t, "pfsnet_peer_up"),
            "# HELP pfsnet_peer_up 1 when up (NI) or connected (peer NI).\n"
            "# TYPE pfsnet_peer_up gauge\n"
            "pfsnet_peer_up{nid=\"127.0.0.3@tcp\"} 0\n");
  std::string errors = family_block(t, "pfsnet_ni_errors_total");
  EXPECT_NE(
      errors.find("pfsnet_ni_errors_total{nid=\"127.0.0.2@tcp\",kind=\"PEER_NI_UNREACHABLE\"} 3\n"),
      std::string::npos)
      << errors;
  EXPECT_EQ(family_block(t, "pfsnet_rpc_raw_dropped_total"),
            "# HELP pfsnet_rpc_raw_dropped_total Raw statistics records dropped (buffer full).\n"
            "# TYPE pfsnet_rpc_raw_dropped_total counter\n"
            "pfsnet_rpc_raw_dropped_total{buffer=\"stat\"} 7\n"
            "pfsnet_rpc_raw_dropped_total{buffer=\"exec\"} 0\n");
}

TEST(PrometheusTextTest, RpcFamiliesOverTheLastMinute) {
  std::string t = prometheus_text(snapshot());
  EXPECT_EQ(family_block(t, "pfsnet_rpc_node_rpcs"),
            "# HELP pfsnet_rpc_node_rpcs RPCs in the last 60 seconds.\n"
            "# TYPE pfsnet_rpc_node_rpcs gauge\n"
            "pfsnet_rpc_node_rpcs{nid=\"127.0.0.2@tcp\",stat=\"channel_wait\"} 3\n");
  EXPECT_EQ(family_block(t, "pfsnet_rpc_node_avg_seconds"),
            "# HELP pfsnet_rpc_node_avg_seconds Average, minimum or maximum over the last 60 "
            "seconds.\n"
            "# TYPE pfsnet_rpc_node_avg_seconds gauge\n"
            "pfsnet_rpc_node_avg_seconds{nid=\"127.0.0.2@tcp\",stat=\"channel_wait\"} 0.002\n");
  EXPECT_EQ(family_block(t, "pfsnet_rpc_node_max_seconds"),
            "# HELP pfsnet_rpc_node_max_seconds Average, minimum or maximum over the last 60 "
            "seconds.\n"
            "# TYPE pfsnet_rpc_node_max_seconds gauge\n"
            "pfsnet_rpc_node_max_seconds{nid=\"127.0.0.2@tcp\",stat=\"channel_wait\"} 0.003\n");
  EXPECT_EQ(family_block(t, "pfsnet_rpc_size_min_seconds"),
            "# HELP pfsnet_rpc_size_min_seconds Average, minimum or maximum over the last 60 "
            "seconds.\n"
            "# TYPE pfsnet_rpc_size_min_seconds gauge\n"
            "pfsnet_rpc_size_min_seconds{low=\"0\",high=\"64\",stat=\"latency\"} 0.00025\n");
  EXPECT_EQ(family_block(t, "pfsnet_rpc_message_rpcs"),
            "# HELP pfsnet_rpc_message_rpcs RPCs in the last 60 seconds.\n"
            "# TYPE pfsnet_rpc_message_rpcs gauge\n"
            "pfsnet_rpc_message_rpcs{type=\"PING\",stat=\"execution\"} 4\n");
}

// Latency histograms: cumulative counts at powers of two of ns, exact because those are
// bounds of the statistics' own buckets; _sum in seconds; only the latency statistics.
TEST(PrometheusTextTest, LatencyHistogramsAreCumulativeAtPowersOfTwo) {
  MetricsSnapshot m = snapshot();
  StatView lat;
  lat.total.count = 5;
  lat.total.sum_ms = 0.03 + 0.03 + 0.03 + 8.5 + 300000;
  // Three values in the bucket ending at 2^15 ns, one below 2^23 ns, one above 2^35 ns.
  lat.total.buckets = {{(int64_t(1) << 15), 3},
                       {(int64_t(1) << 23) - 100, 1},
                       {(int64_t(1) << 38) + (int64_t(1) << 35), 1}};
  m.rpc.nodes[0].stats.push_back({NodeStat::kLatencyTcp, lat});
  m.rpc.messages[0].execution.total = lat.total;
  std::string t = prometheus_text(m);
  std::string h = family_block(t, "pfsnet_rpc_node_latency_seconds");
  EXPECT_NE(h.find("# TYPE pfsnet_rpc_node_latency_seconds histogram\n"), std::string::npos) << h;
  std::string l =
      "pfsnet_rpc_node_latency_seconds_bucket{nid=\"127.0.0.2@tcp\",stat=\"latency_tcp\",le=";
  auto has = [&](const std::string& line) {
    EXPECT_NE(t.find(line + "\n"), std::string::npos) << line << "\n" << h;
  };
  has(l + "\"4.096e-06\"} 0");
  has(l + "\"1.6384e-05\"} 0");
  has(l + "\"3.2768e-05\"} 3");    // 2^15 ns: the three
  has(l + "\"0.004194304\"} 3");   // 2^22 ns
  has(l + "\"0.008388608\"} 4");   // 2^23 ns
  has(l + "\"34.359738368\"} 4");  // 2^35 ns, the last bound
  has(l + "\"+Inf\"} 5");
  has("pfsnet_rpc_node_latency_seconds_sum{nid=\"127.0.0.2@tcp\",stat=\"latency_tcp\"} 300.00859");
  has("pfsnet_rpc_node_latency_seconds_count{nid=\"127.0.0.2@tcp\",stat=\"latency_tcp\"} 5");
  // 24 bounds and +Inf per series; channel wait is not a latency: no histogram.
  size_t buckets = 0;
  for (size_t p = t.find("pfsnet_rpc_node_latency_seconds_bucket{"); p != std::string::npos;
       p = t.find("pfsnet_rpc_node_latency_seconds_bucket{", p + 1)) {
    EXPECT_EQ(t.substr(p, l.size()), l);  // channel wait is not a latency: no histogram
    ++buckets;
  }
  EXPECT_EQ(buckets, size_t(kHistogramHighPow2 - kHistogramLowPow2 + 2));
  has("pfsnet_rpc_message_execution_seconds_bucket{type=\"PING\",le=\"+Inf\"} 5");
  // A statistic with no values yet still has its buckets, all 0.
  has("pfsnet_rpc_size_latency_seconds_bucket{low=\"0\",high=\"64\",le=\"+Inf\"} 0");
}

// The MGS's table: every node's state as a 0/1 set (so an alert on dead == 1 has a series
// to watch before the node dies), last heard, and the counts by state.
TEST(PrometheusTextTest, MembershipFamiliesFromTheMgsTable) {
  MetricsSnapshot m = snapshot();
  EXPECT_EQ(prometheus_text(m).find("pfsnet_membership_"), std::string::npos);
  MetricsSnapshot::Membership ms;
  StatusTable t;
  StatusNode up, dead;
  up.name = "oss01";
  up.roles = kRoleServer;
  up.last_heard_unix_ms = 1700000000250;
  dead.name = "cli02";
  dead.roles = kRoleClient;
  dead.state = NodeState::kDead;
  dead.last_heard_unix_ms = 1699999990000;
  dead.last_change_unix_ms = 1700000000000;
  t.nodes = {up, dead};
  ms.table = t;
  ms.counters.mgs = MgsCore::Counters{};
  ms.counters.mgs->verified_dead = 2;
  m.membership = ms;
  std::string text = prometheus_text(m);
  EXPECT_EQ(family_block(text, "pfsnet_membership_node_state"),
            "# HELP pfsnet_membership_node_state The MGS's state of each node: 1 for its state "
            "(up, suspect or dead), 0 for the others.\n"
            "# TYPE pfsnet_membership_node_state gauge\n"
            "pfsnet_membership_node_state{node=\"oss01\",roles=\"server\",state=\"up\"} 1\n"
            "pfsnet_membership_node_state{node=\"oss01\",roles=\"server\",state=\"suspect\"} 0\n"
            "pfsnet_membership_node_state{node=\"oss01\",roles=\"server\",state=\"dead\"} 0\n"
            "pfsnet_membership_node_state{node=\"cli02\",roles=\"client\",state=\"up\"} 0\n"
            "pfsnet_membership_node_state{node=\"cli02\",roles=\"client\",state=\"suspect\"} 0\n"
            "pfsnet_membership_node_state{node=\"cli02\",roles=\"client\",state=\"dead\"} 1\n");
  EXPECT_NE(text.find("pfsnet_membership_node_last_heard_timestamp_seconds{node=\"oss01\"} "
                      "1700000000.25\n"),
            std::string::npos);
  EXPECT_NE(text.find("pfsnet_membership_nodes{state=\"dead\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("pfsnet_membership_mgs_verified_dead_total 2\n"), std::string::npos);
  EXPECT_EQ(text.find("pfsnet_membership_registered"), std::string::npos);  // no agent
}

TEST(PrometheusTextTest, TuneFamiliesOnlyWithATuneStatus) {
  MetricsSnapshot m = snapshot();
  EXPECT_EQ(prometheus_text(m).find("pfsnet_tune_"), std::string::npos);
  TuneStatus ts;
  ts.active.push_back({"rpcs_below_bdp", "127.0.0.3@tcp", "text"});
  ts.warnings = 2;
  Advice a;
  a.recommended = {32, 32, 256};
  PeerAdvice pa;
  pa.m.peer = "127.0.0.3@tcp";
  pa.m.rtt_ms = 50;
  pa.m.bandwidth = 1.25e9;
  pa.bdp_bytes = 62.5e6;
  a.peers.push_back(pa);
  ts.last_advice = a;
  m.tune = ts;
  std::string t = prometheus_text(m);
  EXPECT_EQ(family_block(t, "pfsnet_tune_settings_fit"),
            "# HELP pfsnet_tune_settings_fit 1 when the last check found the settings fit the "
            "measured RTT, bandwidth and peers.\n"
            "# TYPE pfsnet_tune_settings_fit gauge\n"
            "pfsnet_tune_settings_fit 0\n");
  EXPECT_EQ(family_block(t, "pfsnet_tune_problem"),
            "# HELP pfsnet_tune_problem A reason the settings do not fit, from the last check "
            "(1 while it holds).\n"
            "# TYPE pfsnet_tune_problem gauge\n"
            "pfsnet_tune_problem{problem=\"rpcs_below_bdp\",peer=\"127.0.0.3@tcp\"} 1\n");
  EXPECT_EQ(family_block(t, "pfsnet_tune_recommended"),
            "# HELP pfsnet_tune_recommended The advisor's value for a setting.\n"
            "# TYPE pfsnet_tune_recommended gauge\n"
            "pfsnet_tune_recommended{setting=\"max_rpcs_in_flight\"} 32\n"
            "pfsnet_tune_recommended{setting=\"peer_credits\"} 32\n"
            "pfsnet_tune_recommended{setting=\"credits\"} 256\n");
  EXPECT_EQ(family_block(t, "pfsnet_tune_peer_rtt_seconds"),
            "# HELP pfsnet_tune_peer_rtt_seconds Measured round trip to a peer (0: unknown).\n"
            "# TYPE pfsnet_tune_peer_rtt_seconds gauge\n"
            "pfsnet_tune_peer_rtt_seconds{peer=\"127.0.0.3@tcp\"} 0.05\n");
}

TEST(PrometheusTextTest, SlownessFamilies) {
  MetricsSnapshot m = snapshot();
  m.peers[0].degraded = "LOSSY";
  m.peers[0].degraded_penalty = 500;
  PathInfo path;
  path.local = m.nis[0].nid;
  path.tcp_total = TcpTotals{9000, 200, 0, 0};
  m.peers[0].paths.push_back(path);
  std::string t = prometheus_text(m);
  // Only degraded NIs have a sample; no monitor, no event counters.
  EXPECT_EQ(family_block(t, "pfsnet_ni_degraded").find("pfsnet_ni_degraded{"), std::string::npos);
  EXPECT_NE(
      t.find("pfsnet_peer_degraded{nid=\"127.0.0.3@tcp\",cause=\"LOSSY\",penalty=\"500\"} 1\n"),
      std::string::npos);
  EXPECT_EQ(t.find("pfsnet_health_degraded_events_total"), std::string::npos);
  // Totals over all the path's connections.
  EXPECT_NE(
      t.find("pfsnet_path_tcp_retransmits_total{local=\"127.0.0.2@tcp\",nid=\"127.0.0.3@tcp\"} "
             "200\n"),
      std::string::npos);
  EXPECT_NE(t.find("pfsnet_path_tcp_segments_sent_total{local=\"127.0.0.2@tcp\",nid=\"127.0.0.3@"
                   "tcp\"} 9000\n"),
            std::string::npos);
  MetricsSnapshot::Slowness s;
  s.degraded[static_cast<size_t>(SlowCause::kLossy)] = 2;
  s.degraded_seconds[static_cast<size_t>(SlowCause::kLossy)] = 62.5;
  s.probes = 14;
  s.cpu_wait_seconds = 3.25;
  s.cpu_starved_events = 1;
  s.cpu_starved_seconds = 13;
  s.cpu_starved = true;
  m.slowness = s;
  m.health_events = MetricsSnapshot::HealthEvents{{{"CPU", 2}}, {{"CPU", 1}}, {{"CPU", 13.5}}};
  t = prometheus_text(m);
  EXPECT_NE(t.find("pfsnet_cpu_wait_seconds_total 3.25\n"), std::string::npos) << t;
  EXPECT_NE(t.find("pfsnet_cpu_starved 1\n"), std::string::npos);
  EXPECT_NE(t.find("pfsnet_cpu_starved_events_total 1\n"), std::string::npos);
  EXPECT_NE(t.find("pfsnet_cpu_starved_seconds_total 13\n"), std::string::npos);
  EXPECT_NE(t.find("pfsnet_health_problems_ended_total{cause=\"CPU\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("pfsnet_health_problem_seconds_total{cause=\"CPU\"} 13.5\n"), std::string::npos);
  // A problem while a mute hides it: muted="1" (the packaged alert skips it); else "0".
  m.problems = {Problem{"path", "a -> b", "LOSSY", "c1", 1795576298000, "", ""},
                Problem{"node", "oss1", "SLOW_OPS", "oss1", 0, "", ""}};
  m.problems[0].muted = true;
  t = prometheus_text(m);
  EXPECT_NE(t.find("pfsnet_problem{kind=\"path\",subject=\"a -> b\",cause=\"LOSSY\",code=\"\","
                   "muted=\"1\",list=\"node\"} 1\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("pfsnet_problem{kind=\"node\",subject=\"oss1\",cause=\"SLOW_OPS\",code=\"\","
                   "muted=\"0\",list=\"node\"} 1\n"),
            std::string::npos);
  // The MGS's: the cluster's list.
  m.cluster_list = true;
  t = prometheus_text(m);
  EXPECT_NE(t.find("pfsnet_problem{kind=\"node\",subject=\"oss1\",cause=\"SLOW_OPS\",code=\"\","
                   "muted=\"0\",list=\"cluster\"} 1\n"),
            std::string::npos)
      << t;
  EXPECT_EQ(family_block(t, "pfsnet_health_degraded_events_total"),
            "# HELP pfsnet_health_degraded_events_total Times an NI was called degraded, by "
            "cause.\n"
            "# TYPE pfsnet_health_degraded_events_total counter\n"
            "pfsnet_health_degraded_events_total{cause=\"SLOW\"} 0\n"
            "pfsnet_health_degraded_events_total{cause=\"LOSSY\"} 2\n"
            "pfsnet_health_degraded_events_total{cause=\"SERVER\"} 0\n");
  EXPECT_NE(t.find("pfsnet_health_probes_total 14\n"), std::string::npos);
  EXPECT_NE(t.find("pfsnet_health_degraded_seconds_total{cause=\"LOSSY\"} 62.5\n"),
            std::string::npos)
      << t;
}

TEST(PrometheusTextTest, MeshFamiliesPerProbedPath) {
  MetricsSnapshot m = snapshot();
  EXPECT_EQ(prometheus_text(m).find("pfsnet_mesh_"), std::string::npos);  // no mesh: none
  MetricsSnapshot::Mesh mesh;
  MeshCell c;
  c.to = "n3";
  c.local = m.nis[0].nid;
  c.peer = *Nid::parse("127.0.0.3@tcp");
  c.sent = 20;
  c.lost = 2;
  c.rtt_count = 15;
  c.p50_ms = 0.25;
  c.p99_ms = 1.5;
  c.write_mib_s = 100;
  mesh.row.cells = {c};
  mesh.probes = 40;
  mesh.lost = 2;
  mesh.bulk_bytes = 1 << 20;
  m.mesh = mesh;
  std::string t = prometheus_text(m);
  const std::string path = "node=\"n3\",local=\"127.0.0.2@tcp\",peer=\"127.0.0.3@tcp\"";
  EXPECT_NE(t.find("pfsnet_mesh_rtt_p50_seconds{" + path + "} 0.00025\n"), std::string::npos) << t;
  EXPECT_NE(t.find("pfsnet_mesh_rtt_p99_seconds{" + path + "} 0.0015\n"), std::string::npos);
  EXPECT_NE(
      t.find("pfsnet_mesh_bulk_bytes_per_second{" + path + ",direction=\"write\"} 104857600\n"),
      std::string::npos);
  EXPECT_EQ(t.find("direction=\"read\""), std::string::npos);  // no read probe answered
  EXPECT_NE(t.find("pfsnet_mesh_window_probes{" + path + ",outcome=\"lost\"} 2\n"),
            std::string::npos);
  EXPECT_NE(t.find("pfsnet_mesh_window_probes{" + path + ",outcome=\"answered\"} 18\n"),
            std::string::npos);
  EXPECT_NE(t.find("pfsnet_mesh_probes_total 40\n"), std::string::npos);
  EXPECT_NE(t.find("pfsnet_mesh_probes_lost_total 2\n"), std::string::npos);
}

// Every sample belongs to a family announced before it with HELP and TYPE, once.
TEST(PrometheusTextTest, EveryFamilyHasHelpAndTypeOnce) {
  MetricsSnapshot m = snapshot();
  m.tune = TuneStatus{};
  m.mesh = MetricsSnapshot::Mesh{};
  MetricsSnapshot::Membership ms;
  ms.table = StatusTable{};
  ms.table->nodes.push_back(StatusNode{});
  ms.counters.mgs = MgsCore::Counters{};
  ms.counters.agent = MembershipCounters::Agent{};
  m.membership = ms;
  m.health_events =
      MetricsSnapshot::HealthEvents{{{"LOSSY", 2}}, {{"LOSSY", 1}}, {{"LOSSY", 30.0}}};
  std::istringstream in(prometheus_text(m));
  std::set<std::string> help, type;
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      EXPECT_TRUE(help.insert(line.substr(7, line.find(' ', 7) - 7)).second) << line;
    } else if (line.rfind("# TYPE ", 0) == 0) {
      std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(help.count(name)) << line;
      EXPECT_TRUE(type.insert(name).second) << line;
      std::string kind = line.substr(line.rfind(' ') + 1);
      EXPECT_TRUE(kind == "counter" || kind == "gauge" || kind == "histogram") << line;
      if (kind == "counter") {
        EXPECT_EQ(name.substr(name.size() - 6), "_total") << line;
      }
    } else {
      std::string name = line.substr(0, line.find_first_of("{ "));
      // A histogram's samples are its name with _bucket, _sum or _count.
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        std::string base = name.substr(0, name.size() - std::min(name.size(), strlen(suffix)));
        if (name.ends_with(suffix) && type.count(base)) name = base;
      }
      EXPECT_TRUE(type.count(name)) << line;
      EXPECT_EQ(name.rfind("pfsnet_", 0), 0u) << line;
      ++samples;
    }
  }
  EXPECT_GT(samples, 40);
}

}  // namespace
// Jobs and clients: the top K as series, the rest as one __other__, the job id escaped.
TEST(PrometheusTextTest, TheTopJobsAndOtherAreTheOnlySeries) {
  ManualClock clock;
  JobStats js(clock, JobStatsOptions{});
  const Nid c = *Nid::parse("198.18.0.1@tcp");
  for (int j = 0; j < 50; ++j)
    js.record("job" + std::to_string(j), c, 1, uint64_t(1000 + j), 10, std::chrono::milliseconds(2),
              std::chrono::milliseconds(1));
  js.record("a\"b", c, 1, 100000, 0, std::chrono::milliseconds(1), Duration::zero());
  MetricsSnapshot m = snapshot();
  m.jobs = js.top_jobs(3, JobStats::By::kBytes);
  m.clients = js.top_clients(3, JobStats::By::kBytes);
  const std::string t = prometheus_text(m);
  const std::string rpcs = family_block(t, "pfsnet_job_rpcs_total");
  EXPECT_EQ(std::count(rpcs.begin(), rpcs.end(), '\n'), 2 + 3 + 1) << rpcs;  // HELP, TYPE, 3, other
  EXPECT_NE(rpcs.find("pfsnet_job_rpcs_total{job=\"a\\\"b\"} 1\n"), std::string::npos) << rpcs;
  EXPECT_NE(rpcs.find("pfsnet_job_rpcs_total{job=\"job49\"} 1\n"), std::string::npos) << rpcs;
  EXPECT_NE(rpcs.find("pfsnet_job_rpcs_total{job=\"__other__\"} 48\n"), std::string::npos) << rpcs;
  EXPECT_NE(t.find("pfsnet_job_bytes_total{job=\"a\\\"b\",direction=\"in\"} 100000\n"),
            std::string::npos);
  EXPECT_NE(t.find("pfsnet_client_rpcs_total{client=\"198.18.0.1@tcp\"} 51\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("pfsnet_client_rpcs_total{client=\"__other__\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("pfsnet_job_stats_entries 51\n"), std::string::npos);
  EXPECT_NE(t.find("pfsnet_job_stats_overflow_total 0\n"), std::string::npos);
  EXPECT_NE(t.find("pfsnet_job_queue_seconds_total{job=\"job49\"} 0.001\n"), std::string::npos)
      << t;
}

}  // namespace pfsnet
