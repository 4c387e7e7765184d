// A sequential reader whose block's reply stops halfway while it is being received into the
// reader's own buffer (StripedFile's offers, CallOptions::reply_memory): the RPC's attempt
// deadline closes the connection still receiving into that buffer, the resend's reply comes
// through the pagepool (an offer is taken once), and the read returns the whole block. Over
// real TCP on loopback, the server behind a proxy that passes the reply's header and half
// its bulk and then nothing more on that connection (a server wedged mid-reply -- a
// SIGSTOPped pfsnetd cannot be: the kernel takes its whole reply).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "storage/block_service.h"
#include "storage/striped_file.h"
#include "storage/test_pattern.h"
#include "storage/test_tcp_node.h"
#include "wire/frame.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;
using test::TcpNode;

// A TCP proxy at addr:port in front of addr:server_port. It passes the client's bytes as
// they come and the server's frame by frame; once armed, the next reply with bulk passes
// with half its bulk and then nothing more comes from the server on that connection.
// Every blocking call is bounded (100 ms socket timeouts, re-checked against stop_).
class StallingProxy {
 public:
  StallingProxy(uint32_t addr, uint16_t port, uint16_t server_port)
      : addr_(addr), server_port_(server_port) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in sa = at(port);
    ok_ = ::bind(lfd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 && ::listen(lfd_, 8) == 0;
    if (ok_) acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~StallingProxy() {
    stop_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
    ::close(lfd_);
  }
  bool ok() const { return ok_; }
  void arm() { armed_ = true; }
  bool stalled() const { return stalled_; }
  // Whether the client closed the connection whose reply stalled, within `limit`.
  bool wait_client_closed(std::chrono::milliseconds limit) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return stalled_client_closed_; });
  }

 private:
  sockaddr_in at(uint16_t port) const {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(addr_);
    return sa;
  }
  static void bound_waits(int fd) {
    timeval tv{0, 100 * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }
  void accept_loop() {
    while (!stop_) {
      pollfd p{lfd_, POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      int c = ::accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in sa = at(server_port_);
      if (::connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
        ::close(c);
        ::close(s);
        continue;
      }
      bound_waits(c);
      bound_waits(s);
      auto stalled_here = std::make_shared<std::atomic<bool>>(false);
      {
        std::lock_guard lk(mu_);
        fds_.push_back(c);
        fds_.push_back(s);
      }
      pumps_.emplace_back([this, c, s, stalled_here] { up(c, s, *stalled_here); });
      pumps_.emplace_back([this, c, s, stalled_here] { down(s, c, *stalled_here); });
    }
  }
  // n bytes from `from`; false at its end, an error or stop_.
  bool recv_all(int from, uint8_t* p, size_t n) {
    for (size_t got = 0; got < n;) {
      if (stop_) return false;
      ssize_t r = ::recv(from, p + got, n - got, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return false;
      if (r > 0) got += static_cast<size_t>(r);
    }
    return true;
  }
  bool send_all(int to, const uint8_t* p, size_t n) {
    for (size_t sent = 0; sent < n;) {
      if (stop_) return false;
      ssize_t r = ::send(to, p + sent, n - sent, MSG_NOSIGNAL);
      if (r < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (r > 0) sent += static_cast<size_t>(r);
    }
    return true;
  }
  // The client's bytes to the server, until the client closes.
  void up(int c, int s, const std::atomic<bool>& stalled_here) {
    uint8_t buf[64 << 10];
    while (!stop_) {
      ssize_t r = ::recv(c, buf, sizeof(buf), 0);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (r <= 0 || !send_all(s, buf, static_cast<size_t>(r))) break;
    }
    ::shutdown(s, SHUT_WR);
    if (stalled_here) {
      std::lock_guard lk(mu_);
      stalled_client_closed_ = true;
      cv_.notify_all();
    }
  }
  // The server's frames to the client; the armed one cut off halfway through its bulk.
  void down(int s, int c, std::atomic<bool>& stalled_here) {
    std::vector<uint8_t> body;
    while (!stop_) {
      EncodedHeader e;
      if (!recv_all(s, e.data(), e.size())) return;
      auto h = decode_header(e, FrameLimits{});
      if (!h.ok()) return;
      body.resize(size_t(h->payload_len) + h->bulk_len);
      if (!recv_all(s, body.data(), body.size())) return;
      size_t pass = body.size();
      const bool cut = armed_ && h->kind == FrameKind::kReply && h->bulk_len > 0;
      if (cut) pass = h->payload_len + h->bulk_len / 2;
      if (!send_all(c, e.data(), e.size()) || !send_all(c, body.data(), pass)) return;
      if (cut) {
        armed_ = false;
        stalled_here = true;
        stalled_ = true;
        return;  // nothing more from the server on this connection
      }
    }
  }

  const uint32_t addr_;
  const uint16_t server_port_;
  int lfd_ = -1;
  bool ok_ = false;
  std::atomic<bool> stop_{false}, armed_{false}, stalled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stalled_client_closed_ = false;
  std::vector<int> fds_;
  std::thread acceptor_;
  std::vector<std::thread> pumps_;  // the acceptor's, until it is joined
};

TEST(ReadCutOffTest, AReplyStoppingHalfwayIntoTheReadersBufferIsCutOffAndReadAgainWhole) {
  constexpr uint32_t kBlock = 64 << 10;
  const uint16_t port = static_cast<uint16_t>(21000 + getpid() % 20000);
  const uint16_t server_port = static_cast<uint16_t>(port + 1);
  // The client reaches the server at its own NI's port, which is the proxy's.
  TcpNode server("127.0.10.1", server_port), client("127.0.10.2", port);
  BlockServiceOptions bo{
      .targets = {"mem"}, .block_size = kBlock, .buffers = 4, .threads = 2, .capacity = 16 << 20};
  BlockService svc(bo, *server.rpc, nullptr, server.clock, server.core.timer_queue());
  ASSERT_TRUE(server.start().ok());
  ASSERT_TRUE(client.start().ok());
  ASSERT_TRUE(svc.open().ok());
  StallingProxy proxy(server.nid().ipv4(), port, server_port);
  ASSERT_TRUE(proxy.ok());

  StripedFileOptions fo;
  fo.pagepool = 1 << 20;
  fo.prefetch_depth = 0;  // each block fetched by its own read: offered its buffer
  fo.timeout = 5s;        // its attempts' deadlines: well past a loaded machine's 64 KiB reply
  auto f = StripedFile::open(*client.rpc, "cut", {server.nid()}, fo);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE((*f)->write(uint64_t(i) * kBlock, test_pattern(kBlock, i)).ok());
  ASSERT_TRUE((*f)->flush().ok());
  std::vector<uint8_t> got(kBlock);
  ASSERT_TRUE((*f)->read(0, got).ok());       // not a stream yet: through the pagepool
  ASSERT_TRUE((*f)->read(kBlock, got).ok());  // a stream: straight into `got`
  ASSERT_EQ((*f)->stats().read_into_caller, 1u);

  proxy.arm();
  std::fill(got.begin(), got.end(), 0xee);
  Status r = (*f)->read(2 * uint64_t(kBlock), got);
  ASSERT_TRUE(r.ok()) << r.to_string();
  EXPECT_TRUE(proxy.stalled());  // the first reply stopped halfway into `got`
  // Its connection was closed by the RPC's attempt deadline (the client's end) ...
  EXPECT_TRUE(proxy.wait_client_closed(5s));
  // ... before the read's own deadline, which had nothing left to cut off; the resend
  // came into the pagepool and was copied out whole.
  const StripedFileStats st = (*f)->stats();
  EXPECT_EQ(st.reads_cut_off, 0u);
  EXPECT_EQ(st.read_into_caller, 1u);
  EXPECT_EQ(st.block_reads, 3u);  // one fetch; its attempts are the RPC layer's
  EXPECT_TRUE(got == test_pattern(kBlock, 2));
  ASSERT_TRUE((*f)->close().ok());
  svc.stop();
  client.shutdown();
  server.shutdown();
}

}  // namespace
}  // namespace pfsnet
