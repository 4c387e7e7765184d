// LNet health on real links: two network namespaces joined by two veth pairs (two rails,
// 198.18.1.0/24 on net tcp and 198.18.2.0/24 on net tcp1), a pfsnetd in each with one NI
// per rail. The test creates and removes everything; it needs root (skipped otherwise).
#include <gtest/gtest.h>

#include "netns_rails.h"

namespace pfsnet::testing::netns {
namespace {

TEST(NetnsTest, LinkDownUnderLoadFailsOverAndTrafficReturns) {
  TwoRails net;
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  // ~24 s of sequential RPCs: enough to outlast the failover and the healing even when
  // the sanitized build shares the CPU with other tests (6,000 once ended too early).
  auto load = net.load(12000, "0.002", 3);
  ASSERT_GE(
      poll_until([&] { return sent(net.ni(0, 0)) > 100 && sent(net.ni(0, 1)) > 100; }, 10000ms), 0)
      << "traffic on both rails before the failure: " << load->output()
      << net.cli(0, {"nis"}).dump() << net.daemon(0).output() << net.daemon(1).output();
  auto t0 = Clock::now();
  ASSERT_TRUE(net.link(0, 0, false));
  double detect = poll_until([&] { return net.ni(0, 0)["state"] == "down"; }, 5000ms);
  ASSERT_GE(detect, 0) << "the NI is marked down from the link event";
  json a1 = net.ni(0, 0);
  EXPECT_EQ(a1["errors"]["LOCAL_NI_DOWN"], 1) << a1.dump();
  EXPECT_LT(a1["health"].get<int>(), 1000);
  // Rail 1 carries nothing more; rail 2 carries everything.
  uint64_t rail1 = sent(a1), rail2 = sent(net.ni(0, 1));
  double moved = poll_until([&] { return sent(net.ni(0, 1)) > rail2 + 100; }, 5000ms);
  ASSERT_GE(moved, 0);
  EXPECT_EQ(sent(net.ni(0, 0)), rail1);
  double failover = std::chrono::duration<double>(Clock::now() - t0).count();
  // `pfsnet health` on the client names the NI and its cause, and not the other rail.
  json h = net.cli(0, {"health"});
  bool named = false;
  for (const json& p : h.value("problems", json::array())) {
    named = named || (p["kind"] == "ni" && p["subject"] == net.nid(0, 0) && p["cause"] == "DOWN");
    if (p["kind"] != "settings") {
      EXPECT_NE(p["subject"], net.nid(0, 1)) << h.dump();
      EXPECT_NE(p["subject"], net.nid(1, 1)) << h.dump();
    }
  }
  EXPECT_TRUE(named) << h.dump();
  // Back up: LOCAL_NI_UP, recovery pings restore the health, traffic returns to rail 1.
  ASSERT_TRUE(net.link(0, 0, true));
  auto t1 = Clock::now();
  double healed = poll_until(
      [&] {
        json n = net.ni(0, 0);
        return n["state"] == "up" && n["health"] == 1000;
      },
      15000ms);
  ASSERT_GE(healed, 0) << net.ni(0, 0).dump();
  EXPECT_EQ(net.ni(0, 0)["errors"]["LOCAL_NI_UP"], 1);
  uint64_t back = sent(net.ni(0, 0));
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 0)) > back + 100; }, 10000ms), 0)
      << "traffic returns to rail 1: " << net.cli(0, {"nis"}).dump()
      << net.cli(0, {"peers", "-v"}).dump() << load->output() << "\nclient log:\n"
      << net.daemon(0).output() << "\nserver log:\n"
      << net.daemon(1).output();
  double returned = std::chrono::duration<double>(Clock::now() - t1).count();
  // No RPC failed; the longest one (resends included) is the failover cost.
  ASSERT_EQ(load->wait_exit(60000ms), 0) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_EQ(summary["failed"], 0) << summary.dump();
  EXPECT_EQ(summary["ok"], 12000);
  double worst = summary["total_max_ms"].get<double>();
  EXPECT_LT(worst, 2000) << "failover within a second or two";
  std::printf(
      "failover: link down seen in %.3f s, traffic moved within %.3f s of the event, slowest RPC "
      "%.3f ms; after link up: healthy in %.3f s, traffic back on rail 1 within %.3f s\n",
      detect, failover, worst, healed, returned);
}

