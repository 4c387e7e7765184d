#include "probe/netverify.h"

#include <gtest/gtest.h>

#include "base/test_nid.h"

namespace pfsnet {
namespace {

const NvCheck& check(const std::vector<NvCheck>& v, const std::string& name) {
  for (const NvCheck& c : v)
    if (c.name == name) return c;
  static NvCheck none{"none", NvVerdict::kSkip, "no such check"};
  ADD_FAILURE() << "no check " << name;
  return none;
}

// A healthy path between two 9000-byte interfaces, 0.1 ms apart, 1 GiB/s each way.
NvPath good() {
  NvPath p;
  p.peer_name = "n3";
  p.local = nid("198.18.0.1@tcp");
  p.peer = nid("198.18.0.2@tcp");
  p.local_if = "veth0";
  p.local_mtu = 9000;
  NvInfo i;
  i.name = "n3";
  i.peer_credits = 8;
  i.credits = 64;
  i.max_rpcs_in_flight = 8;
  i.max_bulk = 2 << 20;
  i.nis = {{p.peer, "veth1", 9000}};
  i.route_if = "veth1";
  i.tcp = {6 << 20, 4 << 20, 0, 0, "bbr", 1000, 12};  // Debian's maxima, autotuning
  p.info = i;
  for (NvMtuDir* d : {&p.fwd, &p.rev}) {
    d->sender_mtu = d->receiver_mtu = 9000;
    nv_settle_mtu(*d, nv_mtu_ladder(9000, 9000), nv_mtu_ladder(9000, 9000));
  }
  p.fwd.arrival_if = "veth1";
  p.fwd.arrival_dst = "198.18.0.2";
  p.fwd.src = "198.18.0.1";
  p.rev.arrival_if = "veth0";
  p.rev.arrival_dst = "198.18.0.1";
  p.rev.src = "198.18.0.2";
  p.rtt_ms = 0.1;
  p.clock = NvClock{0.02, 0.05};
  p.write_bps = p.read_bps = 1024.0 * 1024 * 1024;
  p.peer_credits = 8;
  p.max_rpcs_in_flight = 8;
  p.max_bulk = 2 << 20;
  p.tcp = {6 << 20, 4 << 20, 0, 0, "cubic", 1000, 7};
  p.backlog_drops_here = p.backlog_drops_there = 0;
  return p;
}

TEST(NetverifyCodec, MessagesRoundTripAndRefuseGarbage) {
  NvInfo i = *good().info;
  i.wall_unix_ns = 1795511159123456789;
  auto di = decode_nv_info(encode_nv_info(i).span());
  ASSERT_TRUE(di.ok()) << di.status().to_string();
  EXPECT_EQ(*di, i);
  Buffer b = encode_nv_info(i);
  // A peer of an earlier version ends before the receive backlog's two fields (16 bytes):
  // read as not reported. Any other cut is refused.
  const size_t earlier = b.size() - 16;
  for (size_t cut = 0; cut < b.size(); ++cut)
    if (cut != earlier) {
      EXPECT_FALSE(decode_nv_info(std::span(b.data(), cut)).ok()) << cut;
    }
  auto old = decode_nv_info(std::span(b.data(), earlier));
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  EXPECT_EQ(old->tcp.netdev_max_backlog, 0);
  EXPECT_EQ(old->tcp.backlog_drops, 0u);

  NvMtuSendReq q{nid("198.18.0.2@tcp"), 7988, 42, {576, 1500, 9000}};
  auto dq = decode_nv_mtu_send_req(encode_nv_mtu_send_req(q).span());
  ASSERT_TRUE(dq.ok());
  EXPECT_EQ(*dq, q);
  q.sizes = {100};  // below what every path carries: refused
  EXPECT_FALSE(decode_nv_mtu_send_req(encode_nv_mtu_send_req(q).span()).ok());
  q.sizes = {576};
  q.port = 0;
  EXPECT_FALSE(decode_nv_mtu_send_req(encode_nv_mtu_send_req(q).span()).ok());

  NvMtuSendRep rep{{576, 1500}, {9000}};
  auto dr = decode_nv_mtu_send_rep(encode_nv_mtu_send_rep(rep).span());
  ASSERT_TRUE(dr.ok());
  EXPECT_EQ(*dr, rep);
}

TEST(NetverifyCodec, ProbesArePaddedToTheirSizeAndAcksAreSmall) {
  NvDatagram p{NvKind::kProbe, 7, 1500, {}, {}, {}};
  auto bytes = encode_nv_datagram(p);
  EXPECT_EQ(bytes.size(), 1500u - kNvIpUdpHeader);
  auto d = decode_nv_datagram(bytes);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, p);
  // A probe cut short in transit (or lying about its size) is refused.
  bytes.pop_back();
  EXPECT_FALSE(decode_nv_datagram(bytes).ok());
  NvDatagram ack{NvKind::kAck, 7, 1500, "veth1", "198.18.0.2", "198.18.0.1"};
  auto ab = encode_nv_datagram(ack);
  EXPECT_LT(ab.size(), kNvMinPacket - kNvIpUdpHeader);  // smaller than any probe: no amplifying
  auto da = decode_nv_datagram(ab);
  ASSERT_TRUE(da.ok());
  EXPECT_EQ(*da, ack);
  std::vector<uint8_t> junk(600, 0xab);
  EXPECT_FALSE(decode_nv_datagram(junk).ok());
  ab[4] = 9;  // unknown kind
  EXPECT_FALSE(decode_nv_datagram(ab).ok());
}

TEST(NetverifyMtu, LadderAndSettling) {
  EXPECT_EQ(nv_mtu_ladder(9000, 1500), (std::vector<uint32_t>{576, 1280, 1500, 4096, 9000}));
  EXPECT_EQ(nv_mtu_ladder(1500, 9000), (std::vector<uint32_t>{576, 1280, 1500}));
  EXPECT_EQ(nv_mtu_ladder(65536, 65536),
            (std::vector<uint32_t>{576, 1280, 1500, 4096, 9000, 65535}));
  EXPECT_EQ(nv_mtu_ladder(1450, 0), (std::vector<uint32_t>{576, 1280, 1450}));
  NvMtuDir d;
  nv_settle_mtu(d, {576, 1280, 1500, 4096, 9000}, {1280, 576, 1500});
  EXPECT_TRUE(d.measured);
  EXPECT_EQ(d.largest_ok, 1500u);
  EXPECT_EQ(d.smallest_lost, 4096u);
}

TEST(NetverifyClock, OffsetFromTheShortestRoundTrip) {
  // The peer is 5 ms ahead. A slow exchange (20 ms round trip, its answer late) would say
  // 12 ms; the 2 ms one says 5 +/- 1.
  int64_t ms = 1000000;
  std::vector<NvClockSample> s = {{0, 17 * ms, 20 * ms}, {100 * ms, 106 * ms, 102 * ms}};
  NvClock c = nv_clock_offset(s);
  EXPECT_DOUBLE_EQ(c.offset_ms, 5.0);
  EXPECT_DOUBLE_EQ(c.error_ms, 1.0);
}

TEST(NetverifyJudge, AHealthyPathPassesEveryCheck) {
  auto v = judge_path(good(), NvLimits{});
  ASSERT_EQ(v.size(), 9u);
  for (const NvCheck& c : v) EXPECT_EQ(c.verdict, NvVerdict::kPass) << c.name << ": " << c.detail;
  EXPECT_NE(check(v, "mtu").detail.find("out 9000, back 9000"), std::string::npos);
}

// A path through routers: its RPC checks hold end to end; its port, MTU and IP routing are
// each hop's, skipped with the routers named (nothing was measured there: no fail either).
TEST(NetverifyJudge, ARoutedPathSkipsTheHopsChecksAndNamesItsRouters) {
  NvPath p = good();
  p.peer = nid("198.18.2.3@tcp2");
  p.via = {nid("198.18.0.7@tcp"), nid("198.18.0.8@tcp")};
  p.fwd = p.rev = NvMtuDir{};  // not measured
  auto v = judge_path(p, NvLimits{});
  ASSERT_EQ(v.size(), 9u);
  for (const char* hop : {"port", "mtu", "routing"}) {
    EXPECT_EQ(check(v, hop).verdict, NvVerdict::kSkip) << hop;
    EXPECT_NE(check(v, hop).detail.find("through the router(s) 198.18.0.7@tcp, 198.18.0.8@tcp"),
              std::string::npos)
        << check(v, hop).detail;
  }
  for (const char* e2e : {"handshake", "rtt", "bandwidth", "clock"})
    EXPECT_EQ(check(v, e2e).verdict, NvVerdict::kPass) << e2e << ": " << check(v, e2e).detail;
  // Direct, the same unmeasured MTU fails.
  p.via.clear();
  EXPECT_EQ(check(judge_path(p, NvLimits{}), "mtu").verdict, NvVerdict::kFail);
}

TEST(NetverifyJudge, AClosedPortAndAWrongKeyAreToldApart) {
  NvPath p = good();
  p.port = Status(Code::kUnreachable, "connect to 198.18.0.2:7988: Connection refused");
  p.handshake = Status(Code::kUnreachable, "connection refused");
  p.info.reset();
  auto v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "port").verdict, NvVerdict::kFail);
  EXPECT_EQ(check(v, "handshake").verdict, NvVerdict::kSkip);
  EXPECT_EQ(check(v, "mtu").verdict, NvVerdict::kSkip);
  p = good();
  p.handshake = Status(Code::kRejected, "HELLO refused: wrong cluster key");
  p.info.reset();
  v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "port").verdict, NvVerdict::kPass);
  EXPECT_EQ(check(v, "handshake").verdict, NvVerdict::kFail);
  EXPECT_NE(check(v, "handshake").detail.find("cluster key"), std::string::npos);
}

