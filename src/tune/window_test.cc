#include "tune/window.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tune/text.h"
#include "tune/tune.h"

namespace pfsnet {
namespace {

using tune_text::kMiB;

// A connection's counters after `busy_s` seconds busy, `rwnd_s` and `sndbuf_s` of them held
// back, `sent` bytes sent; RTT 50 ms, the peer advertising 256 KiB, a 512 KiB send buffer.
TcpKernelInfo info(double busy_s, double rwnd_s, double sndbuf_s, double sent) {
  TcpKernelInfo k;
  k.busy_us = static_cast<uint64_t>(busy_s * 1e6);
  k.rwnd_limited_us = static_cast<uint64_t>(rwnd_s * 1e6);
  k.sndbuf_limited_us = static_cast<uint64_t>(sndbuf_s * 1e6);
  k.bytes_sent = static_cast<uint64_t>(sent);
  k.rtt_us = 50000;
  k.snd_wnd = 256 * 1024;
  k.sndbuf = 512 * 1024;
  return k;
}

TEST(WindowWatchTest, APathHeldBackByThePeersWindowIsFoundWithItsCeiling) {
  WindowWatch w;
  EXPECT_TRUE(w.update({{"a -> b", "b", info(0, 0, 0, 0)}}, 10).empty());  // first reading
  // 10 s later: busy 9 s, 8 of them held by the receive window, 50 MiB sent.
  auto f = w.update({{"a -> b", "b", info(9, 8, 0, 50 * kMiB)}}, 10);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].peer, "b");
  EXPECT_EQ(f[0].limit, WindowLimit::kPeerReceiveWindow);
  EXPECT_NEAR(f[0].limited_share, 8.0 / 9, 1e-9);
  EXPECT_EQ(f[0].window_bytes, 256 * 1024);
  EXPECT_NEAR(f[0].ceiling / kMiB, 0.25 / 0.05, 1e-9);  // 5 MiB/s
  EXPECT_NEAR(f[0].carried / kMiB, 5, 1e-9);

  TuneProblem p = window_problem(f[0], 6 * kMiB, HostTcp{}, 0);
  EXPECT_EQ(p.code, "tcp_window");
  EXPECT_EQ(p.peer, "b");
  EXPECT_NE(p.text.find("held back by the peer's receive window 89%"), std::string::npos) << p.text;
  EXPECT_NE(p.text.find("at most 5.0 MiB/s"), std::string::npos) << p.text;
  EXPECT_NE(p.text.find("256.0 KiB window at 50.0 ms"), std::string::npos) << p.text;
  EXPECT_NE(p.text.find("on b set lnet.rx_buffer_size = 0"), std::string::npos) << p.text;
  EXPECT_NE(p.text.find("tcp_rmem='4096 131072 12582912'"), std::string::npos) << p.text;
}

TEST(WindowWatchTest, TheSendBufferIsNamedWhenItHoldsTheConnection) {
  WindowWatch w;
  w.update({{"a -> b", "b", info(0, 0, 0, 0)}}, 10);
  auto f = w.update({{"a -> b", "b", info(10, 1, 7, 100 * kMiB)}}, 10);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].limit, WindowLimit::kSendBuffer);
  EXPECT_EQ(f[0].window_bytes, 256 * 1024);  // half of SO_SNDBUF is data
  TuneProblem fixed = window_problem(f[0], 6 * kMiB, HostTcp{}, 262144);
  EXPECT_NE(fixed.text.find("lnet.tx_buffer_size = 262144 fixes it"), std::string::npos)
      << fixed.text;
  HostTcp h;
  h.tcp_wmem_max = 4 << 20;
  TuneProblem host = window_problem(f[0], 6 * kMiB, h, 0);
  EXPECT_NE(host.text.find("net.ipv4.tcp_wmem's maximum is 4.0 MiB"), std::string::npos)
      << host.text;
}

TEST(WindowWatchTest, AnIdleOrNetworkBoundPathOrANewConnectionIsNotBlamed) {
  WindowWatch w;
  w.update({{"idle", "b", info(0, 0, 0, 0)},
            {"net", "c", info(0, 0, 0, 0)},
            {"new", "d", info(50, 40, 0, 0)}},
           10);
  auto f = w.update({{"idle", "b", info(1, 1, 0, kMiB)},        // busy 10% of the interval
                     {"net", "c", info(10, 2, 1, 500 * kMiB)},  // held 30%: the network's
                     {"new", "d", info(5, 5, 0, kMiB)}},        // counters went back
                    10);
  EXPECT_TRUE(f.empty());
  // A LAN: a full window at 0.2 ms is a receiver that does not keep up, not the window.
  TcpKernelInfo lan = info(20, 10, 0, 0);
  lan.rtt_us = 200;
  w.update({{"lan", "e", lan}}, 10);
  TcpKernelInfo later = info(30, 19, 0, kMiB);
  later.rtt_us = 200;
  EXPECT_TRUE(w.update({{"lan", "e", later}}, 10).empty());
}