// Rail 2 is RDMA (@o2ib over libfabric), rail 1 TCP: RDMA carries the traffic while it is
// healthy, its link failing under load moves everything to TCP with no RPC lost, and it
// comes back once recovered. The RPC statistics split the load by kind, exactly.
TEST(NetnsTest, RdmaRailFailsUnderLoadTcpCarriesOnAndRdmaReturns) {
  TwoRails net(3, /*rdma=*/true);
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok()) << net.daemon(0).output() << net.daemon(1).output();
  constexpr int kRpcs = 8000;
  auto load = net.load(kRpcs, "0.002", 3);  // addressed to the server's tcp NID
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 1)) > 200; }, 10000ms), 0)
      << load->output() << net.cli(0, {"nis"}).dump() << net.daemon(0).output();
  EXPECT_LE(sent(net.ni(0, 0)), 2u) << "TCP idle while RDMA is healthy (the first ping "
                                       "discovers the o2ib NID)";
  ASSERT_TRUE(net.link(0, 1, false));
  ASSERT_GE(poll_until([&] { return net.ni(0, 1)["state"] == "down"; }, 5000ms), 0);
  uint64_t rdma = sent(net.ni(0, 1)), tcp = sent(net.ni(0, 0));
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 0)) > tcp + 200; }, 5000ms), 0)
      << "TCP takes over: " << net.cli(0, {"nis"}).dump();
  EXPECT_EQ(sent(net.ni(0, 1)), rdma);
  ASSERT_TRUE(net.link(0, 1, true));
  ASSERT_GE(poll_until(
                [&] {
                  json n = net.ni(0, 1);
                  return n["state"] == "up" && n["health"] == 1000;
                },
                15000ms),
            0)
      << net.ni(0, 1).dump();
  uint64_t back = sent(net.ni(0, 1));
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 1)) > back + 200; }, 10000ms), 0)
      << "traffic returns to RDMA: " << net.cli(0, {"nis"}).dump() << load->output();
  ASSERT_EQ(load->wait_exit(90000ms), 0) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_EQ(summary["failed"], 0) << summary.dump();
  EXPECT_EQ(summary["ok"], kRpcs);
  // Every RPC of the load in the statistics of the server's tcp NID (the NID it was
  // addressed to), each by the kinds of its last attempt's request and reply.
  json st;
  poll_until(
      [&] {
        json r = net.cli(0, {"diag", "rpc", "node"});
        for (const json& n : r["nodes"])
          if (n["nid"] == net.nid(1, 0)) st = n["stats"];
        return total(st["channel_wait"]) >= kRpcs;
      },
      10000ms);
  int64_t verbs = total(st["latency_verbs"]), tcp_rpcs = total(st["latency_tcp"]),
          mixed = total(st["latency_mixed"]);
  EXPECT_EQ(total(st["channel_wait"]), kRpcs) << st.dump();
  EXPECT_EQ(verbs + tcp_rpcs + mixed, kRpcs) << st.dump();
  EXPECT_GT(verbs, 100);
  EXPECT_GT(tcp_rpcs, 100);
  EXPECT_EQ(total(st["send_time_verbs"]) + total(st["send_time_tcp"]), kRpcs);
  std::printf("RDMA rail down and up under %d RPCs: %lld over RDMA, %lld over TCP, %lld mixed\n",
              kRpcs, (long long)verbs, (long long)tcp_rpcs, (long long)mixed);
}

TEST(NetnsTest, BlackHoledRailTimesOutRemotelyAndResendsOnTheOther) {
  TwoRails net;
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  // A running system: the peer is known on both rails before the rail fails.
  auto warm = net.load(20, "0", 3);
  ASSERT_EQ(warm->wait_exit(20000ms), 0) << warm->output();
  json added = net.cli(
      0, {"fault", "add", "drop", "--src", net.nid(0, 0), "--dst", net.nid(1, 0), "--rate", "1"});
  ASSERT_TRUE(added.contains("added")) << added.dump();
  auto load = net.load(400, "0.002", 3);
  ASSERT_EQ(load->wait_exit(60000ms), 0) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_EQ(summary["failed"], 0) << summary.dump();
  json p1 = net.peer(0, net.nid(1, 0));
  EXPECT_GE(p1["remote_timeouts"].get<int>(), 1) << p1.dump();
  EXPECT_GE(p1["resends"].get<int>(), 1) << p1.dump();
  EXPECT_GE(p1["errors"]["PEER_NI_UNREACHABLE"].get<int>(), 1) << p1.dump();
  EXPECT_LT(p1["health"].get<int>(), 1000);
  json a1 = net.ni(0, 0);
  EXPECT_EQ(a1["local_timeouts"], 0) << a1.dump();  // remote, not local
  json faults = net.cli(0, {"fault", "list"});
  ASSERT_EQ(faults["faults"].size(), 1u);
  EXPECT_GE(faults["faults"][0]["injected"].get<int>(), 1);
  // A resend waits one attempt (transaction_timeout / 3 = 1 s), not more.
  EXPECT_LT(summary["total_max_ms"].get<double>(), 1500) << summary.dump();
  EXPECT_EQ(net.cli(0, {"fault", "del", "--all"})["deleted"], 1);
}

