// Transport tests: the same checks over the real TCP transport (loopback sockets) and the
// in-memory one, plus TCP-only checks (handshake on a raw socket, malformed frames).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pfsnet/config.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "base/test_nid.h"
#include "transport/emulating_transport.h"
#include "transport/mem_transport.h"
#include "transport/tcp_internal.h"
#include "transport/tcp_transport.h"
#include "transport/test_frames.h"
#include "transport/test_raw_client.h"
#include "wire/handshake.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

constexpr char kKey[] = "0123456789abcdef-test-key";

class TxWaiter : public TxCompletion {
 public:
  void on_tx_done(const Status& s, const TxTimes& t) override {
    std::lock_guard lk(mu_);
    status = s;
    times = t;
    done = true;
    cv_.notify_all();
  }
  bool wait() {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, 5s, [&] { return done; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool done = false;
  Status status;
  TxTimes times;
};

TransportOptions opts(std::string key = kKey) {
  TransportOptions o;
  o.cluster_key = std::move(key);
  o.handshake_timeout = 2s;
  o.connect_timeout = 2s;
  return o;
}

using test::ConnectResult;
using test::frame;
using test::own;
using test::pattern;
using test::raw_client;
using test::raw_connect;
using test::Recorder;
using test::same;
using test::wire_frame;
using test::write_all;

// TCP transport pair on loopback: A = own(11), B = own(12).
class TcpPairTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  MonotonicClock real_;
  Recorder ea_, eb_;
  Nid a_ = own(11), b_ = own(12);
  uint16_t port_ = static_cast<uint16_t>(20000 + getpid() % 20000);
};

TEST_F(TcpPairTest, ConnectSendBulkAndCredits) {
  TcpTransport ta(opts(), {a_}, real_, ea_);
  TcpTransport tb(opts(), {b_, nid("127.0.1.12@tcp1")}, real_, eb_);
  ASSERT_TRUE(tb.listen(b_, port_).ok());
  ConnectResult cr;
  ta.connect(a_, b_, port_, cr.cb());
  ASSERT_TRUE(cr.wait());
  ASSERT_TRUE(cr.status.ok()) << cr.status.to_string();
  ASSERT_TRUE(eb_.wait([&] { return eb_.conns.size() == 1; }));
  ConnectionPtr ca = cr.conn;
  // Discovery: B told A all its NIDs, A's NI first on B's side.
  ASSERT_EQ(ca->peer_nids().size(), 2u);
  EXPECT_EQ(ca->peer_nids()[1].to_string(), "127.0.1.12@tcp1");
  EXPECT_EQ(eb_.conns[0]->peer_nid(), a_);

  // Frames of many sizes, including ones larger than the read buffer.
  std::vector<size_t> bulks = {0, 1, 64, 4096, 65536, 65537, 1 << 20, 2 << 20};
  std::vector<std::unique_ptr<TxWaiter>> waits;
  ca->add_credits_to_return(5);
  for (size_t i = 0; i < bulks.size(); ++i) {
    waits.push_back(std::make_unique<TxWaiter>());
    ca->send(frame(i + 1, 10 + i, bulks[i], waits.back().get()));
  }
  for (auto& w : waits) {
    ASSERT_TRUE(w->wait());
    EXPECT_TRUE(w->status.ok()) << w->status.to_string();
    EXPECT_LE(w->times.write_start, w->times.write_done);
  }
  ASSERT_TRUE(eb_.wait([&] { return eb_.frames.size() == bulks.size(); }));
  uint32_t credits = 0;
  for (size_t i = 0; i < bulks.size(); ++i) {
    const InFrame& f = eb_.frames[i];  // in order on one connection
    EXPECT_EQ(f.hdr.xid, i + 1);
    EXPECT_TRUE(same(f.payload, pattern(10 + i, static_cast<uint8_t>(i + 1))));
    EXPECT_TRUE(same(f.bulk, pattern(bulks[i], static_cast<uint8_t>(i + 2))))
        << "bulk " << bulks[i];
    EXPECT_LE(f.times.first_byte, f.times.complete);
    credits += f.hdr.credits;
  }
  EXPECT_EQ(credits, 5u);  // piggybacked exactly once

  // Reply direction over the accepted connection.
  TxWaiter w;
  eb_.conns[0]->send(frame(99, 0, 100, &w));
  ASSERT_TRUE(w.wait());
  ASSERT_TRUE(ea_.wait([&] { return ea_.frames.size() == 1; }));
  EXPECT_EQ(ea_.frames[0].hdr.xid, 99u);

  // Closing one side tells the other; sends after close fail cleanly.
  ca->close(Status(Code::kCancelled, "test"));
  ASSERT_TRUE(eb_.wait([&] { return eb_.closed.size() == 1; }));
  ASSERT_TRUE(ea_.wait([&] { return ea_.closed.size() == 1; }));
  TxWaiter late;
  ca->send(frame(100, 1, 0, &late));
  ASSERT_TRUE(late.wait());
  EXPECT_EQ(late.status.code(), Code::kClosed);
  // The kernel's figures outlive the close (Net adds them to the path's totals then).
  std::optional<TcpKernelInfo> k = ca->kernel_tcp_info(false);
  ASSERT_TRUE(k.has_value());
  EXPECT_GT(k->bytes_sent, uint64_t{3} << 20);
}

TEST_F(TcpPairTest, ABulkConnectionIsOneAtBothEnds) {
  TcpTransport ta(opts(), {a_}, real_, ea_);
  TcpTransport tb(opts(), {b_}, real_, eb_);
  ASSERT_TRUE(tb.listen(b_, port_).ok());
  EXPECT_TRUE(ta.has_bulk_connections(a_));
  ConnectResult plain, bulk;
  ta.connect(a_, b_, port_, plain.cb());
  ASSERT_TRUE(plain.wait());
  ASSERT_TRUE(plain.status.ok()) << plain.status.to_string();
  ta.connect_bulk(a_, b_, port_, bulk.cb());
  ASSERT_TRUE(bulk.wait());
  ASSERT_TRUE(bulk.status.ok()) << bulk.status.to_string();
  EXPECT_FALSE(plain.conn->bulk());
  EXPECT_TRUE(bulk.conn->bulk());
  ASSERT_TRUE(eb_.wait([&] { return eb_.conns.size() == 2; }));
  int bulk_at_b = 0;
  for (const ConnectionPtr& c : eb_.conns) bulk_at_b += c->bulk();
  EXPECT_EQ(bulk_at_b, 1);  // the accepting end heard it from the handshake
  // A bulk connection carries frames like any other.
  TxWaiter w;
  bulk.conn->send(frame(7, 10, 1 << 20, &w));
  ASSERT_TRUE(w.wait());
  EXPECT_TRUE(w.status.ok()) << w.status.to_string();
  ASSERT_TRUE(eb_.wait([&] { return eb_.frames.size() == 1; }));
  EXPECT_EQ(eb_.frames[0].hdr.xid, 7u);
}

// The I/O thread that runs a connection's posted work.
std::thread::id served_by(Connection& c) {
  auto p = std::make_shared<std::promise<std::thread::id>>();
  auto f = p->get_future();
  c.post([p] { p->set_value(std::this_thread::get_id()); });
  return f.wait_for(5s) == std::future_status::ready ? f.get() : std::thread::id();
}

// How many of `cs` each I/O thread serves, fewest first.
std::vector<int> per_thread(const std::vector<ConnectionPtr>& cs) {
  std::map<std::thread::id, int> n;
  for (const ConnectionPtr& c : cs) ++n[served_by(*c)];
  std::vector<int> v;
  for (const auto& [id, k] : n) v.push_back(id == std::thread::id() ? -1 : k);
  std::sort(v.begin(), v.end());
  return v;
}

// lnet.io_threads: each connection is served by the I/O thread with the fewest, at both
// ends, and the next connection takes the place a closed one left.
TEST_F(TcpPairTest, ConnectionsSpreadOverTheIoThreadsFewestFirst) {
  TransportOptions two = opts();
  two.io_threads = 2;
  TcpTransport ta(two, {a_}, real_, ea_);
  TcpTransport tb(two, {b_}, real_, eb_);
  ASSERT_TRUE(tb.listen(b_, port_ + 6).ok());
  auto connect = [&]() -> ConnectionPtr {
    ConnectResult cr;
    ta.connect(a_, b_, port_ + 6, cr.cb());
    return cr.wait() && cr.status.ok() ? cr.conn : nullptr;
  };
  std::vector<ConnectionPtr> out;
  for (int i = 0; i < 4; ++i) {
    out.push_back(connect());
    ASSERT_TRUE(out.back());
  }
  ASSERT_TRUE(eb_.wait([&] { return eb_.conns.size() == 4; }));
  std::vector<ConnectionPtr> in;
  {
    std::lock_guard lk(eb_.mu_);
    in = eb_.conns;
  }
  EXPECT_EQ(per_thread(out), (std::vector<int>{2, 2}));
  EXPECT_EQ(per_thread(in), (std::vector<int>{2, 2}));

  std::thread::id freed = served_by(*out[1]);
  out[1]->close(Status(Code::kCancelled, "test"));
  ASSERT_TRUE(ea_.wait([&] { return ea_.closed.size() == 1; }));
  ConnectionPtr next = connect();
  ASSERT_TRUE(next);
  EXPECT_EQ(served_by(*next), freed);
  EXPECT_EQ(per_thread({out[0], out[2], out[3], next}), (std::vector<int>{2, 2}));
}

TEST(IoThreadsTest, TheDefaultIsSocklndsHalfTheCpusAtLeastThreeAtMostAll) {
  EXPECT_EQ(default_io_threads(1), 1);
  EXPECT_EQ(default_io_threads(2), 2);
  EXPECT_EQ(default_io_threads(4), 3);
  EXPECT_EQ(default_io_threads(8), 4);
  EXPECT_EQ(default_io_threads(64), 32);
  // A node's config: 0 is that count for the CPUs this process may use, else as given.
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  auto cfg = parse_config("", "t.toml");
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(transport_options(*cfg, kKey)->io_threads, default_io_threads(CPU_COUNT(&set)));
  cfg = parse_config("[lnet]\nio_threads = 5\n", "t.toml");
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(transport_options(*cfg, kKey)->io_threads, 5);
}

TEST_F(TcpPairTest, WrongClusterKeyIsRefused) {
  TcpTransport ta(opts("another-key-0123456789"), {a_}, real_, ea_);
  TcpTransport tb(opts(), {b_}, real_, eb_);
  ASSERT_TRUE(tb.listen(b_, port_ + 1).ok());
  ConnectResult cr;
  ta.connect(a_, b_, port_ + 1, cr.cb());
  ASSERT_TRUE(cr.wait());
  EXPECT_EQ(cr.status.code(), Code::kRejected);
  EXPECT_EQ(cr.status.health_kind(), HealthKind::kPeerNiConnectionRejected);
  EXPECT_NE(cr.status.message().find("wrong cluster key"), std::string::npos);
  EXPECT_TRUE(eb_.conns.empty());
  EXPECT_TRUE(ea_.conns.empty());
}

TEST_F(TcpPairTest, ConnectRefusedMapsToHealthKind) {
  TcpTransport ta(opts(), {a_}, real_, ea_);
  ConnectResult cr;
  ta.connect(a_, own(13), port_ + 2, cr.cb());  // nobody listens
  ASSERT_TRUE(cr.wait());
  EXPECT_EQ(cr.status.code(), Code::kUnreachable);
  EXPECT_EQ(cr.status.health_kind(), HealthKind::kPeerNiConnectError);
}

TEST_F(TcpPairTest, BindToMissingAddressIsAddrError) {
  TcpTransport ta(opts(), {a_}, real_, ea_);
  ConnectResult cr;
  // 198.18.255.254 is not configured here: bind fails with EADDRNOTAVAIL.
  ta.connect(nid("198.18.255.254@tcp"), b_, port_ + 3, cr.cb());
  ASSERT_TRUE(cr.wait());
  EXPECT_EQ(cr.status.health_kind(), HealthKind::kPeerNiAddrError) << cr.status.to_string();
}

TEST_F(TcpPairTest, MalformedFrameClosesOnlyThatConnection) {
  TcpTransport tb(opts(), {b_}, real_, eb_);
  int fd = raw_client(tb, eb_, a_, b_, port_ + 4, kKey);
  ASSERT_GE(fd, 0);

  // A header claiming a 1 GiB bulk: refused before any allocation, connection closed.
  FrameHeader evil;
  evil.kind = FrameKind::kRequest;
  evil.bulk_len = 1u << 30;
  EncodedHeader e;
  encode_header(evil, &e);
  ASSERT_TRUE(write_all(fd, e.data(), e.size()));
  ASSERT_TRUE(eb_.wait([&] { return eb_.closed.size() == 1; }));
  EXPECT_EQ(eb_.closed[0].code(), Code::kProtocol);
  EXPECT_NE(eb_.closed[0].message().find("exceeds limit"), std::string::npos);
  char c;
  EXPECT_LE(::recv(fd, &c, 1, 0), 0);  // server closed it
  close(fd);

  // Garbage instead of a handshake: refused, the listener still works.
  fd = raw_connect(b_, port_ + 4);
  ASSERT_GE(fd, 0);
  std::string junk(200, 'x');
  ASSERT_TRUE(write_all(fd, junk.data(), junk.size()));
  EXPECT_LE(::recv(fd, &c, 1, 0), 0);
  close(fd);
  Recorder ea;
  TcpTransport ta(opts(), {a_}, real_, ea);
  ConnectResult cr;
  ta.connect(a_, b_, port_ + 4, cr.cb());
  ASSERT_TRUE(cr.wait());
  EXPECT_TRUE(cr.status.ok()) << cr.status.to_string();
}

// A large frame (read straight into its buffers, waiting for the socket between reads)
// that arrives in pieces is delivered once, whole, after its last byte; the reading goes
// on with the next frame; a peer that closes in the middle of one delivers nothing of it.
TEST_F(TcpPairTest, ALargeFrameArrivingInPiecesIsDeliveredWholeOnlyAfterItsLastByte) {
  TcpTransport tb(opts(), {b_}, real_, eb_);
  int fd = raw_client(tb, eb_, a_, b_, port_ + 5, kKey);
  ASSERT_GE(fd, 0);

  Buffer payload = pattern(100, 1), bulk = pattern((1 << 20) + 3, 2);
  std::vector<uint8_t> big = wire_frame(7, payload, bulk);
  // The header and half the payload first, then 8 pieces of ~128 KiB.
  size_t at = kHeaderSize + 50;
  ASSERT_TRUE(write_all(fd, big.data(), at));
  for (int piece = 0; at < big.size(); ++piece) {
    size_t n = std::min<size_t>(big.size() - at, 131072);
    {
      std::lock_guard lk(eb_.mu_);
      ASSERT_TRUE(eb_.frames.empty()) << "delivered before its last byte (piece " << piece << ")";
    }
    ASSERT_TRUE(write_all(fd, big.data() + at, n));
    at += n;
  }
  ASSERT_TRUE(eb_.wait([&] { return eb_.frames.size() == 1; }));
  {
    std::lock_guard lk(eb_.mu_);
    EXPECT_EQ(eb_.frames[0].hdr.xid, 7u);
    EXPECT_TRUE(same(eb_.frames[0].payload, payload));
    EXPECT_TRUE(same(eb_.frames[0].bulk, bulk));
  }
  // The next frame, a small one, is read as usual.
  Buffer small = pattern(64, 3);
  std::vector<uint8_t> next = wire_frame(8, small, Buffer());
  ASSERT_TRUE(write_all(fd, next.data(), next.size()));
  ASSERT_TRUE(eb_.wait([&] { return eb_.frames.size() == 2; }));
  {
    std::lock_guard lk(eb_.mu_);
    EXPECT_EQ(eb_.frames[1].hdr.xid, 8u);
    EXPECT_TRUE(same(eb_.frames[1].payload, small));
  }
  // Half of another large frame, then the peer closes: nothing more is delivered.
  std::vector<uint8_t> cut = wire_frame(9, payload, bulk);
  ASSERT_TRUE(write_all(fd, cut.data(), cut.size() / 2));
  close(fd);
  ASSERT_TRUE(eb_.wait([&] { return eb_.closed.size() == 1; }));
  std::lock_guard lk(eb_.mu_);
  EXPECT_EQ(eb_.frames.size(), 2u);
  EXPECT_EQ(eb_.closed[0].code(), Code::kClosed) << eb_.closed[0].to_string();
}

TEST(MemTransportTest, DeliversOnPumpAndChecksKeys) {
  ManualClock clock;
  MemHub hub;
  Recorder ea, eb, ec;
  Nid a = nid("10.0.0.1@tcp"), b = nid("10.0.0.2@tcp"), c = nid("10.0.0.3@tcp");
  MemTransport ta(hub, opts(), {a}, clock, ea);
  MemTransport tb(hub, opts(), {b}, clock, eb);
  MemTransport tc(hub, opts("wrong-key-wrong-key"), {c}, clock, ec);
  ASSERT_TRUE(tb.listen(b, 0).ok());
  ConnectResult cr;
  ta.connect(a, b, 0, cr.cb());
  EXPECT_FALSE(cr.done);  // nothing moves until pumped
  hub.pump();
  ASSERT_TRUE(cr.status.ok());
  TxWaiter w;
  cr.conn->add_credits_to_return(2);
  cr.conn->send(frame(7, 3, 1000, &w));
  EXPECT_TRUE(eb.frames.empty());
  hub.pump();
  ASSERT_EQ(eb.frames.size(), 1u);
  EXPECT_EQ(eb.frames[0].hdr.credits, 2u);
  EXPECT_TRUE(same(eb.frames[0].bulk, pattern(1000, 8)));
  EXPECT_TRUE(w.done);

  ConnectResult bad, none;
  tc.connect(c, b, 0, bad.cb());
  tc.connect(c, nid("10.0.0.9@tcp"), 0, none.cb());
  hub.pump();
  EXPECT_EQ(bad.status.health_kind(), HealthKind::kPeerNiConnectionRejected);
  EXPECT_EQ(none.status.health_kind(), HealthKind::kPeerNiConnectError);

  cr.conn->close(Status(Code::kCancelled, "bye"));
  hub.pump();
  EXPECT_EQ(ea.closed.size(), 1u);
  EXPECT_EQ(eb.closed.size(), 1u);
}

}  // namespace
}  // namespace pfsnet

