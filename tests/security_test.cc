// Security of a running pfsnetd (issue 15 item 3): TLS between daemons, and a plaintext
// daemon refused by name; the HTTP endpoint on localhost unless told otherwise, and its
// token; the admin socket's check of the peer's credentials.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "cluster.h"

namespace pfsnet::testing {
namespace {

TEST(SecurityTest, DaemonsTalkOverTlsAndAPlaintextDaemonIsRefusedByName) {
  DaemonOptions tls;
  tls.extra = "[tls]\nenabled = true\n";
  TwoDaemons c(tls, tls);
  ASSERT_TRUE(c.ready()) << c.a.process().output();
  auto [rc, out] = run({PFSNET_BIN, "--socket", c.a.socket(), "ping", c.b.nid().to_string(), "-c",
                        "3", "-s", "65536"});
  EXPECT_EQ(rc, 0) << out;
  // Both ends name what carries the connection.
  EXPECT_TRUE(c.a.process().wait_for_output("TLSv1.3 TLS_AES_128_GCM_SHA256 psk", 5000ms))
      << c.a.process().output();
  EXPECT_TRUE(c.b.process().wait_for_output("TLSv1.3 TLS_AES_128_GCM_SHA256 psk", 5000ms));

  Daemon plain(c.dir, 4, c.key);
  ASSERT_TRUE(plain.ready()) << plain.process().output();
  auto [rc2, out2] =
      run({PFSNET_BIN, "--socket", plain.socket(), "ping", c.b.nid().to_string(), "-c", "1"});
  EXPECT_NE(rc2, 0);
  EXPECT_NE(out2.find("requires TLS"), std::string::npos) << out2;
  EXPECT_TRUE(c.b.process().wait_for_output("refusing plaintext connection", 5000ms))
      << c.b.process().output();
  // The TLS daemons still talk.
  EXPECT_EQ(
      run({PFSNET_BIN, "--socket", c.a.socket(), "ping", c.b.nid().to_string(), "-c", "1"}).first,
      0);
}

TEST(SecurityTest, HttpBindsLocalhostByDefaultAndRequiresItsToken) {
  TempDir dir;
  std::string key = TwoDaemons::write_key(dir);
  std::string token_file = dir.file("http.token");
  const std::string token = "tok-0123456789abcdef-xyz";
  write_file(token_file, token + "\n", 0600);
  int port = 20000 + static_cast<int>(getpid() % 20000);
  DaemonOptions o;
  o.http = ":" + std::to_string(port);  // no host: 127.0.0.1
  o.node_extra = "http_token_file = \"" + token_file + "\"\n";
  Daemon d(dir, 2, key, o);
  ASSERT_TRUE(d.ready()) << d.process().output();

  httplib::Client local("127.0.0.1", port);
  local.set_connection_timeout(5);
  local.set_read_timeout(5);
  auto r = local.Get("/metrics");
  ASSERT_TRUE(r) << "no HTTP answer on 127.0.0.1";
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("requires a token"), std::string::npos) << r->body;
  r = local.Get("/api/v1/nis", {{"Authorization", "Bearer not-the-token-0123456789"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("wrong token"), std::string::npos);
  r = local.Get("/metrics", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("pfsnet_"), std::string::npos);
  // Only 127.0.0.1 listens: the daemon's own NI address does not answer HTTP.
  httplib::Client other(loopback(2), port);
  other.set_connection_timeout(2);
  EXPECT_FALSE(other.Get("/metrics"));

  // A token file others can read is refused at startup, by name.
  chmod(token_file.c_str(), 0644);
  DaemonOptions o2 = o;
  o2.http = ":" + std::to_string(port + 1);
  Daemon bad(dir, 3, key, o2);
  EXPECT_FALSE(bad.ready());
  bad.process().wait_exit(5000ms);
  EXPECT_NE(bad.process().output().find("chmod 600"), std::string::npos) << bad.process().output();
}

TEST(SecurityTest, AdminSocketRefusesAnotherUserEvenWhenItsModeLetsThemIn) {
  TempDir dir;
  std::string key = TwoDaemons::write_key(dir);
  Daemon d(dir, 2, key);
  ASSERT_TRUE(d.ready()) << d.process().output();
  // The owner is served.
  ASSERT_EQ(run({PFSNET_BIN, "--socket", d.socket(), "nis"}).first, 0);
  // A mistake opens the file to everyone; the credentials check still holds.
  chmod(dir.path().c_str(), 0711);
  chmod(d.socket().c_str(), 0666);
  // The CLI where user nobody can run it (the build tree may not be open to it).
  std::string cli = dir.file("pfsnet");
  std::filesystem::copy_file(PFSNET_BIN, cli);
  chmod(cli.c_str(), 0755);
  auto [rc, out] = run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", cli,
                        "--socket", d.socket(), "nis"});
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("uid 65534"), std::string::npos) << out;
  EXPECT_NE(out.find("not allowed on the admin socket"), std::string::npos) << out;
  EXPECT_TRUE(d.process().wait_for_output("admin socket: refused", 5000ms));
  // And the owner still is.
  EXPECT_EQ(run({PFSNET_BIN, "--socket", d.socket(), "nis"}).first, 0);
}

}  // namespace
}  // namespace pfsnet::testing