// Frames the server received from the client on `rail` (its peer entry's count).
int server_received(TwoRails& net, int rail) {
  json p = net.peer(1, net.nid(0, rail));
  return p.is_object() ? p.value("recv_count", 0) : 0;
}

// Exactly-once over a black-holed rail: nftables on the server (outside pfsnet) drops
// everything it sends on rail 1, so writes that went that way run but their replies
// vanish; the client times out there and resends on rail 2 with the same xid, and the
// server answers the copy with the saved reply. Every write ran once.
TEST(NetnsTest, WritesResentOverABlackHoledRailRunOnce) {
  TwoRails net;
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  auto warm = net.load(20, "0", 3);  // both rails known and connected (PING: no writes)
  ASSERT_EQ(warm->wait_exit(20000ms), 0) << warm->output();
  int before = server_received(net, 0);
  ASSERT_TRUE(net.black_hole_replies(0));
  constexpr int kWrites = 40;
  auto load = net.writes(kWrites, 3);
  ASSERT_EQ(load->wait_exit(60000ms), 0) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_EQ(summary["failed"], 0) << summary.dump();
  json p1 = net.peer(0, net.nid(1, 0));
  EXPECT_GE(p1["resends"].get<int>(), 1) << p1.dump();
  EXPECT_EQ(executions(net.socket(1), "BRW_WRITE", kWrites), kWrites);
  json rc = reply_cache(net.socket(1));
  // The copy is answered from the reply cache -- when the first went out at all: in the
  // slow sanitizer build the write on the black-holed rail sometimes never leaves the
  // client's TCP (the server's rail-1 count does not move), so there is no copy to answer
  // and the write simply runs once, by its resend.
  if (server_received(net, 0) > before) {
    EXPECT_GE(rc["replayed"].get<int>(), 1) << rc.dump();
  } else {
    std::printf("black-holed rail: the first write never reached the server; no copy\n");
  }
  EXPECT_EQ(rc["clients"], 1) << rc.dump();
  std::printf("black-holed rail: %d writes, %d resends, %d answered from the reply cache\n",
              kWrites, p1["resends"].get<int>(), rc["replayed"].get<int>());
}

// Exactly-once over reset connections: the server's replies on rail 1 are held back
// (nftables, as above) and the client's connections on that rail are reset from outside
// (`ss -K`, the kernel's socket destroy) while writes wait there; each resend goes at
// once on rail 2 -- with RPCs of 30 s, not after an attempt's 10 s -- and runs nothing
// twice.
TEST(NetnsTest, WritesResentOverAResetConnectionRunOnce) {
  TwoRails net(30);
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  auto warm = net.load(20, "0", 3);
  ASSERT_EQ(warm->wait_exit(20000ms), 0) << warm->output();
  int before = server_received(net, 0);
  ASSERT_TRUE(net.black_hole_replies(0));
  constexpr int kWrites = 40;
  auto load = net.writes(kWrites, 30);
  // The fault driver: resets the client's rail-1 connections every 300 ms until the load
  // is done (bounded: 100 rounds).
  int resets = 0;
  for (int i = 0; i < 100 && load->wait_exit(300ms) == -1; ++i) {
    auto [rc, out] = run(
        {ip_bin(), "netns", "exec", net.ns(0), "ss", "-K", "dst", TwoRails::addr(1, 0)}, 5000ms);
    ASSERT_EQ(rc, 0) << out;
    resets += out.find("ESTAB") != std::string::npos;
  }
  ASSERT_EQ(load->wait_exit(5000ms), 0) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_EQ(summary["failed"], 0) << summary.dump();
  EXPECT_GE(resets, 1);
  EXPECT_LT(summary["total_max_ms"].get<double>(), 5000) << summary.dump();  // not a timeout
  json p1 = net.peer(0, net.nid(1, 0));
  EXPECT_GE(p1["resends"].get<int>(), 1) << p1.dump();
  EXPECT_EQ(executions(net.socket(1), "BRW_WRITE", kWrites), kWrites);
  json rc = reply_cache(net.socket(1));
  // As above: a copy exists only when a write on rail 1 reached the server before its reset.
  if (server_received(net, 0) > before) {
    EXPECT_GE(rc["replayed"].get<int>() + rc["running_copies"].get<int>(), 1) << rc.dump();
  } else {
    std::printf("reset connections: no write reached the server on rail 1; no copy\n");
  }
  std::printf(
      "reset connections: %d writes, %d resets, %d resends, %d answered from the "
      "reply cache\n",
      kWrites, resets, p1["resends"].get<int>(), rc["replayed"].get<int>());
}

