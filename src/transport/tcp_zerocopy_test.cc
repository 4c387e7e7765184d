// Zero-copy sends (tcp_zerocopy.h): the ledger alone; then the kernel's own notifications
// over loopback TCP -- a bulk held until the kernel completes its sends, a connection whose
// sends the kernel copies turning them off, a closed connection's socket kept until its
// sends complete (or reset at the stop) -- and a TCP transport sending zero-copy.
#include "transport/tcp_zerocopy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "base/test_nid.h"
#include "transport/tcp_transport.h"
#include "transport/test_frames.h"

namespace pfsnet::tcp_detail {
namespace {

using namespace std::chrono_literals;

BulkData bulk_of(size_t n, uint8_t seed) { return make_bulk(test::pattern(n, seed)); }

TEST(ZcLedgerTest, ACallsBulkGoesOnceItAndEveryCallBeforeItCompleted) {
  ZcLedger l;
  BulkData a = bulk_of(4096, 1), b = bulk_of(4096, 2), c = bulk_of(4096, 3);
  l.issued(a);
  l.issued(b);
  l.issued(c);
  EXPECT_EQ(l.outstanding(), 3u);
  EXPECT_EQ(a.use_count(), 2);
  // Calls 1 and 2 first: call 0 still pins a, so nothing goes.
  EXPECT_TRUE(l.completed(1, 2, false).empty());
  EXPECT_EQ(l.outstanding(), 3u);
  EXPECT_EQ(l.completed_total(), 2u);
  std::vector<BulkData> freed = l.completed(0, 0, true);
  ASSERT_EQ(freed.size(), 3u);
  EXPECT_EQ(freed[0], a);
  EXPECT_EQ(freed[2], c);
  EXPECT_EQ(l.outstanding(), 0u);
  EXPECT_EQ(l.copied_total(), 1u);
  freed.clear();
  EXPECT_EQ(a.use_count(), 1);
}

TEST(ZcLedgerTest, RangesOfCallsNotMadeAndRepeatsChangeNothing) {
  ZcLedger l;
  BulkData a = bulk_of(4096, 1);
  l.issued(a);
  l.issued(a);  // one bulk, two calls (a partial send and its rest)
  EXPECT_TRUE(l.completed(2, 2, false).empty());  // not made
  EXPECT_TRUE(l.completed(1, 5, false).empty());  // runs past the calls made
  EXPECT_EQ(l.completed_total(), 0u);
  EXPECT_EQ(l.completed(0, 0, false).size(), 1u);
  EXPECT_EQ(a.use_count(), 2);                    // call 1 still pins it
  EXPECT_TRUE(l.completed(0, 0, false).empty());  // told twice
  EXPECT_EQ(l.completed_total(), 1u);
  EXPECT_EQ(l.completed(1, 1, false).size(), 1u);
  EXPECT_EQ(l.outstanding(), 0u);
  EXPECT_EQ(a.use_count(), 1);
}

TEST(ZcLedgerTest, TheKernels32BitNumbersWrap) {
  ZcLedger l(uint64_t{0xFFFFFFFE});  // the kernel's next numbers: 0xFFFFFFFE, 0xFFFFFFFF, 0, 1
  std::vector<BulkData> b;
  for (uint8_t i = 0; i < 4; ++i) {
    b.push_back(bulk_of(4096, i));
    l.issued(b.back());
  }
  EXPECT_TRUE(l.completed(0, 1, false).empty());  // the two after the wrap
  EXPECT_EQ(l.completed(0xFFFFFFFEu, 0xFFFFFFFFu, false).size(), 4u);
  EXPECT_EQ(l.outstanding(), 0u);
  EXPECT_EQ(l.completed_total(), 4u);
  // A range across the wrap in one notification.
  for (uint8_t i = 0; i < 2; ++i) l.issued(b[i]);
  EXPECT_EQ(l.completed(2, 3, false).size(), 2u);
}

TEST(ZcLedgerTest, TakeAllLetsGoOfEverything) {
  ZcLedger l;
  BulkData a = bulk_of(4096, 1);
  l.issued(a);
  l.issued(a);
  EXPECT_EQ(l.take_all().size(), 2u);
  EXPECT_EQ(l.outstanding(), 0u);
  EXPECT_EQ(a.use_count(), 1);
  EXPECT_TRUE(l.completed(0, 1, false).empty());  // the numbers of calls let go
}

// A loopback TCP connection of plain sockets: `tx` sends (non-blocking, SO_ZEROCOPY),
// `rx` receives.
class ZeroCopyLoopbackTest : public ::testing::Test {
 protected:
  // `small`: socket buffers of 64 KiB at both ends, so that a receiver that does not read
  // leaves the sender's bulk queued, unsent.
  void open(bool small = false) {
    int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(lfd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(0x7F000601);  // 127.0.6.1
    int one = 1, buf = 64 << 10;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (small) ::setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(::listen(lfd, 1), 0);
    socklen_t len = sizeof(a);
    ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    tx_ = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(tx_, 0);
    if (small) ::setsockopt(tx_, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    ASSERT_EQ(::connect(tx_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    rx_ = ::accept(lfd, nullptr, nullptr);
    ::close(lfd);
    ASSERT_GE(rx_, 0);
    ASSERT_EQ(::setsockopt(tx_, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)), 0);
    ::setsockopt(tx_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  void TearDown() override {
    if (tx_ >= 0) ::close(tx_);
    if (rx_ >= 0) ::close(rx_);
  }
  // Sends all of `b` through `z`, waiting (bounded) for room; the receiver must read.
  bool send_all(ZeroCopySends& z, const BulkData& b) {
    size_t off = 0;
    for (int i = 0; i < 10000 && off < b->size(); ++i) {
      iovec v{const_cast<uint8_t*>(b->data()) + off, b->size() - off};
      StreamIo r = z.send(tx_, v, b);
      if (!r.failed.ok()) return false;
      off += r.n;
      if (r.n == 0) {
        pollfd p{tx_, POLLOUT, 0};
        ::poll(&p, 1, 100);
      }
    }
    return off == b->size();
  }
  // Reads `n` bytes (bounded: 10 s).
  static std::vector<uint8_t> read_n(int fd, size_t n) {
    std::vector<uint8_t> out(n);
    size_t got = 0;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (got < n && std::chrono::steady_clock::now() < until) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      ssize_t k = ::recv(fd, out.data() + got, n - got, MSG_DONTWAIT);
      if (k <= 0) break;
      got += static_cast<size_t>(k);
    }
    out.resize(got);
    return out;
  }
  // Reaps `z` until it has nothing outstanding, waiting on the error queue (bounded: 10 s).
  bool reap_all(ZeroCopySends& z, int fd) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (z.outstanding() > 0 && std::chrono::steady_clock::now() < until) {
      pollfd p{fd, 0, 0};  // POLLERR is always asked for
      ::poll(&p, 1, 100);
      z.reap(fd);
    }
    return z.outstanding() == 0;
  }
  int tx_ = -1, rx_ = -1;
};

TEST_F(ZeroCopyLoopbackTest, TheBulkIsHeldUntilTheKernelCompletesItsSendsAndArrivesIntact) {
  open();
  ZeroCopySends z(4096, true);
  BulkData b = bulk_of(1 << 20, 7);
  std::vector<uint8_t> got;
  std::thread reader([&] { got = read_n(rx_, 1 << 20); });
  ASSERT_TRUE(send_all(z, b));
  reader.join();
  ASSERT_EQ(got.size(), size_t{1} << 20);
  EXPECT_EQ(std::memcmp(got.data(), b->data(), got.size()), 0);
  // Sent, and received whole: still held until the notifications are read.
  EXPECT_GT(z.outstanding(), 0u);
  EXPECT_GE(b.use_count(), 2);
  ASSERT_TRUE(reap_all(z, tx_));
  EXPECT_EQ(b.use_count(), 1);
  ZeroCopyStats s = z.stats();
  EXPECT_GE(s.sends, 1u);
  EXPECT_EQ(s.completed, s.sends);
  // Over loopback the kernel copies each zero-copy send as it delivers it, and says so.
  EXPECT_EQ(s.copied, s.completed);
  EXPECT_TRUE(z.on());  // told to keep on
}

TEST_F(ZeroCopyLoopbackTest, AConnectionWhoseSendsTheKernelCopiesStopsSendingZeroCopy) {
  open();
  ZeroCopySends z(4096, false);
  BulkData b = bulk_of(64 << 10, 3);
  int sent = 0;
  for (; sent < 64 && z.on(); ++sent) {
    std::vector<uint8_t> got;
    std::thread reader([&] { got = read_n(rx_, 64 << 10); });
    ASSERT_TRUE(send_all(z, b));
    reader.join();
    ASSERT_EQ(got.size(), size_t{64} << 10);
    ASSERT_TRUE(reap_all(z, tx_));
  }
  EXPECT_FALSE(z.on());
  EXPECT_FALSE(z.wants(1 << 20));
  ZeroCopyStats s = z.stats();
  EXPECT_EQ(s.turned_off, 1u);
  EXPECT_GE(s.completed, ZeroCopySends::kHiddenCopyProof);
  EXPECT_LT(sent, 64);
  EXPECT_EQ(b.use_count(), 1);
}

// Fills the sender's queue while the receiver reads nothing, each send from the start of
// `b`: returns the bytes sent; `stream` (if given) gets what they are.
size_t fill(ZeroCopySends& z, int fd, const BulkData& b, std::vector<uint8_t>* stream = nullptr) {
  size_t total = 0;
  for (int i = 0; i < 1000; ++i) {
    iovec v{const_cast<uint8_t*>(b->data()), b->size()};
    StreamIo r = z.send(fd, v, b);
    if (!r.failed.ok() || r.n == 0) break;
    total += r.n;
    if (stream) stream->insert(stream->end(), b->data(), b->data() + r.n);
  }
  return total;
}

TEST_F(ZeroCopyLoopbackTest, AClosedConnectionsSocketIsKeptUntilTheKernelCompletesItsSends) {
  open(true);
  auto z = std::make_shared<ZeroCopySends>(4096, true);
  BulkData b = bulk_of(256 << 10, 5);
  std::vector<uint8_t> stream;
  const size_t sent = fill(*z, tx_, b, &stream);
  ASSERT_GT(sent, 0u);
  z->reap(tx_);
  ASSERT_GT(z->outstanding(), 0u);  // queued behind the receiver's full window: pinned
  ZcGraveyard g;
  g.retire(tx_, z);
  EXPECT_EQ(g.kept(), 1u);
  ::close(tx_);  // the connection's own descriptor: the graveyard's keeps the socket
  tx_ = -1;
  EXPECT_EQ(g.sweep(), 1u);
  EXPECT_GE(b.use_count(), 2);
  // The receiver reads now: the kernel sends the rest and completes every send.
  std::vector<uint8_t> got = read_n(rx_, sent);
  ASSERT_EQ(got.size(), sent);
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (g.sweep() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);  // bounded polling of the kernel's notifications
  EXPECT_EQ(g.kept(), 0u);
  EXPECT_EQ(b.use_count(), 1);
  EXPECT_TRUE(got == stream);
  ZeroCopyStats s = g.stats();
  EXPECT_EQ(s.completed, s.sends);
  EXPECT_GT(s.sends, 0u);
}

TEST_F(ZeroCopyLoopbackTest, AtTheStopAKeptSocketIsResetAndItsBulkLetGo) {
  open(true);
  auto z = std::make_shared<ZeroCopySends>(4096, true);
  BulkData b = bulk_of(256 << 10, 9);
  ASSERT_GT(fill(*z, tx_, b), 0u);
  ZcGraveyard g;
  g.retire(tx_, z);
  ASSERT_EQ(g.kept(), 1u);
  ::close(tx_);
  tx_ = -1;
  g.finish();
  EXPECT_EQ(g.kept(), 0u);
  EXPECT_EQ(b.use_count(), 1);
  // The receiver finds the connection reset after what had arrived (each read bounded).
  timeval limit{10, 0};
  ::setsockopt(rx_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  char buf[65536];
  ssize_t k = 1;
  for (int i = 0; i < 10000 && k > 0; ++i) k = ::recv(rx_, buf, sizeof(buf), 0);
  EXPECT_LT(k, 0);
  EXPECT_EQ(errno, ECONNRESET);
  // Retired after the stop: let go at once.
  open(true);
  auto z2 = std::make_shared<ZeroCopySends>(4096, true);
  ASSERT_GT(fill(*z2, tx_, b), 0u);
  g.retire(tx_, z2);
  EXPECT_EQ(g.kept(), 0u);
  EXPECT_EQ(b.use_count(), 1);
}

// A TCP transport with zero-copy on, both as a node runs it (a loopback connection turns it
// off after its first sends) and kept on: every frame arrives intact, and every bulk is let
// go once the kernel completed its sends.
struct TxCount : TxCompletion {
  std::atomic<int> ok{0}, failed{0};
  void on_tx_done(const Status& s, const TxTimes&) override { (s.ok() ? ok : failed)++; }
};

void run_transport(bool keep, ZeroCopyStats* out) {
  MonotonicClock clock;
  test::Recorder ea, eb;
  TransportOptions o;
  o.cluster_key = "0123456789abcdef-zero-copy-key";
  o.handshake_timeout = 2s;
  o.connect_timeout = 2s;
  o.zc_min_payload = 16384;
  o.zc_keep_when_copied = keep;
  const Nid a = nid(keep ? "127.0.6.11@tcp" : "127.0.6.13@tcp");
  const Nid bn = nid(keep ? "127.0.6.12@tcp" : "127.0.6.14@tcp");
  const uint16_t port = static_cast<uint16_t>(20000 + (getpid() * 3 + (keep ? 1 : 2)) % 20000);
  std::vector<std::weak_ptr<const Buffer>> sent;
  TxCount done;
  constexpr int kFrames = 48;
  {
    TcpTransport ta(o, {a}, clock, ea);
    TcpTransport tb(o, {bn}, clock, eb);
    ASSERT_TRUE(tb.listen(bn, port).ok());
    test::ConnectResult cr;
    ta.connect(a, bn, port, cr.cb());
    ASSERT_TRUE(cr.wait());
    ASSERT_TRUE(cr.status.ok()) << cr.status.to_string();
    // One frame at a time, each once the last arrived and the kernel's notifications of
    // its sends were read (by the I/O thread, woken by them): so whether the connection
    // turned zero-copy off before a frame is decided, not raced.
    for (int i = 0; i < kFrames; ++i) {
      // Sizes around the threshold: 8 KiB copied, the rest zero-copy.
      size_t bulk = i % 4 == 0 ? 8192 : size_t{64 << 10} << (i % 3);
      auto f = test::frame(static_cast<uint64_t>(i + 1), 40, bulk, &done);
      sent.push_back(f->bulk);
      cr.conn->send(std::move(f));
      ASSERT_TRUE(eb.wait([&] { return eb.frames.size() == static_cast<size_t>(i + 1); }));
      const auto until = std::chrono::steady_clock::now() + 10s;
      for (ZeroCopyStats z = ta.zero_copy_stats();
           z.completed < z.sends && std::chrono::steady_clock::now() < until;
           z = ta.zero_copy_stats())
        std::this_thread::sleep_for(1ms);  // bounded polling of the I/O thread's reaping
    }
    for (int i = 0; i < kFrames; ++i) {
      const InFrame& f = eb.frames[static_cast<size_t>(i)];
      EXPECT_EQ(f.hdr.xid, static_cast<uint64_t>(i + 1));
      size_t bulk = i % 4 == 0 ? 8192 : size_t{64 << 10} << (i % 3);
      EXPECT_TRUE(test::same(f.bulk, test::pattern(bulk, static_cast<uint8_t>(i + 2))))
          << "frame " << i;
    }
    // Every frame written; the bulk let go once its notifications were read (the I/O
    // thread's reads wake on them), bounded.
    const auto until = std::chrono::steady_clock::now() + 10s;
    auto all_gone = [&] {
      for (auto& w : sent)
        if (!w.expired()) return false;
      return true;
    };
    while (!all_gone() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(1ms);  // bounded polling of the I/O thread's reaping
    EXPECT_TRUE(all_gone());
    EXPECT_EQ(done.ok.load(), kFrames);
    *out = ta.zero_copy_stats();
  }
}

TEST(ZeroCopyTransportTest, KeptOnEveryFrameArrivesAndEveryBulkIsLetGo) {
  ZeroCopyStats s;
  run_transport(true, &s);
  EXPECT_GE(s.sends, 36u);  // the 36 frames of 64 KiB or more, each one call at least
  EXPECT_EQ(s.completed, s.sends);
  EXPECT_EQ(s.copied, s.completed);  // loopback
  EXPECT_EQ(s.turned_off, 0u);
}

TEST(ZeroCopyTransportTest, AsANodeRunsItALoopbackConnectionTurnsItOff) {
  ZeroCopyStats s;
  run_transport(false, &s);
  EXPECT_EQ(s.turned_off, 1u);
  // Off once 8 sends completed, all copied: the 8th long frame's sends were the last.
  EXPECT_GE(s.sends, ZeroCopySends::kHiddenCopyProof);
  EXPECT_LE(s.sends, 16u);  // the rest copied, as without zero-copy
  EXPECT_EQ(s.completed, s.sends);
}

}  // namespace
}  // namespace pfsnet::tcp_detail