TEST(NetverifyJudge, MtuMismatchIsNamedAndASmallHopToo) {
  NvPath p = good();
  p.info->nis[0].mtu = 1500;  // the peer's interface
  p.fwd.receiver_mtu = 1500;
  nv_settle_mtu(p.fwd, nv_mtu_ladder(9000, 1500), {576, 1280, 1500});
  p.rev.sender_mtu = 1500;
  nv_settle_mtu(p.rev, nv_mtu_ladder(1500, 9000), nv_mtu_ladder(1500, 9000));
  auto v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "mtu").verdict, NvVerdict::kFail);
  EXPECT_EQ(check(v, "mtu").detail.rfind("MTU mismatch: 9000 here (veth0), 1500 on n3 (veth1)", 0),
            0u)
      << check(v, "mtu").detail;
  // Both ends 9000, a switch between them at 1500.
  p = good();
  nv_settle_mtu(p.fwd, nv_mtu_ladder(9000, 9000), {576, 1280, 1500});
  v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "mtu").verdict, NvVerdict::kFail);
  EXPECT_NE(check(v, "mtu").detail.find("out carries 1500, not 4096"), std::string::npos)
      << check(v, "mtu").detail;
  EXPECT_NE(check(v, "mtu").detail.find("smaller MTU"), std::string::npos);
}

