// Receive by the waiter over TCP (Connection::receive_here), step by step: a raw client
// socket writes frames as bytes exactly when the test says, so which thread reads each one
// is not a race.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "transport/tcp_internal.h"
#include "transport/tcp_transport.h"
#include "transport/test_frames.h"
#include "transport/test_raw_client.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;
using Here = Connection::Here;

constexpr char kHereKey[] = "0123456789abcdef-receive-here";

// The frames as they come, with the thread each was delivered on; `done` turns true with
// frame `want`.
struct ThreadRecorder : test::Recorder {
  void on_frame(Connection& c, InFrame&& f) override {
    uint64_t xid = f.hdr.xid;
    {
      std::lock_guard lk(mu_);
      threads.push_back(std::this_thread::get_id());
    }
    test::Recorder::on_frame(c, std::move(f));
    if (xid == want.load()) done.store(true, std::memory_order_release);
  }
  std::optional<Buffer> bulk_sink(Connection&, const FrameHeader&) override {
    std::lock_guard lk(mu_);
    if (!closed.empty()) ++asked_after_close;
    return std::nullopt;
  }
  std::thread::id thread_of(size_t i) {
    std::lock_guard lk(mu_);
    return threads.at(i);
  }
  void expect(uint64_t xid) {
    done.store(false);
    want.store(xid);
  }
  std::vector<std::thread::id> threads;  // under mu_
  int asked_after_close = 0;             // bulk_sink after on_closed (under mu_)
  std::atomic<uint64_t> want{0};
  std::atomic<bool> done{false};
};

class ReceiveHereTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tb_ = test::transport_with_raw_client(real_, ev_, a_, b_, port_, kHereKey, &fd_);
    ASSERT_GE(fd_, 0);
    std::lock_guard lk(ev_.mu_);
    conn_ = std::dynamic_pointer_cast<tcp_detail::TcpConnection>(ev_.conns.at(0));
    ASSERT_TRUE(conn_);
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ASSERT_GE(wake_, 0);
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
    if (wake_ >= 0) ::close(wake_);
    tb_.reset();
  }

  // Once the I/O thread has read what came and waits for the socket (the frame a test waits
  // for is delivered a moment before it gives the socket up): a caller may take it.
  void until_idle() {
    auto limit = std::chrono::steady_clock::now() + 5s;
    while (!conn_->read_by_nobody() && std::chrono::steady_clock::now() < limit)
      std::this_thread::yield();
    ASSERT_TRUE(conn_->read_by_nobody());
  }

  // A caller on a thread of its own in receive_here (up to 10 s), once it reads the socket.
  struct Caller {
    std::future<Here> result;
    std::thread thread;
    std::thread::id id;
    Here join() {
      thread.join();
      return result.get();
    }
  };
  void start(Caller& c) {
    until_idle();
    std::packaged_task<Here()> task([this] { return conn_->receive_here(ev_.done, 10s, wake_); });
    c.result = task.get_future();
    c.thread = std::thread(std::move(task));
    c.id = c.thread.get_id();
    auto limit = std::chrono::steady_clock::now() + 5s;
    while (!conn_->read_by_caller() && std::chrono::steady_clock::now() < limit)
      std::this_thread::yield();
    ASSERT_TRUE(conn_->read_by_caller());
  }
  void write_frame(uint64_t xid, size_t payload, size_t bulk) {
    std::vector<uint8_t> f = test::wire_frame(xid, test::pattern(payload, uint8_t(xid)),
                                              test::pattern(bulk, uint8_t(xid + 1)));
    ASSERT_TRUE(test::write_all(fd_, f.data(), f.size()));
  }
  bool frames(size_t n) {
    return ev_.wait([&] { return ev_.frames.size() >= n; }, 10000ms);
  }

  MonotonicClock real_;
  ThreadRecorder ev_;
  Nid a_ = test::own(21), b_ = test::own(22);
  uint16_t port_ = static_cast<uint16_t>(20009 + getpid() % 20000);
  std::unique_ptr<TcpTransport> tb_;
  std::shared_ptr<tcp_detail::TcpConnection> conn_;
  int fd_ = -1, wake_ = -1;
};