namespace pfsnet {
namespace {

TEST(LinkPipeTest, FramesLeaveAtTheRateAndArriveADelayLater) {
  EmulationRule r;
  r.delay = 10ms;
  r.bits_per_second = 8e6;  // 1 byte per microsecond
  LinkPipe p(r);
  TimePoint t0{std::chrono::seconds(100)};
  // Back to back: each 1000-byte frame takes 1 ms on the wire; all arrive 10 ms after.
  EXPECT_EQ(p.schedule(1000, t0), t0 + 1ms + 10ms);
  EXPECT_EQ(p.schedule(1000, t0), t0 + 2ms + 10ms);
  EXPECT_EQ(p.schedule(500, t0 + 1ms), t0 + 2500us + 10ms);
  // Many frames in flight at once (a pipe, not a sleep per message): 100 frames handed
  // over together are all delivered within 100 ms + 10 ms, not 100 x 10 ms.
  TimePoint last{};
  for (int i = 0; i < 100; ++i) last = p.schedule(1000, t0 + 3ms);
  EXPECT_EQ(last, t0 + 3ms + 100ms + 10ms);  // the link was free again at 3 ms
  // An idle link starts afresh.
  EXPECT_EQ(p.schedule(1000, t0 + 1s), t0 + 1s + 1ms + 10ms);
  // Delay only.
  EmulationRule d;
  d.delay = 25ms;
  LinkPipe q(d);
  EXPECT_EQ(q.schedule(1 << 20, t0), t0 + 25ms);
  EXPECT_TRUE(d.matches(Nid{}, Nid{}));
  d.peer = *Nid::parse("10.0.0.2@tcp");
  EXPECT_FALSE(d.matches(Nid{}, *Nid::parse("10.0.0.3@tcp")));
}

// The link-emulation decorator over TCP holds frames in the pipe: never earlier than the
// emulation allows, and many at once (the whole batch arrives about one delay after the
// last leaves).
TEST(LinkPipeTest, TcpTransportDelaysAndPacesWhatItSends) {
  MonotonicClock clock;
  ThreadTimerQueue timers(clock);
  Recorder ea, eb;
  Nid a = *Nid::parse("127.0.0.13@tcp"), b = *Nid::parse("127.0.0.14@tcp");
  EmulationRule r;
  r.peer = b;
  r.delay = 40ms;
  r.bits_per_second = 80e6;  // 10 MB/s
  EmulatingTransport ta({r}, nullptr, clock, timers, ea, [&](TransportEvents& ev) {
    return std::make_unique<TcpTransport>(opts(), std::vector<Nid>{a}, clock, ev);
  });
  TcpTransport tb(opts(), {b}, clock, eb);
  uint16_t port = static_cast<uint16_t>(20000 + getpid() % 20000 + 9);
  ASSERT_TRUE(tb.listen(b, port).ok());
  ConnectResult cr;
  ta.connect(a, b, port, cr.cb());
  ASSERT_TRUE(cr.wait());
  ASSERT_TRUE(cr.status.ok()) << cr.status.to_string();
  TimePoint t0 = clock.now();
  constexpr int kFrames = 20;
  constexpr size_t kBulk = 100000;
  for (int i = 0; i < kFrames; ++i) cr.conn->send(frame(i + 1, 0, kBulk, nullptr));
  ASSERT_TRUE(eb.wait([&] { return eb.frames.size() == kFrames; }, 10000ms));
  Duration first = eb.frames.front().times.complete - t0;
  Duration all = eb.frames.back().times.complete - t0;
  // The first: its own serialisation (10 ms) plus the delay; all: 2 MB at 10 MB/s + delay.
  EXPECT_GE(first, 40ms + 10ms);
  EXPECT_GE(all, 40ms + 200ms);
  EXPECT_LT(all, 40ms + 200ms + 1s) << "a sleep per frame would take 20 x 50 ms";
  for (int i = 0; i < kFrames; ++i) EXPECT_EQ(eb.frames[i].hdr.xid, uint64_t(i + 1));
  // The other direction has no rule: no delay there.
  TxWaiter w;
  ASSERT_TRUE(eb.wait([&] { return eb.conns.size() == 1; }));
  TimePoint t1 = clock.now();
  eb.conns[0]->send(frame(99, 0, 0, &w));
  ASSERT_TRUE(ea.wait([&] { return ea.frames.size() == 1; }));
  EXPECT_LT(ea.frames[0].times.complete - t1, 40ms);
}

// A shared link is the NI's own: what two peers send to it comes in at its rate together
// (a pipe per pair would let each have the rate), in order per connection, and what it
// sends to both goes out at its rate together.
TEST(LinkPipeTest, ASharedLinkCarriesEveryPeersFramesAtItsRateEachWay) {
  MonotonicClock clock;
  ThreadTimerQueue timers(clock);
  Recorder es, e1, e2;
  Nid s = *Nid::parse("127.0.0.15@tcp"), c1 = *Nid::parse("127.0.0.16@tcp"),
      c2 = *Nid::parse("127.0.0.17@tcp");
  EmulationRule r;
  r.local = s;
  r.shared = true;
  r.bits_per_second = 80e6;  // 10 MB/s each way
  EmulatingTransport ts({r}, nullptr, clock, timers, es, [&](TransportEvents& ev) {
    return std::make_unique<TcpTransport>(opts(), std::vector<Nid>{s}, clock, ev);
  });
  TcpTransport t1(opts(), {c1}, clock, e1), t2(opts(), {c2}, clock, e2);
  uint16_t port = static_cast<uint16_t>(20000 + getpid() % 20000 + 10);
  ASSERT_TRUE(ts.listen(s, port).ok());
  ConnectResult r1, r2;
  t1.connect(c1, s, port, r1.cb());
  t2.connect(c2, s, port, r2.cb());
  ASSERT_TRUE(r1.wait() && r2.wait());
  ASSERT_TRUE(r1.status.ok() && r2.status.ok());
  constexpr int kFrames = 10;
  constexpr size_t kBulk = 100000;  // 1 MB from each client: 2 MB in at 10 MB/s
  TimePoint t0 = clock.now();
  for (int i = 0; i < kFrames; ++i) {
    r1.conn->send(frame(i + 1, 0, kBulk, nullptr));
    r2.conn->send(frame(100 + i + 1, 0, kBulk, nullptr));
  }
  ASSERT_TRUE(es.wait([&] { return es.frames.size() == 2 * kFrames; }, 10000ms));
  Duration in = clock.now() - t0;
  EXPECT_GE(in, 200ms) << "each peer had a link of its own";
  // A frame is received when it has come through the link, not when it joined its queue.
  EXPECT_GE(es.frames.back().times.complete - t0, 190ms);
  EXPECT_LT(in, 200ms + 1s);
  uint64_t last1 = 0, last2 = 100;
  for (const InFrame& f : es.frames) {
    uint64_t& last = f.hdr.xid > 100 ? last2 : last1;
    EXPECT_EQ(f.hdr.xid, last + 1) << "out of order";
    last = f.hdr.xid;
  }
  // Out: 1 MB to each client.
  ASSERT_TRUE(es.wait([&] { return es.conns.size() == 2; }));
  TimePoint t1c = clock.now();
  for (int i = 0; i < kFrames; ++i)
    for (const ConnectionPtr& c : es.conns) c->send(frame(i + 1, 0, kBulk, nullptr));
  ASSERT_TRUE(e1.wait([&] { return e1.frames.size() == kFrames; }, 10000ms));
  ASSERT_TRUE(e2.wait([&] { return e2.frames.size() == kFrames; }, 10000ms));
  Duration out = clock.now() - t1c;
  EXPECT_GE(out, 200ms);
  EXPECT_LT(out, 200ms + 1s);
}

}  // namespace
}  // namespace pfsnet