TEST(NetverifyJudge, AsymmetricRoutesSayWhereThePacketsGo) {
  NvPath p = good();
  p.rev.arrival_if = "eth0";
  p.rev.arrival_dst = "198.18.0.1";
  auto v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "routing").verdict, NvVerdict::kFail);
  EXPECT_NE(check(v, "routing").detail.find("come back on eth0 (198.18.0.1), not on veth0"),
            std::string::npos)
      << check(v, "routing").detail;
  p = good();
  p.info->route_gateway = "198.18.1.254";
  p.info->route_if = "eth1";
  v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "routing").verdict, NvVerdict::kFail);
  EXPECT_NE(check(v, "routing")
                .detail.find("n3 sends from 198.18.0.2 to 198.18.0.1 out of eth1 "
                             "via 198.18.1.254, not veth1"),
            std::string::npos)
      << check(v, "routing").detail;
  p = good();
  p.fwd.arrival_if = "eth9";
  v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "routing").verdict, NvVerdict::kFail);
}

TEST(NetverifyJudge, ClockBandwidthAndSettings) {
  NvPath p = good();
  p.clock = NvClock{-1200, 0.05};
  auto v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "clock").verdict, NvVerdict::kFail);
  EXPECT_NE(check(v, "clock").detail.find("-1200.000 ms"), std::string::npos);
  // Within the limit once the error is allowed for.
  p.clock = NvClock{260, 20};
  EXPECT_EQ(check(judge_path(p, NvLimits{}), "clock").verdict, NvVerdict::kPass);

  p = good();
  p.read_bps = p.write_bps / 10;  // a throttled direction
  v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "bandwidth").verdict, NvVerdict::kFail);
  EXPECT_NE(check(v, "bandwidth").detail.find("throttled"), std::string::npos);
  NvLimits lim;
  lim.min_bandwidth_mib = 2000;
  EXPECT_EQ(check(judge_path(good(), lim), "bandwidth").verdict, NvVerdict::kFail);
  lim = NvLimits{};
  lim.max_rtt_ms = 0.05;
  EXPECT_EQ(check(judge_path(good(), lim), "rtt").verdict, NvVerdict::kFail);

  p = good();
  p.info->peer_credits = 32;
  v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "settings").verdict, NvVerdict::kFail);
  EXPECT_NE(check(v, "settings").detail.find("peer_credits 8 here, 32 on n3"), std::string::npos);
  // A WAN path: 1 GiB/s x 50 ms is 51.2 MiB: 52 RPCs of 1 MiB, and one more for the
  // serialisation (tune.h); 8 in flight do not fill it.
  p = good();
  p.rtt_ms = 50;
  v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "settings").verdict, NvVerdict::kFail);
  EXPECT_NE(check(v, "settings").detail.find("needs 53 RPCs of 1024 KiB"), std::string::npos)
      << check(v, "settings").detail;
  EXPECT_NE(check(v, "settings").detail.find("max_rpcs_in_flight is 8"), std::string::npos);
}