TEST_F(ReceiveHereTest, ACallerTakesWhatComesWhileItWaitsAndHandsBackALargeFrame) {
  // Nothing comes: the caller's time runs out, and it leaves the socket to the I/O thread.
  ev_.expect(1);
  until_idle();
  EXPECT_EQ(conn_->receive_here(ev_.done, 30ms, wake_), Here::kTimedOut);
  EXPECT_FALSE(conn_->read_by_caller());

  // A frame that comes while a caller waits is delivered on the caller's thread.
  Caller one;
  start(one);
  write_frame(1, 64, 0);
  EXPECT_EQ(one.join(), Here::kDone);
  ASSERT_TRUE(frames(1));
  EXPECT_EQ(ev_.thread_of(0), one.id);

  // A small frame, a large one (read straight into its buffers: the I/O thread's) and a
  // small one, in one write: the caller delivers the first and hands the rest back.
  ev_.expect(4);
  Caller two;
  start(two);
  std::vector<uint8_t> three;
  for (auto [xid, payload, bulk] : {std::tuple{2, 64, 0}, {3, 100, (1 << 20) + 3}, {4, 64, 0}}) {
    std::vector<uint8_t> f = test::wire_frame(xid, test::pattern(payload, uint8_t(xid)),
                                              test::pattern(bulk, uint8_t(xid + 1)));
    three.insert(three.end(), f.begin(), f.end());
  }
  ASSERT_TRUE(test::write_all(fd_, three.data(), three.size()));
  Here r = two.join();
  EXPECT_TRUE(r == Here::kNo || r == Here::kDone) << static_cast<int>(r);
  ASSERT_TRUE(frames(4));
  EXPECT_EQ(ev_.thread_of(1), two.id);
  EXPECT_NE(ev_.thread_of(2), two.id);
  EXPECT_NE(ev_.thread_of(3), two.id);
  {
    std::lock_guard lk(ev_.mu_);
    for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(ev_.frames[i].hdr.xid, i + 1);
    EXPECT_TRUE(test::same(ev_.frames[2].bulk, test::pattern((1 << 20) + 3, 4)));
    EXPECT_TRUE(test::same(ev_.frames[3].payload, test::pattern(64, 4)));
  }

  // Its eventfd ends a caller's wait (the reply came another way).
  ev_.expect(99);
  Caller woken;
  start(woken);
  uint64_t one_ = 1;
  ASSERT_EQ(::write(wake_, &one_, sizeof(one_)), 8);
  EXPECT_EQ(woken.join(), Here::kWoken);
  ASSERT_EQ(::read(wake_, &one_, sizeof(one_)), 8);

  // Whatever a caller's return, the I/O thread reads on after it: a caller that takes a
  // frame while the I/O thread is woken for it too (the I/O thread then stops, marked, and
  // the caller hands reading back), then a frame with no caller.
  for (uint64_t round = 0; round < 40; ++round) {
    uint64_t mine = 5 + 2 * round, next = mine + 1;
    ev_.expect(mine);
    Caller c;
    start(c);
    write_frame(mine, 64, 0);
    EXPECT_EQ(c.join(), Here::kDone);
    write_frame(next, 64, 0);
    ASSERT_TRUE(frames(next)) << "round " << round << ": frame " << next << " never came";
    EXPECT_EQ(ev_.thread_of(mine - 1), c.id);
    EXPECT_NE(ev_.thread_of(next - 1), c.id);
  }
}

// A failure the caller meets is the I/O thread's to report: the peer's close ends the
// connection once, as when the I/O thread reads it.
TEST_F(ReceiveHereTest, APeerThatClosesWhileACallerWaitsClosesTheConnectionOnce) {
  ev_.expect(1);
  Caller c;
  start(c);
  ::close(fd_);
  fd_ = -1;
  EXPECT_EQ(c.join(), Here::kNo);
  ASSERT_TRUE(ev_.wait([&] { return ev_.closed.size() == 1; }));
  EXPECT_EQ(conn_->receive_here(ev_.done, 10s, wake_), Here::kNo);  // closed: at once
  std::lock_guard lk(ev_.mu_);
  EXPECT_EQ(ev_.closed[0].code(), Code::kClosed) << ev_.closed[0].to_string();
  EXPECT_TRUE(ev_.frames.empty());
}

// A turn given to the I/O thread before the connection closed -- a caller's hand-over of a
// large reply it left in the read buffer -- hands nothing up after on_closed: neither the
// reply's bulk_sink nor a frame (the layer above may have let go of its connection state).
TEST_F(ReceiveHereTest, ALargeReplyLeftForTheIoThreadGoesNowhereOnceClosed) {
  // The I/O thread held: the close and then the caller's hand-over run after it.
  std::promise<void> release;
  std::shared_future<void> held = release.get_future().share();
  until_idle();
  conn_->post([held] { (void)held.wait_for(10s); });
  conn_->close(Status(Code::kCancelled, "test"));
  ev_.expect(1);
  Caller c;
  start(c);
  std::vector<uint8_t> bytes = test::wire_frame(1, test::pattern(64, 1), Buffer());
  std::vector<uint8_t> large =
      test::wire_frame(2, test::pattern(100, 2), test::pattern(256 << 10, 3), FrameKind::kReply);
  bytes.insert(bytes.end(), large.begin(), large.end());
  ASSERT_TRUE(test::write_all(fd_, bytes.data(), bytes.size()));
  // Frame 1 delivered here; the large reply left in the read buffer for the I/O thread.
  EXPECT_EQ(c.join(), Here::kDone);
  release.set_value();
  ASSERT_TRUE(ev_.wait([&] { return ev_.closed.size() == 1; }));
  std::promise<void> after;  // the I/O thread's turns before this one are done
  conn_->post([&after] { after.set_value(); });
  ASSERT_EQ(after.get_future().wait_for(5s), std::future_status::ready);
  std::lock_guard lk(ev_.mu_);
  EXPECT_EQ(ev_.asked_after_close, 0);
  EXPECT_EQ(ev_.frames.size(), 1u);
}

}  // namespace
}  // namespace pfsnet
