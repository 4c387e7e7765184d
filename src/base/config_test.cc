#include <gtest/gtest.h>
#include <pfsnet/config.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>

namespace pfsnet {
namespace {

std::string error_of(std::string_view text) {
  auto r = parse_config(text, "test.toml");
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

TEST(ConfigTest, DefaultsWhenEmpty) {
  auto r = parse_config("", "empty.toml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->lnet.credits, 64);
  EXPECT_EQ(r->lnet.peer_credits, 8);
  EXPECT_EQ(r->lnet.transaction_timeout, 50);
  EXPECT_EQ(r->lnet.busy_poll_us, 20);
  EXPECT_EQ(r->lnet.io_threads, 0);          // socklnd's count for the CPUs
  EXPECT_EQ(r->lnet.zc_min_payload, 16384);  // socklnd's
  EXPECT_EQ(r->rpc.max_rpcs_in_flight, 8);
  EXPECT_EQ(r->stats.maxBlockSize, 1048576);
  EXPECT_EQ(r->max_bulk(), 2097152);
  EXPECT_EQ(r->stats.rpcPerfNumberDayIntervals, 30);
  EXPECT_EQ(r->membership.client_ping_interval, 50);
  EXPECT_FALSE(r->node.name.empty());
}

TEST(ConfigTest, ReadsEveryKey) {
  auto r = parse_config(R"(
[node]
name = "oss01"
roles = ["server", "client"]
mgs = ["127.0.0.2@tcp"]
cluster_key_file = "/tmp/k"
admin_socket = "/tmp/s.sock"
http = "127.0.0.1:9708"

[[net]]
nid = "127.0.0.4@tcp"
port = 7990

[[net]]
nid = "127.0.1.4@tcp1"

[lnet]
credits = 256
peer_credits = 16
transaction_timeout = 10
retry_count = 3
health_sensitivity = 50
recovery_interval = 2

[rpc]
max_rpcs_in_flight = 32

[stats]
rpcPerfRawStatBufferSize = 1024
rpcPerfRawExecBufferSize = 2048
rpcPerfNumberSecondIntervals = 10
rpcPerfNumberMinuteIntervals = 5
rpcPerfNumberHourIntervals = 2
rpcPerfNumberDayIntervals = 1
maxBlockSize = 4194304

[membership]
client_ping_interval = 20
server_ping_interval = 5
ping_miss_limit = 4
)",
                        "full.toml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->node.name, "oss01");
  ASSERT_EQ(r->node.roles.size(), 2u);
  ASSERT_EQ(r->node.mgs.size(), 1u);
  EXPECT_EQ(r->node.mgs[0].to_string(), "127.0.0.2@tcp");
  EXPECT_EQ(r->node.http, "127.0.0.1:9708");
  ASSERT_EQ(r->nets.size(), 2u);
  EXPECT_EQ(r->nets[0].port, 7990);
  EXPECT_EQ(r->nets[1].port, 7988);
  EXPECT_EQ(r->nets[1].nid.to_string(), "127.0.1.4@tcp1");
  EXPECT_EQ(r->lnet.credits, 256);
  EXPECT_EQ(r->lnet.recovery_interval, 2);
  EXPECT_EQ(r->rpc.max_rpcs_in_flight, 32);
  EXPECT_EQ(r->stats.rpcPerfNumberDayIntervals, 1);
  EXPECT_EQ(r->stats.maxBlockSize, 4194304);
  EXPECT_EQ(r->membership.ping_miss_limit, 4);
}

TEST(ConfigTest, UnknownKeyNamesFileLineAndKey) {
  EXPECT_EQ(error_of("[lnet]\ncredits = 4\ncredit = 5\n"),
            "test.toml:3: key 'lnet.credit': unknown key");
  EXPECT_EQ(error_of("\n[lnetx]\n"), "test.toml:2: key 'lnetx': unknown section");
  EXPECT_EQ(error_of("[[net]]\nnid = \"1.2.3.4@tcp\"\nbogus = 1\n"),
            "test.toml:3: key 'net.bogus': unknown key");
}

TEST(ConfigTest, AJobIdRuleIsCheckedWhereItIsRead) {
  EXPECT_EQ(error_of("[rpc]\njobid_name = \"%e.%q\"\n"),
            "test.toml:2: key 'rpc.jobid_name': unknown code %q (%e %u %g %h %H %p %j %%)");
  EXPECT_EQ(error_of("[rpc]\njobid_var = \"SLURM JOB\"\n"),
            "test.toml:2: key 'rpc.jobid_var': must be disable, procname_uid, nodelocal or an "
            "environment variable's name (letters, digits, '_')");
  auto ok = parse_config("[rpc]\njobid_var = \"SLURM_JOB_ID\"\njobid_name = \"%j.%u\"\n", "t.toml");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->rpc.jobid_var, "SLURM_JOB_ID");
  EXPECT_EQ(ok->rpc.jobid_name, "%j.%u");
}

TEST(ConfigTest, WrongTypeIsAnError) {
  EXPECT_EQ(error_of("[lnet]\ncredits = \"64\"\n"),
            "test.toml:2: key 'lnet.credits': must be an integer");
  EXPECT_EQ(error_of("[lnet]\ncredits = 6.5\n"),
            "test.toml:2: key 'lnet.credits': must be an integer");
  EXPECT_EQ(error_of("[node]\nname = 3\n"), "test.toml:2: key 'node.name': must be a string");
  EXPECT_EQ(error_of("[node]\nroles = \"client\"\n"),
            "test.toml:2: key 'node.roles': must be an array of strings");
  EXPECT_EQ(error_of("lnet = 3\n"), "test.toml:1: key 'lnet': must be a table");
}

TEST(ConfigTest, OutOfRangeIsAnError) {
  EXPECT_EQ(error_of("[lnet]\nbusy_poll_us = -1\n"),
            "test.toml:2: key 'lnet.busy_poll_us': value -1 is out of range 0..10000");
  EXPECT_EQ(error_of("[lnet]\nio_threads = 257\n"),
            "test.toml:2: key 'lnet.io_threads': value 257 is out of range 0..256");
  EXPECT_EQ(error_of("[lnet]\nzc_min_payload = -1\n"),
            "test.toml:2: key 'lnet.zc_min_payload': value -1 is out of range 0..1073741824");
  EXPECT_EQ(error_of("[lnet]\npeer_credits = 0\n"),
            "test.toml:2: key 'lnet.peer_credits': value 0 is out of range 1..65536");
  EXPECT_EQ(error_of("[[net]]\nnid = \"1.2.3.4@tcp\"\nport = 70000\n"),
            "test.toml:3: key 'net.port': value 70000 is out of range 1..65535");
  EXPECT_EQ(error_of("[[net]]\nnid = \"1.2.3.4@tcp\"\nspeed_mbit = -100\n"),
            "test.toml:3: key 'net.speed_mbit': value -100 is out of range 0..10000000");
  EXPECT_EQ(error_of("[mesh]\nthrottled_min_excess_ms = -1\n"),
            "test.toml:2: key 'mesh.throttled_min_excess_ms': value -1 is out of range 0..60000");
  EXPECT_EQ(error_of("[stats]\nmaxBlockSize = 1000000\n"),
            "test.toml:2: key 'stats.maxBlockSize': must be a power of two");
  EXPECT_EQ(error_of("[node]\nhttp = \"127.0.0.1\"\n"),
            "test.toml:2: key 'node.http': must be HOST:PORT, :PORT or PORT (port 1..65535)");
}

TEST(ConfigTest, HttpBindsLocalhostUnlessAHostIsGiven) {
  for (const char* given : {"9708", ":9708"}) {
    auto r = parse_config(std::string("[node]\nhttp = \"") + given + "\"\n", "t.toml");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->node.http, "127.0.0.1:9708") << given;
  }
  auto r = parse_config("[node]\nhttp = \"0.0.0.0:9708\"\n", "t.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node.http, "0.0.0.0:9708");
  EXPECT_EQ(error_of("[node]\nhttp = \":0\"\n"),
            "test.toml:2: key 'node.http': must be HOST:PORT, :PORT or PORT (port 1..65535)");
}

TEST(ConfigTest, TlsIsOffByDefaultAndCertificatesGoTogether) {
  auto r = parse_config("", "t.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->tls.enabled);
  r = parse_config("[tls]\nenabled = true\n", "t.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->tls.enabled);
  EXPECT_TRUE(r->tls.cert_file.empty());
  r = parse_config("[tls]\nenabled = true\ncert_file = \"c\"\nkey_file = \"k\"\nca_file = \"a\"\n",
                   "t.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tls.ca_file, "a");
  EXPECT_EQ(error_of("[tls]\nenabled = true\ncert_file = \"c\"\n"),
            "test.toml:1: key 'tls.cert_file': cert_file, key_file and ca_file go together "
            "(none: keyed from the cluster key)");
  EXPECT_EQ(error_of("[tls]\nmode = \"psk\"\n"), "test.toml:2: key 'tls.mode': unknown key");
  // Who makes the records: ours by default, OpenSSL's on request, nothing else.
  EXPECT_EQ(r->tls.records, "ipsec-mb");
  r = parse_config("[tls]\nenabled = true\nrecords = \"openssl\"\n", "t.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tls.records, "openssl");
  EXPECT_EQ(error_of("[tls]\nrecords = \"kernel\"\n"),
            "test.toml:2: key 'tls.records': must be one of ipsec-mb, openssl");
}

TEST(ConfigTest, HttpTokenFileIsASecret) {
  std::string path = ::testing::TempDir() + "/http_token_" + std::to_string(::getpid());
  {
    std::ofstream out(path);
    out << "0123456789abcdef0123\n";
  }
  ::chmod(path.c_str(), 0644);
  auto t = load_http_token(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("chmod 600"), std::string::npos);
  ::chmod(path.c_str(), 0600);
  t = load_http_token(path);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(*t, "0123456789abcdef0123");  // the trailing newline is not part of it
  {
    std::ofstream out(path);
    out << "short\n";
  }
  t = load_http_token(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("at least 16 bytes"), std::string::npos);
  ::unlink(path.c_str());
  EXPECT_EQ(load_http_token(path).status().code(), Code::kNotFound);
}

TEST(ConfigTest, BadValuesAreErrors) {
  EXPECT_NE(error_of("[node]\nroles = [\"client\", \"oss\"]\n").find("unknown role 'oss'"),
            std::string::npos);
  EXPECT_NE(error_of("[node]\nmgs = [\"1.2.3@tcp\"]\n")
                .find("test.toml:2: key 'node.mgs': malformed NID"),
            std::string::npos);
  EXPECT_EQ(error_of("[[net]]\nport = 7988\n"),
            "test.toml:1: key 'net.nid': is required in every [[net]]");
  EXPECT_NE(error_of("[[net]]\nnid=\"1.2.3.4@tcp\"\n[[net]]\nnid=\"1.2.3.4@tcp\"\n")
                .find("duplicate NID"),
            std::string::npos);
  EXPECT_NE(error_of("[lnet\ncredits=1").find("test.toml:1: syntax error"), std::string::npos);
  // A key that went (issue 67) says where its job went.
  EXPECT_NE(error_of("[rpc]\nreply_cache_bytes = 1048576\n")
                .find("key 'rpc.reply_cache_bytes': is no longer a key"),
            std::string::npos);
  EXPECT_NE(error_of("[lnet]\nmin_reconnect_ms = 5000\nmax_reconnect_ms = 1000\n")
                .find("must not be above lnet.max_reconnect_ms"),
            std::string::npos);
  EXPECT_NE(error_of("[lnet]\nmin_reconnect_ms = 0\n").find("lnet.min_reconnect_ms"),
            std::string::npos);
  EXPECT_EQ(error_of("[node]\nlog_format = \"xml\"\n"),
            "test.toml:2: key 'node.log_format': must be text or json");
}

TEST(ConfigTest, EtcdEndpointsAreHttpHostPortAndTheLeaseIsBounded) {
  auto cfg = parse_config(
      "[membership]\netcd = [\"http://127.0.0.1:2379\", \"http://etcd2:2379/\"]\n"
      "etcd_lease = 3\netcd_key = \"c1/mgs\"\n",
      "test.toml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->membership.etcd.size(), 2u);
  EXPECT_EQ(cfg->membership.etcd_lease, 3);
  EXPECT_EQ(cfg->membership.etcd_key, "c1/mgs");
  auto none = parse_config("", "test.toml");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->membership.etcd.empty());
  EXPECT_EQ(none->membership.etcd_key, "pfsnet/mgs/leader");
  for (const char* bad : {"127.0.0.1:2379", "https://h:2379", "http://h", "http://:2379",
                          "http://h:0", "http://h:99999"})
    EXPECT_NE(error_of(std::string("[membership]\netcd = [\"") + bad + "\"]\n")
                  .find("is not http://HOST:PORT"),
              std::string::npos)
        << bad;
  EXPECT_NE(error_of("[membership]\netcd_lease = 1\n").find("etcd_lease"), std::string::npos);
  EXPECT_NE(error_of("[membership]\netcd_key = \"\"\n").find("etcd_key"), std::string::npos);
}

TEST(ConfigTest, FabricKeysApplyToO2ibNetsOnly) {
  auto r = parse_config(R"(
[[net]]
nid = "127.0.0.2@tcp"
[[net]]
nid = "127.0.1.2@o2ib"
[[net]]
nid = "127.0.2.2@o2ib1"
provider = "tcp"
domain = "lo"
rx_depth = 16
msg_size = 8192
)",
                        "t.toml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->nets.size(), 3u);
  EXPECT_EQ(r->nets[1].provider, "verbs");  // the defaults: verbs on any device
  EXPECT_EQ(r->nets[1].domain, "");
  EXPECT_EQ(r->nets[1].rx_depth, 64);
  EXPECT_EQ(r->nets[1].msg_size, 4096);
  EXPECT_EQ(r->nets[2].provider, "tcp");
  EXPECT_EQ(r->nets[2].domain, "lo");
  EXPECT_EQ(r->nets[2].rx_depth, 16);
  EXPECT_EQ(r->nets[2].msg_size, 8192);
  // Shown for the o2ib nets only.
  int shown = 0;
  for (const auto& [k, v] : config_entries(*r))
    if (k == "net.provider") ++shown;
  EXPECT_EQ(shown, 2);

  EXPECT_EQ(error_of("[[net]]\nnid = \"1.2.3.4@tcp\"\nprovider = \"tcp\"\n"),
            "test.toml:3: key 'net.provider': applies to @o2ib nets only (1.2.3.4@tcp is "
            "carried by sockets)");
  EXPECT_EQ(error_of("[[net]]\nnid = \"1.2.3.4@o2ib\"\nrx_depth = 1\n"),
            "test.toml:3: key 'net.rx_depth': value 1 is out of range 2..4096");
  EXPECT_EQ(error_of("[[net]]\nnid = \"1.2.3.4@o2ib\"\nmsg_size = 128\n"),
            "test.toml:3: key 'net.msg_size': value 128 is out of range 256..1048576");
  EXPECT_EQ(error_of("[[net]]\nnid = \"1.2.3.4@o2ib\"\nprovider = \"\"\n"),
            "test.toml:3: key 'net.provider': must not be empty");
}

TEST(ConfigTest, AssignmentsAreValidatedLikeTheFile) {
  auto c = parse_config("[node]\nname = \"n1\"\n[[net]]\nnid = \"127.0.0.2@tcp\"\n", "t.toml");
  ASSERT_TRUE(c.ok());
  Config cfg = *c;
  ASSERT_TRUE(apply_config_assignments(
                  &cfg, {"stats.rpcPerfNumberSecondIntervals=120", "stats.maxBlockSize = 4194304"})
                  .ok());
  EXPECT_EQ(cfg.stats.rpcPerfNumberSecondIntervals, 120);
  EXPECT_EQ(cfg.stats.maxBlockSize, 4194304);
  EXPECT_EQ(cfg.node.name, "n1");
  ASSERT_EQ(cfg.nets.size(), 1u);  // untouched keys survive the round trip
  EXPECT_EQ(cfg.nets[0].nid.to_string(), "127.0.0.2@tcp");
  Config before = cfg;
  auto err = [&](std::vector<std::string> a) {
    Status s = apply_config_assignments(&cfg, a);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(cfg.stats.rpcPerfNumberSecondIntervals, before.stats.rpcPerfNumberSecondIntervals);
    return s.message();
  };
  EXPECT_EQ(err({"stats.rpcPerfNumberDayIntervals=2", "stats.maxBlockSize=1000"}),
            "key 'stats.maxBlockSize': value 1000 is out of range 16384..16777216");
  EXPECT_EQ(cfg.stats.rpcPerfNumberDayIntervals, 30);  // all or nothing
  EXPECT_EQ(err({"stats.bogus=1"}), "key 'stats.bogus': unknown key");
  EXPECT_EQ(err({"lnet.credits"}), "'lnet.credits': expected KEY=VALUE");
  EXPECT_EQ(err({"node.name=n2"}),
            "key 'node.name': 'n2' is not a TOML value (strings need quotes)");
  EXPECT_EQ(err({"lnet.credits=\"x\""}), "key 'lnet.credits': must be an integer");
}

// Per-peer RPCs in flight: an inline table of NID = RPCs, NIDs canonical, rendered so that
// it reads back, and every bad entry an error that changes nothing.
TEST(ConfigTest, PeerRpcsInFlight) {
  auto c = parse_config(
      "[rpc]\nmax_rpcs_in_flight = 8\npeer_rpcs_in_flight = { \"198.18.0.2@tcp\" = 64, "
      "\"198.18.0.3@tcp0\" = 16 }\n",
      "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rpc.peer_rpcs_in_flight,
            (std::map<std::string, int64_t>{{"198.18.0.2@tcp", 64}, {"198.18.0.3@tcp", 16}}));
  std::string shown;
  for (const auto& [k, v] : config_entries(*c))
    if (k == "rpc.peer_rpcs_in_flight") shown = v;
  EXPECT_EQ(shown, "{ \"198.18.0.2@tcp\" = 64, \"198.18.0.3@tcp\" = 16 }");
  Config cfg = *c;
  ASSERT_TRUE(
      apply_config_assignments(&cfg, {"rpc.peer_rpcs_in_flight={\"198.18.0.9@tcp\"=32}"}).ok());
  EXPECT_EQ(cfg.rpc.peer_rpcs_in_flight, (std::map<std::string, int64_t>{{"198.18.0.9@tcp", 32}}));
  ASSERT_TRUE(apply_config_assignments(&cfg, {"rpc.peer_rpcs_in_flight={}"}).ok());
  EXPECT_TRUE(cfg.rpc.peer_rpcs_in_flight.empty());
  auto bad = [](const std::string& v) {
    auto r = parse_config("[rpc]\npeer_rpcs_in_flight = " + v + "\n", "t.toml");
    EXPECT_FALSE(r.ok()) << v;
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(bad("64").find("must be a table of NID = RPCs"), std::string::npos);
  EXPECT_NE(bad("{ \"nonsense\" = 4 }").find("rpc.peer_rpcs_in_flight"), std::string::npos);
  EXPECT_NE(bad("{ \"198.18.0.2@tcp\" = 0 }").find("must be an integer 1..65536"),
            std::string::npos);
  EXPECT_NE(bad("{ \"198.18.0.2@tcp\" = \"x\" }").find("must be an integer"), std::string::npos);
}

TEST(ConfigTest, MissingFile) {
  auto r = load_config("/nonexistent/pfsnet.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "/nonexistent/pfsnet.toml: cannot read config file");
}

TEST(ConfigTest, ClusterKeyChecks) {
  std::string path = ::testing::TempDir() + "/pfsnet_key_test";
  { std::ofstream(path) << "short"; }
  chmod(path.c_str(), 0600);
  EXPECT_NE(load_cluster_key(path).status().message().find("at least 16 bytes"), std::string::npos);
  { std::ofstream(path) << "0123456789abcdef0123"; }
  chmod(path.c_str(), 0644);
  EXPECT_NE(load_cluster_key(path).status().message().find("chmod 600"), std::string::npos);
  chmod(path.c_str(), 0600);
  auto k = load_cluster_key(path);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, "0123456789abcdef0123");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pfsnet

namespace pfsnet {
namespace {

TEST(ConfigTest, EmulationTables) {
  auto r = parse_config(
      "[[emulation]]\nni = \"10.0.0.1@tcp\"\npeer = \"10.0.0.2@tcp\"\ndelay_ms = 25\n"
      "rate_mbit = 5000.5\n[[emulation]]\ndelay_ms = 0.5\n[[emulation]]\n"
      "ni = \"10.0.0.1@tcp\"\nrate_mbit = 1040\nshared = true\n",
      "e.toml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->emulation.size(), 3u);
  EXPECT_FALSE(r->emulation[0].shared);
  EXPECT_TRUE(r->emulation[2].shared);
  EXPECT_EQ(r->emulation[0].peer, "10.0.0.2@tcp");
  EXPECT_DOUBLE_EQ(r->emulation[0].rate_mbit, 5000.5);
  EXPECT_DOUBLE_EQ(r->emulation[1].delay_ms, 0.5);
  EXPECT_TRUE(r->emulation[1].ni.empty());
  // Round trip through config show / config set; emulation is not a run-time key.
  Config c = *r;
  EXPECT_TRUE(apply_config_assignments(&c, {"stats.maxBlockSize=2097152"}).ok());
  EXPECT_EQ(c.emulation.size(), 3u);
  EXPECT_TRUE(c.emulation[2].shared);
  EXPECT_FALSE(apply_config_assignments(&c, {"emulation.delay_ms=3"}).ok());
  // Errors name the key.
  for (const char* bad : {"[[emulation]]\ndelay_ms = -1\n", "[[emulation]]\npeer = \"x\"\n",
                          "[[emulation]]\nni = \"10.0.0.1@tcp\"\n", "[emulation]\ndelay_ms = 1\n",
                          "[[emulation]]\ndelay_ms = \"1\"\n", "[[emulation]]\nwhat = 1\n",
                          // A shared link is one NI's.
                          "[[emulation]]\nrate_mbit = 1\nshared = true\n",
                          "[[emulation]]\nni = \"10.0.0.1@tcp\"\npeer = \"10.0.0.2@tcp\"\n"
                          "rate_mbit = 1\nshared = true\n"}) {
    auto e = parse_config(bad, "bad.toml");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.status().message().find("emulation"), std::string::npos) << e.status().message();
  }
}

TEST(ConfigTest, TuneSection) {
  auto r = parse_config(
      "[tune]\nauto = true\ninterval = 0.5\nmax_rpcs_in_flight = 128\nlink_mbit = 5000\n",
      "t.toml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->tune.auto_tune);
  EXPECT_DOUBLE_EQ(r->tune.interval, 0.5);
  EXPECT_EQ(r->tune.max_rpcs_in_flight, 128);
  EXPECT_EQ(r->tune.min_peer_credits, 8);  // default
  // config show renders values that config set reads back unchanged.
  Config c = *r;
  ASSERT_TRUE(apply_config_assignments(&c, {"tune.interval=0.25", "tune.auto=false"}).ok());
  EXPECT_DOUBLE_EQ(c.tune.interval, 0.25);
  EXPECT_FALSE(c.tune.auto_tune);
  EXPECT_DOUBLE_EQ(c.tune.link_mbit, 5000);
  // Bounds must be ordered; each error names the key.
  for (const char* bad : {"[tune]\nmin_rpcs_in_flight = 64\nmax_rpcs_in_flight = 32\n",
                          "[tune]\nmin_peer_credits = 300\n", "[tune]\nmax_credits = 16\n",
                          "[tune]\ninterval = 0\n", "[tune]\nauto = 1\n"}) {
    auto e = parse_config(bad, "bad.toml");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.status().message().find("tune."), std::string::npos) << e.status().message();
  }
}

}  // namespace
}  // namespace pfsnet

namespace pfsnet {
namespace {

// config set renders the settings and parses them again: strings with quotes, backslashes
// and control characters must come back as they were (fuzz/config_fuzz found "a\\b" coming
// back as "a\b", which then made every config set refuse a "changed" restart-only key).
TEST(ConfigTest, RenderedStringsParseBackToThemselves) {
  auto c = parse_config(
      "[node]\nname = \"n\\\\1 \\\"q\\\" \\t\\u0001\"\n[[net]]\nnid = \"127.0.0.2@o2ib\"\n"
      "provider = \"tcp\\\\\\\\x\"\n",
      "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->node.name, "n\\1 \"q\" \t\x01");
  Config again = *c;
  ASSERT_TRUE(apply_config_assignments(&again, {}).ok());
  EXPECT_EQ(again.node.name, c->node.name);
  EXPECT_EQ(again.nets.at(0).provider, "tcp\\\\x");
  ASSERT_TRUE(apply_config_assignments(&again, {"lnet.peer_credits=16"}).ok());
  EXPECT_EQ(again.node.name, c->node.name);
  EXPECT_EQ(again.lnet.peer_credits, 16);
}

}  // namespace
}  // namespace pfsnet

namespace pfsnet {
namespace {

TEST(ConfigTest, RouteTablesAndTheRouterKeys) {
  auto r = parse_config(
      "[[route]]\nnet = \"tcp2\"\ngateway = \"198.18.1.2@tcp1\"\n"
      "[[net]]\nnid = \"198.18.1.1@tcp1\"\n"
      "[[route]]\nnet = \"o2ib3\"\ngateway = \"198.18.1.3@tcp1\"\nhops = 2\npriority = 7\n"
      "[lnet]\nrouting = true\nlarge_router_buffers = 16\npeer_buffer_credits = 4\n",
      "r.toml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->routes.size(), 2u);
  EXPECT_EQ(lnet_net_name(r->routes[0].net), "tcp2");
  EXPECT_EQ(r->routes[0].hops, 1);
  EXPECT_EQ(lnet_net_name(r->routes[1].net), "o2ib3");
  EXPECT_EQ(r->routes[1].priority, 7);
  EXPECT_TRUE(r->lnet.routing);
  EXPECT_EQ(r->lnet.large_router_buffers, 16);
  EXPECT_EQ(r->lnet.peer_buffer_credits, 4);
  // Round trip through config show / config set; routes are not run-time keys there.
  Config c = *r;
  EXPECT_TRUE(apply_config_assignments(&c, {"rpc.workers=8"}).ok());
  EXPECT_EQ(c.routes, r->routes);
  auto refused = apply_config_assignments(&c, {"route.hops=3"});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("pfsnet route add"), std::string::npos) << refused.message();
  // Errors name what is wrong.
  const std::string ni = "[[net]]\nnid = \"198.18.1.1@tcp1\"\n";
  for (auto [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {ni + "[[route]]\nnet = \"tcp1\"\ngateway = \"198.18.1.2@tcp1\"\n",
            "is a network of this node"},
           {ni + "[[route]]\nnet = \"tcp2\"\ngateway = \"198.18.9.2@tcp9\"\n",
            "on a network this node has an NI on"},
           {ni + "[[route]]\nnet = \"tcp2\"\ngateway = \"198.18.1.1@tcp1\"\n", "own NI"},
           {ni + "[[route]]\nnet = \"tcp2\"\n", "route.gateway"},
           {ni + "[[route]]\ngateway = \"198.18.1.2@tcp1\"\n", "route.net"},
           {ni + "[[route]]\nnet = \"ib\"\ngateway = \"198.18.1.2@tcp1\"\n", "network type"},
           {ni + "[[route]]\nnet = \"tcp2\"\ngateway = \"198.18.1.2@tcp1\"\nhops = 0\n",
            "route.hops"},
           {ni + "[[route]]\nnet = \"tcp2\"\ngateway = \"198.18.1.2@tcp1\"\n[[route]]\n"
                 "net = \"tcp2\"\ngateway = \"198.18.1.2@tcp1\"\n",
            "given twice"},
           {"[route]\nnet = \"tcp2\"\n", "[[route]]"},
       }) {
    auto e = parse_config(bad, "bad.toml");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.status().message().find(why), std::string::npos) << e.status().message();
  }
}

TEST(ConfigTest, NetworkNamesParseAndPrintAsLnetWritesThem) {
  for (const char* n : {"tcp", "tcp2", "o2ib", "o2ib17", "tcp65535"})
    EXPECT_EQ(lnet_net_name(*parse_lnet_net(n)), n);
  EXPECT_EQ(*parse_lnet_net("tcp2"), Nid::parse("1.2.3.4@tcp2")->net());
  for (const char* n : {"", "ib", "tcp01", "tcp65536", "tcp-1", "o2ibx"})
    EXPECT_FALSE(parse_lnet_net(n).ok()) << n;
}

}  // namespace
}  // namespace pfsnet