// Bytes changed on the wire from outside pfsnet: nftables rewrites one byte of every tenth
// large TCP segment as each end receives it -- a middlebox or NIC fault that TCP's checksum
// does not see (on veth nothing checks it). With lnet.checksum on (the default) nothing
// damaged reaches a handler or a caller: every write runs once with its data intact, every
// read returns intact data, the damaged messages are resent and counted on the peer NI as
// PEER_NI_CORRUPT. With the client's checksum turned off at run time the same damage
// reaches the server's BRW_WRITE handler, which finds its pattern broken.
TEST(NetnsTest, DataDamagedOnTheWireIsCaughtAndResentNeverDelivered) {
  TwoRails net(10);
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  for (int side = 0; side < 2; ++side)
    ASSERT_TRUE(net.nft(side,
                        "table inet pfsmangle {\n chain in {\n  type filter hook input priority 0; "
                        "policy accept;\n  ip saddr 198.18.0.0/15 meta l4proto tcp meta length > "
                        "1000 numgen inc mod 10 == 0 @ih,800,8 set 0x5a\n }\n}\n"));
  constexpr int kRpcs = 200;
  auto ping = [&](const std::string& mode, int want_rc = 0) {  // 1: some failed
    auto p = std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", net.socket(0), "ping", net.nid(1, 0), "--mode", mode, "--size",
        "65536", "--count", std::to_string(kRpcs), "--interval", "0", "--timeout", "10", "--json"});
    EXPECT_EQ(p->wait_exit(120000ms), want_rc) << p->output();
    EXPECT_TRUE(p->wait_eof(5000ms));
    return last_json_line(p->output());
  };
  auto corrupt = [&](int side) {  // PEER_NI_CORRUPT over the other side's NIs
    int64_t n = 0;
    json all = net.cli(side, {"peers"});
    for (const json& p : all["peers"]) n += p["errors"].value("PEER_NI_CORRUPT", 0);
    return n;
  };
  json writes = ping("write"), reads = ping("read");
  EXPECT_EQ(writes["ok"], kRpcs) << writes.dump();
  EXPECT_EQ(reads["ok"], kRpcs) << reads.dump();  // each reply's pattern checked by ping
  int64_t at_server = corrupt(1), at_client = corrupt(0);
  EXPECT_GT(at_server, 0) << "no damaged request caught";
  EXPECT_GT(at_client, 0) << "no damaged reply caught";
  EXPECT_EQ(executions(net.socket(1), "BRW_WRITE", kRpcs), kRpcs);  // none twice, none damaged
  int64_t resends = 0;
  for (int rail = 0; rail < 2; ++rail)
    resends += net.peer(0, net.nid(1, rail))["resends"].get<int64_t>();
  EXPECT_GE(resends, 1);

  // The client stops sealing its messages: the damage now reaches the handler.
  json set = net.cli(0, {"config", "set", "lnet.checksum=false"});
  ASSERT_TRUE(set.is_object()) << set.dump();
  json unchecked = ping("write", 1);
  EXPECT_GT(unchecked["failed"].get<int>(), 0) << unchecked.dump();
  EXPECT_GT(unchecked["errors"].value("PROTOCOL_ERROR", 0), 0) << unchecked.dump();
  std::printf(
      "damage on the wire, checksum on: %d writes and %d reads intact, %lld damaged "
      "requests and %lld damaged replies caught, %lld resends; checksum off: %d of %d "
      "writes reached the handler damaged\n",
      writes["ok"].get<int>(), reads["ok"].get<int>(), (long long)at_server, (long long)at_client,
      (long long)resends, unchecked["errors"].value("PROTOCOL_ERROR", 0), kRpcs);
}

