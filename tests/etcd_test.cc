// MGS leadership against a real etcd (Debian's etcd-server, started here on a loopback
// address of this test's own): EtcdClient's calls and their errors, and EtcdLeadership --
// two MGSs, one leads with the leader key's revision as its epoch and the other follows
// it; a resigning leader hands over at once with a higher epoch; and with etcd stopped
// (SIGSTOP) the leader stops serving by its lease's safe end, so that at no sampled moment
// do two lead, and after SIGCONT one leads again.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <set>

#include "cluster.h"
#include "membership/etcd_client.h"
#include "membership/etcd_leadership.h"

namespace pfsnet::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Role = LeaderLease::Role;

constexpr const char* kEtcd = "/usr/bin/etcd";

// One etcd member on loopback(host), client port 2379, peer port 2380, its data in a
// fresh directory removed at the end.
class Etcd {
 public:
  explicit Etcd(int host) : addr_(loopback(host)) {
    dir_ = std::filesystem::temp_directory_path() /
           ("pfsnet-etcd-" + std::to_string(getpid()) + "-" + std::to_string(host));
    std::filesystem::remove_all(dir_);
    const std::string client = "http://" + addr_ + ":2379", peer = "http://" + addr_ + ":2380";
    proc_ = std::make_unique<Process>(
        std::vector<std::string>{kEtcd, "--name", "t", "--data-dir", dir_.string(),
                                 "--listen-client-urls", client, "--advertise-client-urls", client,
                                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                 "--initial-cluster", "t=" + peer, "--log-level", "warn"});
  }
  ~Etcd() {
    proc_->kill(SIGCONT);
    proc_->kill(SIGKILL);
    proc_->wait_exit(5000ms);
    std::filesystem::remove_all(dir_);
  }
  std::string endpoint() const { return "http://" + addr_ + ":2379"; }
  Process& process() { return *proc_; }
  // Serving: a lease can be granted.
  bool ready() {
    auto c = EtcdClient::create({endpoint()}, 1s);
    return eventually([&] { return (*c)->grant(2s).ok(); }, 20000ms);
  }

 private:
  std::string addr_;
  std::filesystem::path dir_;
  std::unique_ptr<Process> proc_;
};

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kEtcd, X_OK) != 0) GTEST_SKIP() << "needs etcd-server (scripts/install-deps.sh)";
  }
};

std::unique_ptr<EtcdClient> etcd_client(const std::string& ep, Duration timeout = 1s) {
  auto c = EtcdClient::create({ep}, timeout);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(*c) : nullptr;
}

TEST_F(EtcdTest, ClientCallsAndTheirErrors) {
  // Endpoints that are not http://HOST:PORT are refused before any call.
  for (const char* bad : {"", "https://127.0.0.1:2379", "127.0.0.1", "http://:2379", "http://h:0",
                          "http://h:70000", "http://h:12x"})
    EXPECT_FALSE(EtcdClient::create({bad}, 1s).ok()) << bad;
  EXPECT_FALSE(EtcdClient::create({}, 1s).ok());
  EXPECT_EQ(base64_decode(base64_encode("pfsnet/mgs/leader")), "pfsnet/mgs/leader");
  EXPECT_EQ(base64_decode(base64_encode("ab")), "ab");
  EXPECT_FALSE(base64_decode("abc").has_value());

  Etcd etcd(40);
  ASSERT_TRUE(etcd.ready()) << etcd.process().output();
  // Nothing listens on the first endpoint: the client goes on to the second.
  auto two = EtcdClient::create({"http://" + loopback(41) + ":2379", etcd.endpoint()}, 1s);
  ASSERT_TRUE(two.ok());
  auto g = (*two)->grant(3s);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->ttl, 3s);
  EXPECT_EQ((*two)->endpoint(), loopback(40) + ":2379");
  auto c = etcd_client(etcd.endpoint());
  ASSERT_TRUE(c);
  auto won = c->campaign("k", "mgs-a", g->lease);
  ASSERT_TRUE(won.ok()) << won.status().to_string();
  EXPECT_TRUE(won->won);
  EXPECT_GT(won->epoch, 0u);
  auto g2 = c->grant(3s);
  ASSERT_TRUE(g2.ok());
  auto lost = c->campaign("k", "mgs-b", g2->lease);
  ASSERT_TRUE(lost.ok());
  EXPECT_FALSE(lost->won);
  EXPECT_EQ(lost->leader, "mgs-a");
  EXPECT_EQ(lost->epoch, won->epoch);
  EXPECT_EQ(lost->leader_lease, g->lease);
  auto ttl = c->keepalive(g->lease);
  ASSERT_TRUE(ttl.ok());
  EXPECT_EQ(*ttl, 3s);
  // Revoked: the key goes with the lease, the next campaign wins with a higher revision.
  ASSERT_TRUE(c->revoke(g->lease).ok());
  auto gone = c->keepalive(g->lease);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(*gone, Duration::zero());
  auto next = c->campaign("k", "mgs-b", g2->lease);
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(next->won);
  EXPECT_GT(next->epoch, won->epoch);
  // A put on a lease that does not exist: etcd's error, reported as such.
  ASSERT_TRUE(c->revoke(g2->lease).ok());
  auto bad = c->campaign("k2", "mgs-c", g2->lease);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kRemoteError) << bad.status().to_string();
  // Unreachable: kUnreachable within the timeout, not a hang.
  auto none = etcd_client("http://" + loopback(41) + ":2379", 500ms);
  auto t0 = std::chrono::steady_clock::now();
  auto r = none->grant(2s);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnreachable) << r.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// Two MGSs' leadership, ticked every 20 ms, their views sampled at each tick.