TEST(NetverifyJudge, TcpBuffersTooSmallForAWanPathAreNamedWithTheEnd) {
  // 0.1 ms at 1 GiB/s needs 0.2 MiB of buffer: Debian's maxima pass.
  auto v = judge_path(good(), NvLimits{});
  EXPECT_EQ(check(v, "tcp").verdict, NvVerdict::kPass) << check(v, "tcp").detail;
  EXPECT_NE(check(v, "tcp").detail.find("congestion control cubic/bbr"), std::string::npos);
  // 50 ms at 100 MiB/s each way needs 10 MiB: this node's tcp_wmem maximum (4 MiB) caps
  // what it sends, and n3's (4 MiB) what it sends back; the 6 MiB receive maxima too.
  NvPath p = good();
  p.rtt_ms = 50;
  p.write_bps = p.read_bps = 100.0 * 1024 * 1024;
  v = judge_path(p, NvLimits{});
  const NvCheck& c = check(v, "tcp");
  EXPECT_EQ(c.verdict, NvVerdict::kFail);
  EXPECT_NE(c.detail.find("out: net.ipv4.tcp_wmem's maximum of 4.0 MiB here caps the send buffer "
                          "below the 10.0 MiB"),
            std::string::npos)
      << c.detail;
  EXPECT_NE(c.detail.find("out: net.ipv4.tcp_rmem's maximum of 6.0 MiB on n3 caps the receive"),
            std::string::npos)
      << c.detail;
  EXPECT_NE(c.detail.find("back: net.ipv4.tcp_wmem's maximum of 4.0 MiB on n3"), std::string::npos)
      << c.detail;
  // Raised maxima pass; a fixed size set at one end is judged instead (doubled).
  p.tcp.tcp_rmem_max = p.tcp.tcp_wmem_max = p.info->tcp.tcp_rmem_max = p.info->tcp.tcp_wmem_max =
      256 << 20;
  EXPECT_EQ(check(judge_path(p, NvLimits{}), "tcp").verdict, NvVerdict::kPass);
  p.info->tcp.rx_buffer_size = 4 << 20;
  v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "tcp").verdict, NvVerdict::kFail);
  EXPECT_NE(check(v, "tcp").detail.find("out: lnet.rx_buffer_size = 4194304 on n3"),
            std::string::npos)
      << check(v, "tcp").detail;
  // Reno at the far end regains a halved window one segment per round trip: 100 MiB/s x
  // 50 ms / 8948 B / 2 = 293 round trips, 15 s, for what n3 sends back.
  p.info->tcp.rx_buffer_size = 0;
  p.info->tcp.congestion_control = "reno";
  v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "tcp").verdict, NvVerdict::kFail);
  EXPECT_NE(check(v, "tcp").detail.find("back: congestion control reno on n3 takes 15 s"),
            std::string::npos)
      << check(v, "tcp").detail;
  p.info->tcp.congestion_control = "cubic";
  EXPECT_EQ(check(judge_path(p, NvLimits{}), "tcp").verdict, NvVerdict::kPass);
  // Packets the receive backlog dropped at the far end while the trains ran: named with
  // the key; not measured (an earlier peer) is no verdict on it.
  p.backlog_drops_there = 340;
  v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "tcp").verdict, NvVerdict::kFail);
  EXPECT_NE(check(v, "tcp").detail.find("340 packets dropped by the receive backlog on n3 while "
                                        "the trains ran: raise net.core.netdev_max_backlog (now "
                                        "1000)"),
            std::string::npos)
      << check(v, "tcp").detail;
  p.backlog_drops_there.reset();
  v = judge_path(p, NvLimits{});
  EXPECT_EQ(check(v, "tcp").verdict, NvVerdict::kPass);
  EXPECT_EQ(check(v, "tcp").detail.find("no backlog drops"), std::string::npos);
  p.backlog_drops_there = 0;
  EXPECT_NE(check(judge_path(p, NvLimits{}), "tcp")
                .detail.find("netdev_max_backlog 1000/1000, "
                             "no backlog drops"),
            std::string::npos);
  // Without the figures it needs, it is skipped.
  p.write_bps = 0;
  EXPECT_EQ(check(judge_path(p, NvLimits{}), "tcp").verdict, NvVerdict::kSkip);
}

}  // namespace
}  // namespace pfsnet
