// Security of a running pfsnetd (issue 15 item 3): TLS between daemons, and a plaintext
// daemon refused by name; the HTTP endpoint on localhost unless told otherwise, and its
// token; the admin socket's check of the peer's credentials.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cluster.h"

namespace pfsnet::testing {
namespace {

using nlohmann::json;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

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

// A CA and, for each host, a certificate of it naming that host's loopback address in its
// subjectAltName (`days` valid), made with the openssl command; `names` overrides the
// address a host's certificate names.
struct TestPki {
  std::string dir;
  bool make_ca() {
    std::string cmd = "set -e; cd " + dir +
                      "; openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                      "-nodes -keyout ca.key -out ca.pem -days 400 -subj /CN=test-ca "
                      "2>/dev/null";
    return std::system(cmd.c_str()) == 0;
  }
  bool issue(int host, int days, const std::string& names = "") {
    const std::string n = "n" + std::to_string(host);
    write_file(dir + "/" + n + ".ext",
               "subjectAltName=IP:" + (names.empty() ? loopback(host) : names) + "\n");
    std::string cmd = "set -e; cd " + dir + "; openssl req -newkey ec -pkeyopt " +
                      "ec_paramgen_curve:prime256v1 -nodes -keyout " + n + ".key -out " + n +
                      ".csr -subj /CN=" + n + " 2>/dev/null; openssl x509 -req -in " + n +
                      ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -out " + n + ".pem -days " +
                      std::to_string(days) + " -extfile " + n + ".ext 2>/dev/null";
    return std::system(cmd.c_str()) == 0;
  }
  std::string tls(int host) const {
    const std::string n = dir + "/n" + std::to_string(host);
    return "[tls]\nenabled = true\ncert_file = \"" + n + ".pem\"\nkey_file = \"" + n +
           ".key\"\nca_file = \"" + dir + "/ca.pem\"\n";
  }
};

// With certificates, each daemon's names its NID: two such talk; a third whose certificate
// (of the same CA) names another address is refused by name at both ends; and a
// certificate that expires in 10 days is a SETTINGS problem in `pfsnet health`, naming it.
TEST(SecurityTest, CertificatesNameTheirNodeAndOneNearItsEndIsReported) {
  TempDir dir;
  TestPki pki{dir.path()};
  ASSERT_TRUE(pki.make_ca());
  ASSERT_TRUE(pki.issue(2, 10));
  ASSERT_TRUE(pki.issue(3, 200));
  ASSERT_TRUE(pki.issue(4, 200, loopback(9)));
  std::string key = TwoDaemons::write_key(dir);
  DaemonOptions oa, ob, oc;
  oa.extra = pki.tls(2);
  ob.extra = pki.tls(3);
  oc.extra = pki.tls(4);
  Daemon a(dir, 2, key, oa), b(dir, 3, key, ob), c(dir, 4, key, oc);
  ASSERT_TRUE(a.ready() && b.ready() && c.ready()) << a.process().output();
  auto [rc, out] =
      run({PFSNET_BIN, "--socket", a.socket(), "ping", b.nid().to_string(), "-c", "2"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(a.process().wait_for_output("TLSv1.3", 5000ms)) << a.process().output();
  // c's certificate names loopback(9), not its own NID: b refuses it, and c hears why.
  std::tie(rc, out) =
      run({PFSNET_BIN, "--socket", c.socket(), "ping", b.nid().to_string(), "-c", "1"});
  EXPECT_NE(rc, 0) << out;
  const std::string why = "its certificate (CN n4) names " + loopback(9) +
                          " in subjectAltName, not " + loopback(4) + " of " + c.nid().to_string() +
                          ", which the peer announces";
  EXPECT_NE(out.find(why), std::string::npos) << out;
  EXPECT_TRUE(b.process().wait_for_output(why, 5000ms)) << b.process().output();
  // a's certificate ends within 30 days: its health says so, and b's does not.
  std::tie(rc, out) = run({PFSNET_BIN, "--socket", a.socket(), "health", "--json"});
  ASSERT_EQ(rc, 0) << out;
  json h = last_json_line(out);
  bool found = false;
  for (const json& p : h["problems"])
    if (p["code"] == "certificate_expires") {
      found = true;
      EXPECT_EQ(p["cause"], "SETTINGS");
      EXPECT_NE(p["evidence"].get<std::string>().find("tls.cert_file " + dir.path() +
                                                      "/n2.pem (CN n2) expires in 10 day(s)"),
                std::string::npos)
          << out;
    }
  EXPECT_TRUE(found) << out;
  std::tie(rc, out) = run({PFSNET_BIN, "--socket", b.socket(), "health", "--json"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("certificate_"), std::string::npos) << out;
  std::tie(rc, out) = run({PFSNET_BIN, "--socket", a.socket(), "health", "-v"});
  EXPECT_NE(out.find("expires in 10 day(s)"), std::string::npos) << out;
  // The columns stay aligned with the code beside the cause: "what" above "settings".
  std::istringstream lines(out);
  std::string header, line, row;
  while (std::getline(lines, line)) {
    if (line.rfind("since", 0) == 0) header = line;
    if (line.find("SETTINGS certificate_expires") != std::string::npos) row = line;
  }
  ASSERT_FALSE(header.empty() || row.empty()) << out;
  EXPECT_EQ(header.find(" what "), row.find(" settings ")) << out;
}

// Rotating the cluster key with no downtime (docs/security.md, "Rotating the cluster
// key"), through the CLI's three steps and SIGHUP, on three daemons each with its own key
// file: an MGS (a), a server (b) and a client (c). Pings from c to a run all along and
// none fails; b is restarted at each stage, so it makes new connections both ways with
// nodes at every other stage (its pings carry --wait: a restart is no failure); each end's
// `peers --json` says which of its keys the other proved with; at the end a node with the
// old key alone is refused. With `tls`, the same keyed TLS (the PSK of each key).
void rotate_keys_under_load(bool tls) {
  TempDir dir;
  const std::string k1 = "rotation-test-first-key-000000001";
  std::map<int, std::string> keys;
  for (int host : {2, 3, 4}) {
    keys[host] = dir.file("n" + std::to_string(host) + ".key");
    write_file(keys[host], k1, 0600);
  }
  const std::string mgs = "mgs = [\"" + loopback(2) + "@tcp\"]\n";
  auto options = [&](const std::string& roles) {
    DaemonOptions o;
    o.node_extra = "roles = [" + roles + "]\n" + mgs;
    if (tls) o.extra = "[tls]\nenabled = true\n";
    return o;
  };
  Daemon a(dir, 2, keys[2], options("\"mgs\", \"server\""));
  auto b = std::make_unique<Daemon>(dir, 3, keys[3], options("\"server\""));
  Daemon c(dir, 4, keys[4], options("\"client\""));
  ASSERT_TRUE(a.ready() && b->ready() && c.ready()) << a.process().output();
  auto cli = [](const Daemon& d, std::vector<std::string> args) {
    args.insert(args.begin(), {PFSNET_BIN, "--socket", d.socket()});
    return run(args);
  };
  // The load: pings from c to a, back to back, until told to stop (bounded).
  std::atomic<bool> stop{false};
  std::atomic<int> load_ok{0}, load_failed{0};
  std::string load_error;
  std::thread load([&] {
    for (int i = 0; i < 2000 && !stop; ++i) {
      auto [rc, out] = cli(c, {"ping", a.nid().to_string(), "-c", "5", "--wait"});
      (rc == 0 ? load_ok : load_failed)++;
      if (rc != 0 && load_error.empty()) load_error = out;
    }
  });
  // SIGHUP to each of `ds`, returning once each has logged its new keys.
  auto reload = [&](std::vector<Daemon*> ds) {
    for (Daemon* d : ds) {
      const size_t before = count(d->process().output(), "cluster keys changed");
      d->process().kill(SIGHUP);
      EXPECT_TRUE(eventually(
          [&] { return count(d->process().output(), "cluster keys changed") > before; }, 5000ms))
          << d->process().output();
    }
  };
  // b restarted (its keys as they are now); then a and b reach each other anew.
  auto restart_b = [&] {
    b.reset();
    b = std::make_unique<Daemon>(dir, 3, keys[3], options("\"server\""));
    ASSERT_TRUE(b->ready()) << b->process().output();
    auto [rc, out] = cli(a, {"ping", b->nid().to_string(), "-c", "3", "--wait", "--timeout", "20"});
    EXPECT_EQ(rc, 0) << out;
  };
  // Which of `from`'s keys `to` proved with, by `from`'s peers view.
  auto key_seen = [&](const Daemon& from, const Daemon& to) {
    auto [rc, out] = cli(from, {"peers", "--json"});
    if (rc != 0) return std::string("(peers failed)");
    const json all = last_json_line(out);
    for (const json& p : all["peers"])
      if (p["nid"] == to.nid().to_string()) return p.value("cluster_key", std::string("(none)"));
    return "(no entry) " + out;
  };

  // 1. The next key, on one node, copied to every node's key file's side; each reloads.
  auto [rc, out] = run({PFSNET_BIN, "keygen", "--next", keys[2]});
  ASSERT_EQ(rc, 0) << out;
  const std::string k2 = read_file(keys[2] + ".next");
  ASSERT_EQ(k2.size(), 32u);
  for (int host : {3, 4}) write_file(keys[host] + ".next", k2, 0600);
  reload({&a, b.get(), &c});
  restart_b();
  EXPECT_EQ(key_seen(a, *b), "current");

  // 2. a commits first: it proves with the new key, b (holding it as next) accepts it, and
  // a accepts b's old one as its previous.
  std::tie(rc, out) = run({PFSNET_BIN, "keygen", "--commit", keys[2]});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(read_file(keys[2]), k2);
  EXPECT_EQ(read_file(keys[2] + ".prev"), k1);
  reload({&a});
  restart_b();
  EXPECT_EQ(key_seen(a, *b), "previous");
  EXPECT_EQ(key_seen(*b, a), "next");

  // 3. The others commit; b, restarted, proves with the new key everywhere.
  for (int host : {3, 4}) ASSERT_EQ(run({PFSNET_BIN, "keygen", "--commit", keys[host]}).first, 0);
  reload({&c});
  restart_b();
  EXPECT_EQ(key_seen(a, *b), "current");
  EXPECT_EQ(key_seen(*b, a), "current");

  // 4. Every node retires the old key; a node that holds only the old one is refused.
  for (int host : {2, 3, 4})
    ASSERT_EQ(run({PFSNET_BIN, "keygen", "--retire", keys[host]}).first, 0);
  reload({&a, b.get(), &c});
  restart_b();
  stop = true;
  load.join();
  EXPECT_EQ(load_failed.load(), 0) << load_error;
  EXPECT_GT(load_ok.load(), 0);
  const std::string old_key = dir.file("old.key");
  write_file(old_key, k1, 0600);
  Daemon stale(dir, 5, old_key, options("\"client\""));
  ASSERT_TRUE(stale.ready()) << stale.process().output();
  std::tie(rc, out) = cli(stale, {"ping", a.nid().to_string(), "-c", "1"});
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find(tls ? "TLS" : "wrong cluster key"), std::string::npos) << out;
  // The rotation's steps refuse what is out of order, and change nothing.
  std::tie(rc, out) = run({PFSNET_BIN, "keygen", "--commit", keys[2]});
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find(".next does not exist"), std::string::npos) << out;
  std::tie(rc, out) = run({PFSNET_BIN, "keygen", "--retire", keys[2]});
  EXPECT_NE(rc, 0);
  EXPECT_EQ(read_file(keys[2]), k2);
}

TEST(SecurityTest, TheClusterKeyIsRotatedWithNoFailedRpc) { rotate_keys_under_load(false); }

TEST(SecurityTest, TheClusterKeyIsRotatedWithNoFailedRpcUnderTls) { rotate_keys_under_load(true); }

}  // namespace
}  // namespace pfsnet::testing