struct TwoMgs {
  MonotonicClock clock;
  LeaseOptions o;
  std::unique_ptr<EtcdLeadership> a, b;
  std::string stalled;  // its ticks stop, as a daemon's round would in a long stall
  int both = 0;         // samples at which both led
  TwoMgs(const std::string& ep) {
    o.ttl = 3s;
    o.keepalive = 500ms;
    o.campaign = 500ms;
    o.margin = 300ms;
    o.retry = 200ms;
    a = std::make_unique<EtcdLeadership>(etcd_client(ep, 500ms), o, "pfsnet/mgs/leader", "mgs-a",
                                         clock);
    b = std::make_unique<EtcdLeadership>(etcd_client(ep, 500ms), o, "pfsnet/mgs/leader", "mgs-b",
                                         clock);
  }
  // Ticks until one of them leads (bounded: `limit`): its view (role kNone if none did).
  LeaderLease::View leader_within(std::chrono::milliseconds limit) {
    LeaderLease::View l;
    run_until(
        [&](auto& va, auto& vb) {
          l = va.role == Role::kLeader ? va : vb;
          return l.role == Role::kLeader;
        },
        limit);
    return l;
  }
  // Ticks until `pred` holds (bounded: `limit`), counting samples with two leaders.
  template <class Pred>
  bool run_until(Pred pred, std::chrono::milliseconds limit) {
    auto end = std::chrono::steady_clock::now() + limit;
    for (int i = 0; i < 100000 && std::chrono::steady_clock::now() < end; ++i) {
      if (a && stalled != "mgs-a") a->tick();
      if (b && stalled != "mgs-b") b->tick();
      auto va = a ? a->view() : LeaderLease::View{};
      auto vb = b ? b->view() : LeaderLease::View{};
      if (va.role == Role::kLeader && vb.role == Role::kLeader) ++both;
      if (pred(va, vb)) return true;
      std::this_thread::sleep_for(20ms);  // the ticks' period, as a daemon's round
    }
    return false;
  }
};