// What TCP hides: a rail that drops 5% of its packets (nftables, outside pfsnet) carries
// every RPC -- TCP retransmits them -- and shows only as latency in pfsnet's own figures;
// the kernel's figures per path (peers -v) show the retransmissions, and the clean rail
// next to none.
TEST(NetnsTest, TcpInfoShowsTheRetransmitsOfALossyRail) {
  // 10 s RPCs (3.3 s per attempt): a segment lost twice waits out TCP's backed-off
  // retransmission timer without a remote timeout closing the connection (and its figures).
  TwoRails net(10);
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  ASSERT_TRUE(net.lose(0, 5));
  for (int rail = 0; rail < 2; ++rail) {
    auto load = std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", net.socket(0), "ping", net.nid(1, rail), "--count", "200", "--size",
        "65536", "--interval", "0", "--timeout", "10", "--json"});
    ASSERT_EQ(load->wait_exit(60000ms), 0) << load->output();
  }
  json p = net.cli(0, {"peers", "-v"});
  // Peer NID -> its path's kernel totals, closed connections included: a segment lost
  // several times over may outlast an attempt, and the remote timeout then closes the
  // lossy rail's connection (CI saw it 55 ms before this look); its figures stay.
  std::map<std::string, json> total, open;
  for (const json& n : p["peers"])
    for (const json& path : n.value("paths", json::array())) {
      if (path.contains("tcp_total")) total[n["nid"]] = path["tcp_total"];
      if (path.contains("tcp")) open[n["nid"]] = path["tcp"];
    }
  ASSERT_TRUE(total.count(net.nid(1, 0)) && total.count(net.nid(1, 1))) << p.dump();
  ASSERT_TRUE(open.count(net.nid(1, 1))) << p.dump();
  auto ratio = [](const json& t) {
    return double(t["retransmits"].get<uint64_t>()) /
           double(std::max<uint64_t>(1, t["segments_out"].get<uint64_t>()));
  };
  const json& lossy = total[net.nid(1, 0)];
  const json& clean = total[net.nid(1, 1)];
  EXPECT_GT(lossy["segments_out"].get<uint64_t>(), 200u) << lossy.dump();
  EXPECT_GT(lossy["retransmits"].get<uint64_t>(), 0u) << lossy.dump();
  EXPECT_GT(ratio(lossy), 0.005) << lossy.dump();
  // A clean rail on a busy machine may still send a tail-loss probe or two (CI saw 1 of
  // 9389 segments); it stays far below the lossy one.
  EXPECT_LT(ratio(clean), 0.002) << clean.dump();
  EXPECT_LT(ratio(clean), ratio(lossy) / 10) << clean.dump();
  const json& clean_now = open[net.nid(1, 1)];
  EXPECT_GT(clean_now["rtt_ms"].get<double>(), 0.0) << clean_now.dump();
  EXPECT_GT(clean_now["pmtu"].get<unsigned>(), 0u) << clean_now.dump();
  // The human view says it too.
  auto [rc, out] = run({PFSNET_BIN, "--socket", net.socket(0), "peers", "-v"});
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("tcp: over all its connections, retransmits"), std::string::npos) << out;
  std::printf("5%% drop: %llu of %llu segments retransmitted (%.2f%%), clean rail %llu of %llu\n",
              static_cast<unsigned long long>(lossy["retransmits"].get<uint64_t>()),
              static_cast<unsigned long long>(lossy["segments_out"].get<uint64_t>()),
              100 * ratio(lossy),
              static_cast<unsigned long long>(clean["retransmits"].get<uint64_t>()),
              static_cast<unsigned long long>(clean["segments_out"].get<uint64_t>()));
}

