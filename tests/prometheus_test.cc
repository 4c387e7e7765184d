// A real Prometheus server (Debian's `prometheus`) scrapes a pfsnetd on loopback and its
// query API returns a pfsnet_ series with the expected value.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

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
}

}  // namespace
}  // namespace pfsnet::testing