TEST_F(EtcdTest, OneMgsLeadsTheOtherFollowsAndAResignHandsOverWithAHigherEpoch) {
  Etcd etcd(42);
  ASSERT_TRUE(etcd.ready()) << etcd.process().output();
  TwoMgs p(etcd.endpoint());
  LeaderLease::View first;
  ASSERT_TRUE(p.run_until(
      [&](auto& va, auto& vb) {
        bool one = (va.role == Role::kLeader) != (vb.role == Role::kLeader);
        auto& l = va.role == Role::kLeader ? va : vb;
        auto& f = va.role == Role::kLeader ? vb : va;
        if (one && f.role == Role::kFollower && f.leader == l.leader && f.epoch == l.epoch) {
          first = l;
          return true;
        }
        return false;
      },
      20000ms));
  EXPECT_GT(first.epoch, 0u);
  // The leader resigns (a clean stop): the other leads, with a higher epoch, without
  // waiting for the resigned one's lease to run out.
  auto& leader = first.leader == "mgs-a" ? p.a : p.b;
  const std::string other = first.leader == "mgs-a" ? "mgs-b" : "mgs-a";
  leader->stop(true);
  EXPECT_EQ(leader->view().role, Role::kNone);
  leader.reset();
  // The key went with the revoked lease at once: a campaign now finds it free or the
  // other MGS's, never the resigned one's (whose lease would have held it for the TTL).
  auto probe = etcd_client(etcd.endpoint());
  auto g = probe->grant(3s);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto seen = probe->campaign("pfsnet/mgs/leader", "probe", g->lease);
  ASSERT_TRUE(seen.ok()) << seen.status().to_string();
  EXPECT_NE(seen->leader, first.leader);
  ASSERT_TRUE(probe->revoke(g->lease).ok());
  auto t0 = std::chrono::steady_clock::now();
  const LeaderLease::View second = p.leader_within(20000ms);
  ASSERT_EQ(second.role, Role::kLeader);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(second.leader, other);
  EXPECT_GT(second.epoch, first.epoch);
  EXPECT_EQ(p.both, 0);
  std::printf("handover after a resign: %.2f s (epoch %llu -> %llu)\n", took,
              static_cast<unsigned long long>(first.epoch),
              static_cast<unsigned long long>(second.epoch));
}

TEST_F(EtcdTest, ALeaderThatStallsIsReplacedOnlyAfterItHasStoppedServing) {
  Etcd etcd(44);
  ASSERT_TRUE(etcd.ready()) << etcd.process().output();
  TwoMgs p(etcd.endpoint());
  const LeaderLease::View first = p.leader_within(20000ms);
  ASSERT_EQ(first.role, Role::kLeader);
  // The leader stalls: no more keep-alives. It serves until its lease's safe end; the
  // other takes the key once etcd expires the lease, later -- never both at one sample.
  const bool a_led = first.leader == "mgs-a";
  auto& stuck = a_led ? p.a : p.b;
  p.stalled = first.leader;
  const TimePoint stalled = p.clock.now();
  LeaderLease::View second;
  ASSERT_TRUE(p.run_until(
      [&](auto& va, auto& vb) {
        second = a_led ? vb : va;
        return second.role == Role::kLeader;
      },
      20000ms));
  const TimePoint took_over = p.clock.now();
  EXPECT_EQ(p.both, 0);
  EXPECT_GT(second.epoch, first.epoch);
  EXPECT_EQ(stuck->view().role, Role::kNone);
  EXPECT_LE(first.serve_until, took_over) << "the other led while the stalled one could serve";
  // The stalled one resumes: it learns of the new leader and follows it.
  p.stalled.clear();
  ASSERT_TRUE(p.run_until(
      [&](auto& va, auto& vb) {
        auto& v = a_led ? va : vb;
        return v.role == Role::kFollower && v.epoch == second.epoch;
      },
      20000ms));
  EXPECT_EQ(p.both, 0);
  std::printf("a stalled leader replaced after %.2f s (TTL 3 s), epoch %llu -> %llu\n",
              std::chrono::duration<double>(took_over - stalled).count(),
              static_cast<unsigned long long>(first.epoch),
              static_cast<unsigned long long>(second.epoch));
}

TEST_F(EtcdTest, WithEtcdStoppedTheLeaderStopsServingByItsLeasesEndAndOneLeadsAfter) {
  Etcd etcd(43);
  ASSERT_TRUE(etcd.ready()) << etcd.process().output();
  TwoMgs p(etcd.endpoint());
  const LeaderLease::View first = p.leader_within(20000ms);
  ASSERT_EQ(first.role, Role::kLeader);
  // etcd stops answering. A leader serves on to its lease's safe end, which no
  // keep-alive sent after the stop can move: every leader view sampled from now on ends
  // by the stop + TTL - margin.
  ASSERT_TRUE(etcd.process().stop());
  const TimePoint stopped = p.clock.now();
  TimePoint latest = TimePoint::min();
  ASSERT_TRUE(p.run_until(
      [&](auto& va, auto& vb) {
        for (auto* v : {&va, &vb})
          if (v->role == Role::kLeader) latest = std::max(latest, v->serve_until);
        return va.role != Role::kLeader && vb.role != Role::kLeader;
      },
      10000ms));
  double fenced = std::chrono::duration<double>(p.clock.now() - stopped).count();
  EXPECT_LE(latest, stopped + p.o.ttl - p.o.margin);
  etcd.process().kill(SIGCONT);
  const LeaderLease::View after = p.leader_within(30000ms);
  ASSERT_EQ(after.role, Role::kLeader);
  EXPECT_GE(after.epoch, first.epoch);
  EXPECT_EQ(p.both, 0);
  std::printf("etcd stopped: the leader stopped serving after %.2f s; epoch %llu -> %llu\n", fenced,
              static_cast<unsigned long long>(first.epoch),
              static_cast<unsigned long long>(after.epoch));
}