// Health that sees loss: a rail that drops 5% of its packets (nftables, outside pfsnet)
// still carries every RPC, so LNet health (errors only) leaves it at 1000. The slowness
// judgement calls its peer NI degraded (LOSSY) within seconds, selection leaves it for the
// clean rail, and once the drops stop the monitor's probes bring it back.
TEST(NetnsTest, ALossyRailIsCalledDegradedLeftAndTakenBackWhenClean) {
  TwoRails net(10);  // as above: TCP's backed-off retransmits stay within an attempt
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  ASSERT_TRUE(net.lose(0, 5));
  // ~40 s of 64 KiB echoes to the server, on whichever rail selection picks.
  auto load = std::make_unique<Process>(std::vector<std::string>{
      PFSNET_BIN, "--socket", net.socket(0), "ping", net.nid(1, 0), "--count", "8000", "--size",
      "65536", "--interval", "0.005", "--timeout", "10", "--json"});
  auto degraded = [&](int rail) {  // "?" while the peer NI is not known yet
    json p = net.peer(0, net.nid(1, rail));
    return p.is_object() ? p.value("degraded", std::string("?")) : std::string("?");
  };
  double found = poll_until([&] { return degraded(0) == "LOSSY"; }, 30000ms);
  ASSERT_GE(found, 0) << net.cli(0, {"peers", "-v"}).dump() << net.daemon(0).output();
  std::printf("5%% drop on rail 1: its peer NI degraded (LOSSY) %.1f s after the load began\n",
              found);
  json lossy = net.peer(0, net.nid(1, 0));
  EXPECT_EQ(lossy["degraded_penalty"], 500) << lossy.dump();
  EXPECT_NE(lossy["degraded_evidence"].get<std::string>().find("TCP retransmitted"),
            std::string::npos)
      << lossy.dump();
  // Nothing healthy is called faulty: the clean rail's peer NI, and the local NIs (one
  // peer cannot tell a local fault from the peer's).
  EXPECT_EQ(degraded(1), "");
  EXPECT_EQ(net.ni(0, 0)["degraded"], "");
  EXPECT_EQ(net.ni(0, 1)["degraded"], "");
  // Selection leaves it: the clean rail takes nearly every new send (the lossy one gets
  // the monitor's probes, two a second).
  uint64_t r0 = sent(net.ni(0, 0)), r1 = sent(net.ni(0, 1));
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 1)) > r1 + 400; }, 20000ms), 0)
      << load->output();
  uint64_t d0 = sent(net.ni(0, 0)) - r0, d1 = sent(net.ni(0, 1)) - r1;
  EXPECT_LT(d0 * 10, d1) << "rail 1 " << d0 << ", rail 2 " << d1;
  auto [rc, out] = run({PFSNET_BIN, "--socket", net.socket(0), "peers"});
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("degraded (LOSSY)"), std::string::npos) << out;
  EXPECT_NE(net.daemon(0).output().find("is degraded (LOSSY)"), std::string::npos);
  // `pfsnet health` names it, and not the clean rail (as a faulty link: a settings advice
  // about it would be no fault).
  json h = net.cli(0, {"health"});
  bool named = false;
  for (const json& p : h.value("problems", json::array())) {
    named = named || (p["subject"] == net.nid(1, 0) && p["cause"] == "LOSSY");
    if (p["kind"] != "settings") {
      EXPECT_NE(p["subject"], net.nid(1, 1)) << h.dump();
    }
  }
  EXPECT_TRUE(named) << h.dump();
  // The drops stop: the probes (a 64 KiB echo a second) show a clean window, and the peer
  // NI is healthy again after the damping.
  ASSERT_TRUE(net.nft(1, "delete table inet pfsloss\n"));
  double back = poll_until([&] { return degraded(0).empty(); }, 60000ms);
  ASSERT_GE(back, 0) << net.cli(0, {"peers", "-v"}).dump();
  std::printf("drops stopped: healthy again after %.1f s\n", back);
  // The end says how long it lasted.
  EXPECT_NE(net.daemon(0).output().find("is no longer degraded (was LOSSY, for "),
            std::string::npos);
  load->kill(SIGKILL);
}