TEST(HostWindowTest, SettingsBelowTwiceTheBdpAreNamed) {
  HostTcp h;
  h.tcp_rmem_max = 6 << 20;
  h.tcp_wmem_max = 4 << 20;
  // BDP 24 MiB (4 Gbit/s x 50 ms): buffers of 48 MiB wanted.
  auto v = host_window_problems(h, 0, 0, 24 * kMiB, "oss1");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].code, "host_tcp_buffers");
  EXPECT_NE(v[0].text.find("tcp_wmem's maximum of 4.0 MiB"), std::string::npos) << v[0].text;
  EXPECT_NE(v[0].text.find("the path to oss1 has a BDP of 24.0 MiB"), std::string::npos);
  EXPECT_NE(v[1].text.find("tcp_rmem='4096 131072 50331648'"), std::string::npos) << v[1].text;
  // Fixed sizes are judged instead of the host's maxima.
  v = host_window_problems(h, 4 << 20, 64 << 20, 24 * kMiB, "oss1");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].text.find("lnet.tx_buffer_size = 4194304 fixes the send buffers at 8.0 MiB"),
            std::string::npos)
      << v[0].text;
  // Room enough, or no BDP known: nothing.
  h.tcp_rmem_max = h.tcp_wmem_max = 256 << 20;
  EXPECT_TRUE(host_window_problems(h, 0, 0, 24 * kMiB, "oss1").empty());
  EXPECT_TRUE(host_window_problems(HostTcp{}, 1024, 1024, 0, "oss1").empty());
}

// Reno regains a halved window one segment per round trip: on a long fat path that is tens
// of seconds per loss, and named with the cure; CUBIC and BBR, or a short path, are not.
TEST(HostWindowTest, RenoOnALongPathIsNamed) {
  const double bdp = 1e9 / 8 * 0.05;  // 1 Gbit/s x 50 ms = 6.25 MB
  // 6.25 MB / 8948 B = 698 segments; half of them, one per 50 ms round trip: 17.5 s.
  EXPECT_NEAR(loss_recovery_seconds("reno", bdp, 50, 8948), 17.46, 0.01);
  EXPECT_EQ(loss_recovery_seconds("cubic", bdp, 50, 8948), 0);
  EXPECT_EQ(loss_recovery_seconds("bbr", bdp, 50, 8948), 0);
  EXPECT_EQ(loss_recovery_seconds("reno", bdp, 50, 0), 0);  // unknown MSS: no judgement
  HostTcp h;
  h.congestion_control = "reno";
  auto v = host_cc_problems(h, bdp, 50, 8948, "oss1");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].code, "host_tcp_cc");
  EXPECT_NE(v[0].text.find("the path to oss1"), std::string::npos) << v[0].text;
  EXPECT_NE(v[0].text.find("takes 17 s"), std::string::npos) << v[0].text;
  EXPECT_NE(v[0].text.find("net.ipv4.tcp_congestion_control=cubic"), std::string::npos);
  // A LAN: 10 Gbit/s x 0.1 ms, 43 round trips of 0.1 ms -- nothing to say.
  EXPECT_TRUE(host_cc_problems(h, 10e9 / 8 * 1e-4, 0.1, 1448, "oss1").empty());
  h.congestion_control = "cubic";
  EXPECT_TRUE(host_cc_problems(h, bdp, 50, 8948, "oss1").empty());
}

TEST(HostWindowTest, ReadsTheSettingsFromProcSys) {
  auto dir =
      std::filesystem::temp_directory_path() / ("pfsnet-host-tcp-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "net/ipv4");
  std::filesystem::create_directories(dir / "net/core");
  std::ofstream(dir / "net/ipv4/tcp_rmem") << "4096\t131072\t33554432\n";
  std::ofstream(dir / "net/ipv4/tcp_wmem") << "4096\t16384\t4194304\n";
  std::ofstream(dir / "net/core/rmem_max") << "4194304\n";
  std::ofstream(dir / "net/ipv4/tcp_congestion_control") << "bbr\n";
  std::ofstream(dir / "net/core/netdev_max_backlog") << "30000\n";
  // Two CPUs: packets processed, dropped (hexadecimal), ...
  std::ofstream(dir / "softnet_stat") << "0000a1b2 0000000a 00000000 00000000\n"
                                      << "00001000 00000106 00000003 00000000\n";
  HostTcp h = read_host_tcp(dir.string());
  EXPECT_EQ(h.tcp_rmem_max, 33554432);
  EXPECT_EQ(h.tcp_wmem_max, 4194304);
  EXPECT_EQ(h.rmem_max, 4194304);
  EXPECT_EQ(h.wmem_max, 0);  // missing: unknown
  EXPECT_EQ(h.congestion_control, "bbr");
  EXPECT_EQ(h.slow_start_after_idle, -1);
  EXPECT_EQ(h.netdev_max_backlog, 30000);
  EXPECT_EQ(read_backlog_drops((dir / "softnet_stat").string()), 0xau + 0x106u);
  EXPECT_EQ(read_backlog_drops((dir / "missing").string()), 0u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pfsnet
