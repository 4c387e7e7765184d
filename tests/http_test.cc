// pfsnetd's HTTP endpoint: Prometheus text at /metrics and the admin JSON at /api/v1.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cluster.h"

namespace pfsnet::testing {
namespace {

using nlohmann::json;

TEST(HttpTest, MetricsAndApiAfterTraffic) {
  DaemonOptions o;
  o.http = loopback(2) + ":9708";
  TwoDaemons c(o);
  ASSERT_TRUE(c.ready()) << c.a.process().output();
  Daemon &a = c.a, &b = c.b;
  ASSERT_EQ(run({PFSNET_BIN, "--socket", a.socket(), "ping", b.nid().to_string(), "-c", "7"}).first,
            0);

  httplib::Client http(loopback(2), 9708);
  http.set_connection_timeout(5);
  http.set_read_timeout(5);
  auto m = http.Get("/metrics");
  ASSERT_TRUE(m) << "no HTTP answer";
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->get_header_value("Content-Type").find("text/plain; version=0.0.4"),
            std::string::npos);
  std::string peer = "nid=\"" + b.nid().to_string() + "\"";
  EXPECT_NE(m->body.find("# TYPE pfsnet_peer_sent_messages_total counter"), std::string::npos);
  EXPECT_NE(m->body.find("pfsnet_peer_sent_messages_total{" + peer + "} 7\n"), std::string::npos)
      << m->body.substr(0, 2000);
  EXPECT_NE(
      m->body.find("pfsnet_peer_errors_total{" + peer + ",kind=\"PEER_NI_CONNECT_ERROR\"} 0\n"),
      std::string::npos);
  EXPECT_NE(m->body.find("pfsnet_rpc_raw_dropped_total{buffer=\"stat\"} 0\n"), std::string::npos);
  // Health: value, resends, timeouts split local/remote, time of the last state change.
  EXPECT_NE(m->body.find("pfsnet_peer_health{" + peer + "} 1000\n"), std::string::npos);
  EXPECT_NE(m->body.find("pfsnet_peer_resends_total{" + peer + "} 0\n"), std::string::npos);
  EXPECT_NE(m->body.find("pfsnet_ni_local_timeouts_total{"), std::string::npos);
  EXPECT_NE(m->body.find("pfsnet_ni_remote_timeouts_total{"), std::string::npos);
  EXPECT_NE(m->body.find("pfsnet_ni_last_change_timestamp_seconds{"), std::string::npos);
  // What TCP hides, per path, from the kernel: the 7 pings went out as segments.
  std::string path = "local=\"" + a.nid().to_string() + "\"," + peer;
  EXPECT_NE(m->body.find("# TYPE pfsnet_path_tcp_retransmits_total counter"), std::string::npos);
  EXPECT_NE(m->body.find("pfsnet_path_tcp_rtt_seconds{" + path + "} "), std::string::npos)
      << m->body;
  auto at = m->body.find("pfsnet_path_tcp_segments_sent_total{" + path + "} ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::stod(m->body.substr(m->body.find("} ", at) + 2)), 7.0);
  // The worker pool (rpc.workers, default 2) and its queue.
  EXPECT_NE(m->body.find("pfsnet_rpc_workers 2\n"), std::string::npos);
  EXPECT_NE(m->body.find("pfsnet_rpc_worker_queue_length 0\n"), std::string::npos);
  EXPECT_NE(m->body.find("# TYPE pfsnet_rpc_worker_wait_seconds_total counter"), std::string::npos);
  // Every sample line is NAME{LABELS} VALUE or NAME VALUE with a pfsnet_ name and a number.
  std::istringstream lines(m->body);
  std::string line;
  int samples = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    ++samples;
    EXPECT_EQ(line.rfind("pfsnet_", 0), 0u) << line;
    size_t name_end = line.find_first_of("{ ");
    ASSERT_NE(name_end, std::string::npos) << line;
    size_t value_at = line[name_end] == '{' ? line.find("} ", name_end) : name_end;
    ASSERT_NE(value_at, std::string::npos) << line;
    std::string value = line.substr(line.find(' ', value_at) + 1);
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    EXPECT_TRUE(end && *end == '\0' && !value.empty()) << line;
  }
  EXPECT_NE(m->body.find("pfsnet_tune_settings_fit 1\n"), std::string::npos);
  EXPECT_GT(samples, 20);

  auto p = http.Get("/api/v1/peers");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 200);
  json peers = json::parse(p->body)["peers"];
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0]["send_count"], 7);
  auto d = http.Get("/api/v1/diag/rpc?what=message");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 200);
  EXPECT_TRUE(json::parse(d->body).contains("messages"));
  auto bad = http.Get("/api/v1/diag/rpc?what=bogus");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  // The op tracker: nothing in flight here now; the history asked for is there, and a
  // malformed flag is refused.
  auto ops = http.Get("/api/v1/diag/ops?history=1");
  ASSERT_TRUE(ops);
  EXPECT_EQ(ops->status, 200) << ops->body;
  json oj = json::parse(ops->body);
  EXPECT_TRUE(oj["in_flight"].is_array()) << ops->body;
  EXPECT_TRUE(oj["history"].is_array()) << ops->body;
  auto bad_ops = http.Get("/api/v1/diag/ops?history=maybe");
  ASSERT_TRUE(bad_ops);
  EXPECT_EQ(bad_ops->status, 400) << bad_ops->body;
  // Job statistics: a's view as a server (it answered nothing here: empty tables); its
  // query's words and numbers checked.
  auto jobs = http.Get("/api/v1/diag/jobs?top=3&by=rpcs");
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200) << jobs->body;
  json jj = json::parse(jobs->body);
  EXPECT_TRUE(jj["jobs"]["top"].is_array()) << jobs->body;
  EXPECT_TRUE(jj["clients"]["top"].is_array()) << jobs->body;
  EXPECT_EQ(jj["by"], "rpcs") << jobs->body;
  for (const char* q : {"/api/v1/diag/jobs?by=speed", "/api/v1/diag/jobs?top=x"}) {
    auto bad_jobs = http.Get(q);
    ASSERT_TRUE(bad_jobs);
    EXPECT_EQ(bad_jobs->status, 400) << q << ": " << bad_jobs->body;
  }
  auto none = http.Get("/api/v1/shutdown");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
  auto post = http.Post("/api/v1/peers", "{}", "application/json");  // read-only
  ASSERT_TRUE(post);
  EXPECT_NE(post->status, 200);
  // Only the configured address serves HTTP.
  httplib::Client other(loopback(3), 9708);
  other.set_connection_timeout(2);
  EXPECT_FALSE(other.Get("/metrics"));
}

}  // namespace
}  // namespace pfsnet::testing
