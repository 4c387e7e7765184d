// A real Prometheus server (Debian's `prometheus`) scrapes a pfsnetd on loopback and its
// query API returns a pfsnet_ series with the expected value and a histogram quantile in
// range; promtool checks what pfsnetd serves and the packaged rules and Grafana board.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "base/test_doc_table.h"
#include "cluster.h"

namespace pfsnet::testing {
namespace {

using nlohmann::json;

constexpr char kPrometheus[] = "/usr/bin/prometheus";

TEST(PrometheusTest, ScrapesPfsnetd) {
  if (access(kPrometheus, X_OK) != 0)
    GTEST_SKIP() << "the prometheus package is not installed (scripts/install-deps.sh installs it)";
  DaemonOptions o;
  o.http = loopback(2) + ":9708";
  TwoDaemons c(o);
  ASSERT_TRUE(c.ready());
  Daemon &a = c.a, &b = c.b;
  const TempDir& dir = c.dir;
  ASSERT_EQ(run({PFSNET_BIN, "--socket", a.socket(), "ping", b.nid().to_string(), "-c", "9"}).first,
            0);

  write_file(dir.file("prometheus.yml"),
             "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
             "scrape_configs:\n  - job_name: pfsnet\n    static_configs:\n      - targets: ['" +
                 o.http + "']\n");
  std::string listen = loopback(9) + ":9090";
  Process prom({kPrometheus, "--config.file=" + dir.file("prometheus.yml"),
                "--storage.tsdb.path=" + dir.file("tsdb"), "--web.listen-address=" + listen,
                "--log.level=warn"});
  httplib::Client api(loopback(9), 9090);
  api.set_connection_timeout(1);
  api.set_read_timeout(5);
  // Poll the query API until the scrape has landed; bounded in count and time.
  std::string query = "/api/v1/query?query=pfsnet_peer_sent_messages_total";
  json found;
  auto limit = std::chrono::steady_clock::now() + 30s;
  for (int i = 0; i < 300 && found.is_null() && std::chrono::steady_clock::now() < limit; ++i) {
    auto r = api.Get(query.c_str());
    if (r && r->status == 200) {
      json j = json::parse(r->body, nullptr, false);
      if (!j.is_discarded() && j["status"] == "success" && !j["data"]["result"].empty())
        found = j["data"]["result"];
    }
    if (found.is_null()) std::this_thread::sleep_for(100ms);  // next scrape is 1 s away
  }
  ASSERT_FALSE(found.is_null()) << "Prometheus never returned the series\n" << prom.output();
  ASSERT_EQ(found.size(), 1u) << found.dump();
  EXPECT_EQ(found[0]["metric"]["nid"], b.nid().to_string());
  EXPECT_EQ(found[0]["metric"]["job"], "pfsnet");
  EXPECT_EQ(found[0]["value"][1], "9");  // [timestamp, "value"]

  // The latency histogram gives Prometheus a median in the range of what ping measured
  // (bucket bounds are powers of two, and histogram_quantile interpolates within one).
  json pinged = json::parse(
      run({PFSNET_BIN, "--socket", a.socket(), "ping", b.nid().to_string(), "-c", "50", "--json"})
          .second,
      nullptr, false);
  ASSERT_TRUE(pinged.is_object());
  double lo = pinged["rtt_ms"]["min"].get<double>() / 1000,
         hi = pinged["rtt_ms"]["max"].get<double>() / 1000;
  std::string q =
      "/api/v1/query?query=histogram_quantile(0.5,"
      "pfsnet_rpc_node_latency_seconds_bucket%7Bstat%3D%22latency_tcp%22%7D)";
  double median = -1;
  std::string last;
  limit = std::chrono::steady_clock::now() + 30s;
  for (int i = 0; i < 300 && std::chrono::steady_clock::now() < limit; ++i) {
    auto r = api.Get(q.c_str());
    if (r && r->status == 200) {
      last = r->body;
      json j = json::parse(r->body, nullptr, false);
      // Wait for a scrape after the 59 pings (9 + 50) closed their second.
      if (!j.is_discarded() && !j["data"]["result"].empty()) {
        auto count = api.Get(
            "/api/v1/"
            "query?query=pfsnet_rpc_node_latency_seconds_count%7Bstat%3D%22latency_tcp%22%7D");
        json c = count ? json::parse(count->body, nullptr, false) : json();
        if (c.is_object() && !c["data"]["result"].empty() &&
            c["data"]["result"][0]["value"][1] == "59") {
          median = std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
          break;
        }
      }
    }
    std::this_thread::sleep_for(100ms);  // the next scrape is 1 s away
  }
  ASSERT_GE(median, 0) << "no histogram_quantile answer: " << last;
  EXPECT_GE(median, lo / 2) << "ping min " << lo;
  EXPECT_LE(median, hi * 2) << "ping max " << hi;
  std::printf("histogram_quantile(0.5) = %.6f s; ping min %.6f max %.6f s\n", median, lo, hi);
}

// What a real MGS and a client serve passes `promtool check metrics` (names, types, HELP,
// suffixes), and carries the latency histograms and the membership families.
TEST(PrometheusTest, MetricsPassPromtoolAndShowMembership) {
  if (access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "needs promtool (prometheus)";
  auto [oa, ob] = mgs_and_client(true, true);
  TwoDaemons c(oa, ob);
  ASSERT_TRUE(c.ready());
  ASSERT_EQ(
      run({PFSNET_BIN, "--socket", c.b.socket(), "ping", c.a.nid().to_string(), "-c", "20"}).first,
      0);
  auto get = [](const std::string& host) {
    httplib::Client h(host, 9708);
    h.set_connection_timeout(2);
    h.set_read_timeout(5);
    auto r = h.Get("/metrics");
    return r && r->status == 200 ? r->body : std::string();
  };
  // The client's registration and the 20 RPCs' closing second reach the figures within a
  // few seconds; bounded in count and time.
  std::string mgs, client;
  std::string registered =
      "pfsnet_membership_node_state{node=\"n3\",roles=\"client\",state=\"up\"} 1\n";
  std::string counted = "pfsnet_rpc_node_latency_seconds_count{nid=\"" + c.a.nid().to_string() +
                        "\",stat=\"latency_tcp\"} ";
  // The value of the first sample starting with `prefix`; -1 when absent.
  auto value = [](const std::string& text, const std::string& prefix) {
    size_t p = text.find(prefix);
    return p == std::string::npos ? -1.0 : std::atof(text.c_str() + p + prefix.size());
  };
  auto limit = std::chrono::steady_clock::now() + 20s;
  for (int i = 0; i < 200 && std::chrono::steady_clock::now() < limit; ++i) {
    mgs = get(loopback(2));
    client = get(loopback(3));
    // 20 pings and the membership and tuning RPCs -- and the server's execution of them,
    // which it processes in its own second (later than the client's under ASan).
    if (mgs.find(registered) != std::string::npos && value(client, counted) >= 20 &&
        value(mgs, "pfsnet_rpc_message_execution_seconds_count{type=\"PING\"} ") >= 20)
      break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_NE(mgs.find(registered), std::string::npos) << mgs;
  EXPECT_NE(mgs.find("pfsnet_membership_node_last_heard_timestamp_seconds{node=\"n3\"}"),
            std::string::npos);
  EXPECT_NE(mgs.find("pfsnet_membership_nodes{state=\"up\"} 2\n"), std::string::npos) << mgs;
  EXPECT_GE(value(client, counted), 20) << client;
  EXPECT_NE(client.find("pfsnet_membership_registered{mgs=\"" + c.a.nid().to_string() + "\"} 1\n"),
            std::string::npos)
      << client;
  EXPECT_EQ(client.find("pfsnet_membership_node_state"), std::string::npos);  // the MGS's only
  // The cluster's release level: the MGS's own (1: never raised); the client's once its
  // registration's answer told it.
  EXPECT_NE(mgs.find("pfsnet_cluster_release_level 1\n"), std::string::npos) << mgs;
  EXPECT_NE(client.find("pfsnet_cluster_release_level 1\n"), std::string::npos) << client;
  // The release and commit, on both (CliTest checks the commit against git).
  for (const std::string* text : {&mgs, &client})
    EXPECT_NE(text->find("pfsnet_build_info{version=\"" PFSNET_VERSION "\",commit=\""),
              std::string::npos)
        << *text;
  // The client's connection to the MGS speaks wire version 2, both of this build.
  EXPECT_NE(
      client.find("pfsnet_peer_wire_version{nid=\"" + c.a.nid().to_string() +
                  "\",features=\"job_id,trace,queue_time,routing,window\",release=\"" PFSNET_VERSION
                  " ("),
      std::string::npos)
      << client;
  // The server executed the pings: its execution histogram.
  EXPECT_NE(mgs.find("pfsnet_rpc_message_execution_seconds_count{type=\"PING\"}"),
            std::string::npos);
  // docs/metrics.md has every family they serve, with its type and every label served.
  struct Row {
    std::string type;
    std::set<std::string> labels;
  };
  std::map<std::string, Row> reference;
  for (const std::vector<std::string>& cells :
       doc_table_rows(std::string(PFSNET_SOURCE_DIR) + "/docs/metrics.md")) {
    ASSERT_GE(cells.size(), 4u) << cells[0];
    Row r{cells[1], {}};
    for (size_t a = 0; (a = cells[2].find('`', a)) != std::string::npos;) {
      size_t b = cells[2].find('`', a + 1);
      r.labels.insert(cells[2].substr(a + 1, b - a - 1));
      a = b + 1;
    }
    reference[cells[0].substr(1, cells[0].size() - 2)] = r;
  }
  EXPECT_GT(reference.size(), 100u);
  for (const auto& [who, text] : {std::pair{"mgs", mgs}, std::pair{"client", client}}) {
    std::istringstream in(text);
    std::string line;
    std::map<std::string, std::string> types;
    int families = 0;
    while (std::getline(in, line)) {
      if (line.rfind("# TYPE ", 0) == 0) {
        std::istringstream w(line.substr(7));
        std::string name, type;
        w >> name >> type;
        types[name] = type;
        ++families;
        auto it = reference.find(name);
        EXPECT_NE(it, reference.end()) << who << " serves " << name << ", not in docs/metrics.md";
        if (it != reference.end()) {
          EXPECT_EQ(it->second.type, type) << name;
        }
        continue;
      }
      if (line.empty() || line[0] == '#') continue;
      std::string name = line.substr(0, line.find_first_of("{ "));
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        if (name.ends_with(suffix) && types.count(name.substr(0, name.size() - strlen(suffix))))
          name.resize(name.size() - strlen(suffix));
      auto it = reference.find(name);
      if (it == reference.end()) continue;  // named above
      size_t open = line.find('{'), close = line.find('}');
      if (open == std::string::npos || close == std::string::npos) continue;
      std::string labels = line.substr(open + 1, close - open - 1);
      for (size_t a = 0; a < labels.size();) {
        size_t eq = labels.find("=\"", a);
        if (eq == std::string::npos) break;
        std::string label = labels.substr(a, eq - a);
        if (label != "le") {
          EXPECT_TRUE(it->second.labels.count(label))
              << name << " has label " << label << ", not in docs/metrics.md";
        }
        size_t end = labels.find('"', eq + 2);
        while (end != std::string::npos && labels[end - 1] == '\\') end = labels.find('"', end + 1);
        a = end == std::string::npos ? labels.size() : end + 2;  // past '",'
      }
    }
    EXPECT_GT(families, 100) << who;
  }
  for (const auto& [who, text] : {std::pair{"mgs", mgs}, std::pair{"client", client}}) {
    std::string file = c.dir.file(std::string(who) + ".prom");
    write_file(file, text);
    auto [rc, out] = run({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file + " 2>&1"});
    EXPECT_EQ(rc, 0) << who << ": " << out;
    EXPECT_EQ(out, "") << who;
  }
}

// The packaged alert rules and the Grafana board: every expression is valid PromQL
// (promtool checks it, written as a recording rule), and every pfsnet_ metric they name is
// a family a real MGS or client serves -- so a renamed metric breaks this test, not the
// operator's board.
TEST(PrometheusTest, PackagedRulesAndDashboardUseOnlyMetricsPfsnetdServes) {
  if (access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "needs promtool (prometheus)";
  const std::string root = PFSNET_SOURCE_DIR;
  std::string rules_file = root + "/packaging/prometheus/pfsnet-rules.yml";
  auto [rc, out] = run({"/usr/bin/promtool", "check", "rules", rules_file});
  ASSERT_EQ(rc, 0) << out;
  json board =
      json::parse(read_file(root + "/packaging/grafana/pfsnet-dashboard.json"), nullptr, false);
  ASSERT_TRUE(board.is_object()) << "the dashboard is not JSON";
  ASSERT_FALSE(board["panels"].empty());
  // The exprs, Grafana's variables replaced by what they stand for.
  std::vector<std::string> exprs;
  for (const json& p : board["panels"]) {
    EXPECT_TRUE(p.contains("title") && p.contains("gridPos")) << p.dump();
    ASSERT_FALSE(p["targets"].empty()) << p["title"];
    for (const json& t : p["targets"]) {
      std::string e = t["expr"];
      for (auto [var, value] : {std::pair{std::string("$__rate_interval"), std::string("1m")},
                                std::pair{std::string("$instance"), std::string(".*")}})
        for (size_t at = e.find(var); at != std::string::npos; at = e.find(var, at))
          e.replace(at, var.size(), value);
      EXPECT_EQ(e.find('$'), std::string::npos) << "unknown variable in " << e;
      exprs.push_back(e);
    }
  }
  TempDir dir;
  std::string as_rules = "groups:\n  - name: board\n    rules:\n";
  for (size_t i = 0; i < exprs.size(); ++i)
    as_rules +=
        "      - record: board:expr" + std::to_string(i) + "\n        expr: '" + exprs[i] + "'\n";
  write_file(dir.file("board.yml"), as_rules);
  std::tie(rc, out) = run({"/usr/bin/promtool", "check", "rules", dir.file("board.yml")});
  EXPECT_EQ(rc, 0) << out << as_rules;

  // The families a real MGS and client serve.
  auto [oa, ob] = mgs_and_client(true, true);
  TwoDaemons c(oa, ob);
  ASSERT_TRUE(c.ready());
  std::set<std::string> served;
  for (int host : {2, 3}) {
    httplib::Client h(loopback(host), 9708);
    h.set_connection_timeout(2);
    h.set_read_timeout(5);
    auto r = h.Get("/metrics");
    ASSERT_TRUE(r && r->status == 200);
    std::istringstream in(r->body);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("# TYPE ", 0) == 0) served.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  ASSERT_GT(served.size(), 50u);
  std::string everything = read_file(rules_file);
  for (const std::string& e : exprs) everything += "\n" + e;
  std::regex metric("pfsnet_[a-z0-9_]+");
  std::set<std::string> used;
  for (auto it = std::sregex_iterator(everything.begin(), everything.end(), metric);
       it != std::sregex_iterator(); ++it) {
    std::string name = it->str();
    size_t before = it->position();
    if (before > 0 && everything[before - 1] == ':') continue;  // a recording rule's name part
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (name.ends_with(suffix) && served.count(name.substr(0, name.size() - strlen(suffix))))
        name = name.substr(0, name.size() - strlen(suffix));
    used.insert(name);
  }
  EXPECT_GT(used.size(), 20u);
  for (const std::string& name : used) EXPECT_TRUE(served.count(name)) << name << " is not served";
}

// Health events on /metrics: a problem this node sees (its peer NI made unhealthy by errors
// from a fault rule) counts as started, and as ended once the peer is healthy again. The
// client lists it as its own (list="node"), the MGS in the cluster's list (list="cluster").
TEST(PrometheusTest, HealthEventsCountProblemsThatStartAndEnd) {
  const std::string fast = "[health]\nreport_interval = 0.5\n";
  auto [oa, ob] = mgs_and_client(true, true, fast);
  TwoDaemons c(oa, ob);
  ASSERT_TRUE(c.ready());
  const std::string a = c.a.nid().to_string();
  auto counter = [&](const std::string& name) {
    httplib::Client h(loopback(3), 9708);
    h.set_connection_timeout(2);
    h.set_read_timeout(5);
    auto r = h.Get("/metrics");
    if (!r || r->status != 200) return -1.0;
    std::string prefix = name + "{cause=\"UNHEALTHY\"} ";
    size_t p = r->body.find(prefix);
    return p == std::string::npos ? 0.0 : std::atof(r->body.c_str() + p + prefix.size());
  };
  EXPECT_EQ(counter("pfsnet_health_problems_started_total"), 0);
  auto [frc, fout] =
      run({PFSNET_BIN, "--socket", c.b.socket(), "fault", "add", "drop", "--dst", a, "--type",
           "PING", "--rate", "1", "--health", "PEER_NI_UNREACHABLE", "--json"});
  ASSERT_EQ(frc, 0) << fout;
  uint64_t id = last_json_line(fout)["added"]["id"].get<uint64_t>();
  EXPECT_NE(run({PFSNET_BIN, "--socket", c.b.socket(), "ping", a, "--count", "2", "--timeout", "1"})
                .first,
            0);
  EXPECT_TRUE(
      eventually([&] { return counter("pfsnet_health_problems_started_total") >= 1; }, 15000ms));
  EXPECT_EQ(counter("pfsnet_health_problems_ended_total"), 0);
  auto metrics = [](int host) {
    httplib::Client h(loopback(host), 9708);
    h.set_connection_timeout(2);
    h.set_read_timeout(5);
    auto r = h.Get("/metrics");
    return r && r->status == 200 ? r->body : std::string();
  };
  const std::string problem =
      "pfsnet_problem{kind=\"peer_ni\",subject=\"" + a + "\",cause=\"UNHEALTHY\",code=\"\",";
  std::string mgs;
  EXPECT_TRUE(eventually(
      [&] {
        mgs = metrics(2);
        return mgs.find(problem + "muted=\"0\",list=\"cluster\"} 1\n") != std::string::npos;
      },
      15000ms))
      << mgs;
  EXPECT_NE(metrics(3).find(problem + "muted=\"0\",list=\"node\"} 1\n"), std::string::npos);
  ASSERT_EQ(run({PFSNET_BIN, "--socket", c.b.socket(), "fault", "del", std::to_string(id)}).first,
            0);
  EXPECT_TRUE(
      eventually([&] { return counter("pfsnet_health_problems_ended_total") >= 1; }, 30000ms));
}

}  // namespace
}  // namespace pfsnet::testing