// The table handed over through a real etcd at 100,000 nodes' size: the leader's 100 chunks
// of 30 KB go out in transactions under etcd's request limit and only while it leads; the
// next leader reads every one back, page by page, before it leads -- and a deposed
// leader's save is refused.
TEST_F(EtcdTest, TheTableOfAHundredThousandNodesIsHandedOverWhole) {
  Etcd etcd(46);
  ASSERT_TRUE(etcd.ready()) << etcd.process().output();
  TwoMgs p(etcd.endpoint());
  p.b.reset();  // a alone first
  const LeaderLease::View first = p.leader_within(20000ms);
  ASSERT_EQ(first.role, Role::kLeader);
  std::vector<std::pair<uint32_t, std::string>> chunks;
  for (uint32_t c = 0; c < 100; ++c) {
    std::string b(30000, '\0');
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>((c * 131 + i * 7) & 0xff);
    chunks.emplace_back(c, std::move(b));
  }
  const auto saved = chunks;
  p.a->save(first.epoch, std::move(chunks));
  ASSERT_TRUE(
      p.run_until([&](auto&, auto&) { return p.a->table_counters().chunks_saved == 100; }, 20000ms))
      << p.a->table_counters().save_failures;
  EXPECT_EQ(p.a->table_counters().save_failures, 0u);
  EXPECT_GE(p.a->table_counters().saves, 4u) << "100 x 30 KB must not go in one request";
  p.a->stop(true);
  p.a.reset();
  p.b = std::make_unique<EtcdLeadership>(etcd_client(etcd.endpoint(), 500ms), p.o,
                                         "pfsnet/mgs/leader", "mgs-b", p.clock);
  const LeaderLease::View second = p.leader_within(20000ms);
  ASSERT_EQ(second.role, Role::kLeader);
  EXPECT_GT(second.epoch, first.epoch);
  auto table = p.b->take_table(second.epoch);
  ASSERT_TRUE(table.has_value());
  ASSERT_EQ(table->size(), 100u);
  for (size_t c = 0; c < 100; ++c) EXPECT_EQ((*table)[c], saved[c].second) << c;
  EXPECT_FALSE(p.b->take_table(second.epoch).has_value()) << "handed over once";
  // The first leader's epoch is gone: a save under it is refused by etcd.
  auto old = etcd_client(etcd.endpoint());
  Status st =
      old->put_if_leader("pfsnet/mgs/leader", first.epoch, {{"pfsnet/mgs/leader/table/x", "y"}});
  EXPECT_EQ(st.code(), Code::kRejected) << st.to_string();
}