TEST(NetnsTest, KilledPeerFailsEveryRpcWithinTheTimeoutWithItsKind) {
  TwoRails net;
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  auto load = net.load(1000, "0.002", 3);
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 0)) + sent(net.ni(0, 1)) > 100; }, 10000ms), 0);
  net.daemon(1).kill(SIGKILL);
  ASSERT_EQ(net.daemon(1).wait_exit(5000ms), 128 + SIGKILL);
  ASSERT_EQ(load->wait_exit(60000ms), 1) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_GT(summary["ok"].get<int>(), 50);
  EXPECT_GT(summary["failed"].get<int>(), 0);
  // Nothing listens any more: connections are refused.
  EXPECT_GE(summary["errors"].value("PEER_NI_CONNECT_ERROR", 0), 1) << summary.dump();
  EXPECT_LE(summary["total_max_ms"].get<double>(), 3000 + 500) << "within transaction_timeout";
  // The error names the last failure's kind and its cause. A resend waits for the
  // backed-off reconnect only within the RPC's deadline: this 3 s ping, long after the
  // outage began, fails at once when the next connect comes after it ("the next attempt,
  // in N ms, comes after ..."), else after the refused connects within it ("failed after
  // N attempts").
  const auto start = std::chrono::steady_clock::now();
  auto [rc, out] = run(
      {PFSNET_BIN, "--socket", net.socket(0), "ping", net.nid(1, 1), "-c", "1", "--timeout", "3"},
      20000ms);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "within its deadline" << out;
  EXPECT_NE(out.find("PEER_NI_CONNECT_ERROR"), std::string::npos) << out;
  EXPECT_NE(out.find("Connection refused"), std::string::npos) << out;
  EXPECT_TRUE(out.find("comes after") != std::string::npos ||
              out.find("failed after") != std::string::npos)
      << out;
}

TEST(NetnsTest, UnreachableAddressesGetTheirKinds) {
  TwoRails net(15);  // attempts of 5 s: longer than ARP's 3 s
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  // No route to that network at all: ENETUNREACH at once.
  auto [rc, out] = run({PFSNET_BIN, "--socket", net.socket(0), "ping", "198.19.7.7@tcp", "-c", "1",
                        "--timeout", "15", "--json"},
                       30000ms);
  ASSERT_EQ(rc, 1) << out;
  EXPECT_EQ(last_json_line(out)["errors"]["PEER_NI_UNREACHABLE"], 1) << out;
  // On the rail's subnet, but no host answers ARP: EHOSTUNREACH after the ARP timeout.
  std::tie(rc, out) = run({PFSNET_BIN, "--socket", net.socket(0), "ping", "198.18.1.77@tcp", "-c",
                           "1", "--timeout", "15", "--json"},
                          30000ms);
  ASSERT_EQ(rc, 1) << out;
  EXPECT_EQ(last_json_line(out)["errors"]["PEER_NI_UNREACHABLE"], 1) << out;
  json p = net.peer(0, "198.18.1.77@tcp");
  EXPECT_GE(p["errors"]["PEER_NI_UNREACHABLE"].get<int>(), 1) << p.dump();
  EXPECT_EQ(net.ni(0, 0)["health"], 1000) << "a peer's failure is not the local NI's";
}