namespace pfsnet {
namespace {

// The I/O loop with busy polling runs what is posted to it, returns when its work ends
// (a transport's stop() resets the work guards) and when the context is stopped while it
// sleeps.
TEST(RunIoTest, BusyPollingRunsPostedWorkAndEndsLikeRun) {
  for (auto poll : {std::chrono::microseconds(0), std::chrono::microseconds(200)}) {
    asio::io_context ctx(1);
    auto guard = asio::make_work_guard(ctx);
    std::promise<void> exited;
    auto ended = exited.get_future();
    std::thread t([&] {
      tcp_detail::run_io(ctx, poll);
      exited.set_value();
    });
    std::atomic<int> ran{0};
    for (int i = 0; i < 1000; ++i) asio::post(ctx, [&] { ran.fetch_add(1); });
    auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ran.load() < 1000 && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
    EXPECT_EQ(ran.load(), 1000) << poll.count();
    EXPECT_EQ(ended.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
    guard.reset();  // no more work: the loop returns
    EXPECT_EQ(ended.wait_for(std::chrono::seconds(5)), std::future_status::ready) << poll.count();
    t.join();
  }
  // Stopped while it sleeps (or polls) with work outstanding.
  asio::io_context ctx(1);
  auto guard = asio::make_work_guard(ctx);
  std::promise<void> exited;
  auto ended = exited.get_future();
  std::thread t([&] {
    tcp_detail::run_io(ctx, std::chrono::microseconds(200));
    exited.set_value();
  });
  std::atomic<bool> ran{false};
  asio::post(ctx, [&] { ran = true; });
  auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!ran.load() && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
  ASSERT_TRUE(ran.load());
  ctx.stop();  // the loop is polling or asleep in run_one()
  EXPECT_EQ(ended.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  t.join();
}

}  // namespace
}  // namespace pfsnet