// Real daemons: two MGSs with leadership in etcd (lease 2 s), a server and a client, all
// configured with both MGSs; the client pings the server all along. One MGS leads, the
// other answers with its NID, and every node registers with the leader. The leader is
// killed: the other leads with a higher epoch and the table the first left in etcd --
// every node up in it from its first instant, within the lease plus one server ping period
// of the kill, and no node registered again -- and not one of the client's pings to the
// server failed.
TEST_F(EtcdTest, KillingTheLeaderMgsMovesEveryNodeToTheNextLeaderAndNoApplicationRpcFails) {
  Etcd etcd(45);
  ASSERT_TRUE(etcd.ready()) << etcd.process().output();
  TempDir dir;
  const std::string key = TwoDaemons::write_key(dir);
  const std::string mgs_list = "\"" + loopback(2) + "@tcp\", \"" + loopback(7) + "@tcp\"";
  std::map<int, std::unique_ptr<Daemon>> d;
  auto start = [&](int host, const std::string& role) {
    DaemonOptions o;
    o.transaction_timeout = 2;
    o.node_extra = "roles = [\"" + role + "\"]\nmgs = [" + mgs_list + "]\n";
    o.extra =
        "[membership]\nserver_ping_interval = 1\nclient_ping_interval = 2\nping_miss_limit = "
        "2\netcd = [\"" +
        etcd.endpoint() +
        "\"]\netcd_lease = 2\n[mesh]\npeers = 3\ninterval = 0.2\nbulk_interval = 1\n"
        "bulk_bytes = 65536\nreport_interval = 0.5\nwindow = 4\n";
    d[host] = std::make_unique<Daemon>(dir, host, key, o);
    return d[host]->ready();
  };
  ASSERT_TRUE(start(2, "mgs"));
  ASSERT_TRUE(start(7, "mgs"));
  ASSERT_TRUE(start(3, "server"));
  ASSERT_TRUE(start(5, "client"));
  auto status = [&](int host) {
    auto [rc, out] = run({PFSNET_BIN, "--socket", d[host]->socket(), "status", "--json"}, 20000ms);
    return rc == 0 ? last_json_line(out) : json::object();
  };
  auto all_up_at = [&](const json& t, const std::string& mgs, std::vector<std::string> names) {
    if (!t.is_object() || t.value("mgs", "") != mgs) return false;
    for (const std::string& n : names) {
      bool up = false;
      for (const json& row : t.value("nodes", json::array()))
        up |= row["name"] == n && row["state"] == "up";
      if (!up) return false;
    }
    return true;
  };
  // One leads; every node is up in its table, as seen from the client.
  json t;
  std::string leader;
  ASSERT_TRUE(eventually(
      [&] {
        t = status(5);
        leader = t.value("mgs", "");
        return (leader == loopback(2) + "@tcp" || leader == loopback(7) + "@tcp") &&
               all_up_at(t, leader, {"n2", "n3", "n5", "n7"});
      },
      20000ms))
      << t.dump();
  const int lead_host = leader == loopback(2) + "@tcp" ? 2 : 7, other = lead_host == 2 ? 7 : 2;
  json lt = status(lead_host)["local"]["leadership"];
  json ot = status(other)["local"]["leadership"];
  EXPECT_EQ(lt.value("role", ""), "leader") << lt.dump();
  EXPECT_EQ(ot.value("role", ""), "follower") << ot.dump();
  EXPECT_EQ(ot.value("leader", ""), leader);
  const uint64_t epoch = lt.value("epoch", uint64_t{0});
  EXPECT_GT(epoch, 0u);
  EXPECT_EQ(ot.value("epoch", uint64_t{0}), epoch);
  // The probe mesh's rows, as the leader gathered them: the following MGS's too (it sends
  // its row to the leader like any node, not into a table of its own).
  auto mesh_rows_from = [&](int host, const std::string& mgs, std::set<std::string> want) {
    auto [rc, out] = run({PFSNET_BIN, "--socket", d[host]->socket(), "mesh", "--json"}, 20000ms);
    json m = rc == 0 ? last_json_line(out) : json::object();
    if (!m.is_object() || m.value("mgs", "") != mgs) return false;
    for (const json& r : m.value("rows", json::array())) want.erase(r.value("from", ""));
    return want.empty();
  };
  EXPECT_TRUE(eventually(
      [&] {
        return mesh_rows_from(5, leader, {"n2", "n3", "n5", "n7"});
      },
      20000ms));
  EXPECT_TRUE(eventually(
      [&] {
        return mesh_rows_from(other, leader, {"n2", "n3", "n5", "n7"});
      },
      20000ms))
      << "the following MGS shows the leader's rows";
  // The leader has written its table to etcd (every registration is in it).
  EXPECT_TRUE(eventually(
      [&] {
        return status(lead_host)["local"]["leadership"]["table"].value("chunks_saved", 0) > 0;
      },
      20000ms));
  // The cluster's minimum release level is raised (every node is of this build) and kept
  // in etcd before the commit is answered; the nodes hear it with their next ping.
  auto upgrade = [&](int host, const std::string& step) {
    auto [rc, out] =
        run({PFSNET_BIN, "--socket", d[host]->socket(), "upgrade", step, "--json"}, 20000ms);
    return std::make_pair(rc, rc == 0 ? last_json_line(out) : json{{"output", out}});
  };
  {
    json u;
    ASSERT_TRUE(eventually([&] { return (u = upgrade(5, "check").second).value("below", 9) == 0; },
                           10000ms))
        << u.dump();
    auto [rc, c] = upgrade(5, "commit");
    ASSERT_EQ(rc, 0) << c.dump();
    EXPECT_TRUE(c.value("committed", false)) << c.dump();
    EXPECT_EQ(c.value("level", 0), 2) << c.dump();
    EXPECT_EQ(status(lead_host)["local"]["level"].value("level", 0), 2);
    EXPECT_TRUE(eventually(
        [&] { return status(3)["local"]["agent"].value("cluster_level", 0) == 2; }, 5000ms));
  }
  auto registers = [&](int host) {
    return status(host)["local"]["agent"].value("registers", uint64_t{0});
  };
  const uint64_t server_registers = registers(3), client_registers = registers(5);
  // The client pings the server every 20 ms across the kill.
  Process pings({PFSNET_BIN, "--socket", d[5]->socket(), "ping", loopback(3) + "@tcp", "--count",
                 "400", "--interval", "0.02", "--timeout", "5", "--json"});
  const int64_t killed = unix_ms(MonotonicClock().wall_now());
  d[lead_host]->process().kill(SIGKILL);
  d[lead_host]->process().wait_exit(5000ms);
  const std::string next = loopback(other) + "@tcp";
  ASSERT_TRUE(eventually(
      [&] {
        return all_up_at(t = status(5), next, {"n3", "n5", other == 2 ? "n2" : "n7"});
      },
      30000ms))
      << t.dump();
  // The new leader's table from the instant it led (its rows' registration time is the
  // takeover): within the lease (2 s) plus one server ping period (1 s) of the kill -- the
  // old lease ran out (at most 2 s), the follower's next campaign (every third of it) won,
  // and it read the table before it served.
  int64_t took_over = INT64_MAX;
  for (const json& row : t.value("nodes", json::array()))
    if (row["name"] == "n3" || row["name"] == "n5")
      took_over = std::min(took_over, row.value("registered_unix_ms", INT64_MAX));
  EXPECT_LE(took_over - killed, 3000) << t.dump();
  EXPECT_EQ(registers(3), server_registers) << "the server registered again";
  EXPECT_EQ(registers(5), client_registers) << "the client registered again";
  json tc = status(other)["local"]["leadership"]["table"];
  EXPECT_EQ(tc.value("loads", 0), 1) << tc.dump();
  EXPECT_GT(tc.value("chunks_loaded", 0), 0) << tc.dump();
  EXPECT_TRUE(eventually(
      [&] {
        return mesh_rows_from(5, next, {"n3", "n5", other == 2 ? "n2" : "n7"});
      },
      20000ms));
  json nt = status(other)["local"]["leadership"];
  EXPECT_EQ(nt.value("role", ""), "leader") << nt.dump();
  EXPECT_GT(nt.value("epoch", uint64_t{0}), epoch);
  // The client's agent hears the new epoch with its next answer from the leader: it pings
  // on its own schedule now (it does not register again), so that may come after the table
  // is seen through it -- within a ping period and a failover's second.
  json agent;
  EXPECT_TRUE(eventually(
      [&] {
        agent = status(5)["local"]["agent"];
        return agent.value("epoch", uint64_t{0}) == nt.value("epoch", uint64_t{0});
      },
      10000ms))
      << agent.dump();
  // The new leader serves the level its predecessor kept in etcd.
  EXPECT_EQ(status(other)["local"]["level"].value("level", 0), 2);
  {
    auto [rc, c] = upgrade(5, "check");
    ASSERT_EQ(rc, 0) << c.dump();
    EXPECT_EQ(c.value("level", 0), 2) << c.dump();
    EXPECT_EQ(c.value("mgs", ""), next) << c.dump();
  }
  ASSERT_TRUE(pings.wait_eof(60000ms));
  json p = last_json_line(pings.output());
  EXPECT_EQ(p.value("failed", -1), 0) << p.dump();
  EXPECT_EQ(p.value("ok", 0), 400) << p.dump();
  std::printf(
      "leader MGS killed: %s leads at epoch %llu (was %llu) with the table from etcd %.2f s "
      "after the kill (lease 2 s + server period 1 s = 3 s); no node registered again; the "
      "client's 400 pings: %d failed\n",
      next.c_str(), static_cast<unsigned long long>(nt.value("epoch", uint64_t{0})),
      static_cast<unsigned long long>(epoch), double(took_over - killed) / 1000.0,
      p.value("failed", -1));
}

}  // namespace
}  // namespace pfsnet::testing