// pfsnet netverify on real links, faults made outside pfsnet: the two rails pass; then an
// MTU mismatch (one end 9000, the other 1500), a hop that drops packets over 1500 between
// two 9000 ends (one direction only), an asymmetric route (the server's route to the
// client's rail-1 address goes out of its rail-2 link) and a throttled direction (tbf) are
// each named as such, and nothing else fails with them.
TEST(NetnsTest, NetverifyNamesMtuMismatchSmallHopAsymmetricRouteAndThrottledDirection) {
  TwoRails net;
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  auto verify = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {PFSNET_BIN, "--socket", net.socket(0), "netverify"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--json");
    auto [rc, out] = run(argv, 120000ms);
    json j = last_json_line(out);
    EXPECT_TRUE(j.contains("nodes")) << out;
    return std::make_pair(rc, j);
  };
  // The checks of the one path to `peer`, by name -> {result, detail}.
  auto checks = [](const json& r) {
    std::map<std::string, std::pair<std::string, std::string>> m;
    if (!r.contains("nodes") || r["nodes"].empty() || r["nodes"][0]["paths"].empty()) return m;
    for (const json& c : r["nodes"][0]["paths"][0]["checks"])
      m[c["check"]] = {c["result"], c["detail"]};
    return m;
  };
  auto only_failed = [&](const json& r, const std::set<std::string>& want) {
    std::set<std::string> failed;
    for (const auto& [name, v] : checks(r))
      if (v.first == "FAIL") failed.insert(name);
    EXPECT_EQ(failed, want) << r.dump();
  };
  const std::string rail1 = net.nid(1, 0), rail2 = net.nid(1, 1);

  auto [rc, r] = verify({rail1, rail2, "--no-bandwidth"});
  EXPECT_EQ(rc, 0) << r.dump();
  EXPECT_EQ(r["passed"], 2) << r.dump();
  for (const json& n : r["nodes"]) {
    const json& f = n["paths"][0]["figures"];
    EXPECT_EQ(f["mtu_out"], 1500);
    EXPECT_EQ(f["mtu_back"], 1500);
  }

  // 1. MTU mismatch on rail 1: the client's end 9000, the server's 1500.
  ASSERT_TRUE(net.mtu(0, 0, 9000));
  std::tie(rc, r) = verify({rail1, "--no-bandwidth"});
  EXPECT_EQ(rc, 1);
  only_failed(r, {"mtu"});
  std::string want = "MTU mismatch: 9000 here (" + net.ifname(0, 0) + "), 1500 on server (" +
                     net.ifname(1, 0) + ")";
  EXPECT_EQ(checks(r)["mtu"].second.rfind(want, 0), 0u) << checks(r)["mtu"].second;
  EXPECT_EQ(r["nodes"][0]["paths"][0]["figures"]["mtu_out"], 1500) << r.dump();
  std::printf("MTU mismatch: %s\n", checks(r)["mtu"].second.c_str());
  ASSERT_TRUE(net.mtu(0, 0, 1500));

  // 2. Both ends of rail 2 at 9000, a hop that drops what is over 1500 on the way in.
  ASSERT_TRUE(net.mtu(0, 1, 9000) && net.mtu(1, 1, 9000));
  ASSERT_TRUE(net.nft(1,
                      "table inet pfshop {\n chain in {\n  type filter hook input priority 0; "
                      "policy accept;\n  ip saddr " +
                          TwoRails::addr(0, 1) + " ip length > 1500 drop\n }\n}\n"));
  std::tie(rc, r) = verify({rail2, "--no-bandwidth"});
  EXPECT_EQ(rc, 1);
  only_failed(r, {"mtu"});
  EXPECT_NE(checks(r)["mtu"].second.find("out carries 1500, not 4096 (both ends take 9000)"),
            std::string::npos)
      << checks(r)["mtu"].second;
  EXPECT_EQ(r["nodes"][0]["paths"][0]["figures"]["mtu_back"], 9000) << r.dump();
  std::printf("small hop: %s\n", checks(r)["mtu"].second.c_str());
  ASSERT_TRUE(net.nft(1, "delete table inet pfshop\n"));
  ASSERT_TRUE(net.mtu(0, 1, 1500) && net.mtu(1, 1, 1500));

  // 3. The server's route back to the client's rail-1 address leaves by its rail-2 link.
  ASSERT_TRUE(
      net.ip_in(1, {"route", "add", TwoRails::addr(0, 0) + "/32", "dev", net.ifname(1, 1)}));
  std::tie(rc, r) = verify({rail1, "--no-bandwidth"});
  EXPECT_EQ(rc, 1);
  only_failed(r, {"routing"});
  std::string routing = checks(r)["routing"].second;
  EXPECT_NE(routing.find("out of " + net.ifname(1, 1) + ", not " + net.ifname(1, 0)),
            std::string::npos)
      << routing;
  EXPECT_NE(routing.find("come back on " + net.ifname(0, 1)), std::string::npos) << routing;
  std::printf("asymmetric route: %s\n", routing.c_str());
  ASSERT_TRUE(net.ip_in(1, {"route", "del", TwoRails::addr(0, 0) + "/32"}));

  // 4. The client's rail-1 sends shaped to 20 Mbit/s (tbf): out is a fraction of back.
  ASSERT_TRUE(net.tc(0, {"qdisc", "add", "dev", net.ifname(0, 0), "root", "tbf", "rate", "20mbit",
                         "burst", "16kb", "latency", "200ms"}));
  std::tie(rc, r) = verify({rail1, "--size", "64K"});
  EXPECT_EQ(rc, 1);
  only_failed(r, {"bandwidth"});
  const json& f = r["nodes"][0]["paths"][0]["figures"];
  EXPECT_LT(f["write_mib_s"].get<double>(), 3.0) << r.dump();  // 20 Mbit/s = 2.4 MiB/s
  EXPECT_GT(f["read_mib_s"].get<double>(), 3 * f["write_mib_s"].get<double>()) << r.dump();
  std::printf("throttled: %s\n", checks(r)["bandwidth"].second.c_str());
  ASSERT_TRUE(net.tc(0, {"qdisc", "del", "dev", net.ifname(0, 0), "root"}));
}

}  // namespace
}  // namespace pfsnet::testing::netns
