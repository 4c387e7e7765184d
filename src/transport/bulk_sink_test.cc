// A reply's bulk received into memory its receiver lent (TransportEvents::bulk_sink), over
// TCP: a raw client socket writes the frames as bytes exactly when the test says, so
// whether the bulk is complete, or cut off by a close, is not a race.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "transport/tcp_transport.h"
#include "transport/test_frames.h"
#include "transport/test_raw_client.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

constexpr char kSinkKey[] = "0123456789abcdef-bulk-sink";
constexpr size_t kBulk = 256 << 10;  // more than a read's buffer holds: read in pieces

// The receiver's own memory, lent for every reply's bulk of kBulk bytes; counts the loans
// out (a Buffer freed gives one back).
struct Lender : BufferPool {
  void give_back(uint8_t*) override { out.fetch_sub(1); }
  std::atomic<int> out{0};
  std::vector<uint8_t> memory = std::vector<uint8_t>(kBulk);
};

// Records frames; lends its memory for replies' bulk.
struct LendingRecorder : test::Recorder {
  std::optional<Buffer> bulk_sink(Connection&, const FrameHeader& h) override {
    asked.fetch_add(1);
    if (h.kind != FrameKind::kReply || h.bulk_len != kBulk) return std::nullopt;
    lender->out.fetch_add(1);
    return Buffer::pooled(lender->memory.data(), kBulk, lender);
  }
  std::shared_ptr<Lender> lender = std::make_shared<Lender>();
  std::atomic<int> asked{0};
};

class BulkSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tb_ = test::transport_with_raw_client(real_, ev_, a_, b_, port_, kSinkKey, &fd_);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
    tb_.reset();
  }
  std::vector<uint8_t> frame(uint64_t xid, FrameKind kind) {
    return test::wire_frame(xid, test::pattern(40, uint8_t(xid)),
                            test::pattern(kBulk, uint8_t(xid + 1)), kind);
  }
  // Until the lender's memory is back (or 5 s passed).
  bool returned() {
    auto limit = std::chrono::steady_clock::now() + 5s;
    while (ev_.lender->out.load() != 0 && std::chrono::steady_clock::now() < limit)
      std::this_thread::sleep_for(1ms);
    return ev_.lender->out.load() == 0;
  }

  MonotonicClock real_;
  LendingRecorder ev_;
  Nid a_ = test::own(23), b_ = test::own(24);
  uint16_t port_ = static_cast<uint16_t>(20017 + getpid() % 20000);
  std::unique_ptr<TcpTransport> tb_;
  int fd_ = -1;
};

TEST_F(BulkSinkTest, AReplysBulkLandsInTheLentMemoryARequestsDoesNot) {
  std::vector<uint8_t> reply = frame(7, FrameKind::kReply);
  std::vector<uint8_t> request = frame(8, FrameKind::kRequest);
  // Written in two pieces: the bulk's rest is read straight into the lent memory.
  const size_t half = reply.size() / 2;
  ASSERT_TRUE(test::write_all(fd_, reply.data(), half));
  ASSERT_TRUE(ev_.wait([&] { return ev_.asked.load() >= 1; }));
  ASSERT_TRUE(test::write_all(fd_, reply.data() + half, reply.size() - half));
  ASSERT_TRUE(test::write_all(fd_, request.data(), request.size()));
  ASSERT_TRUE(ev_.wait([&] { return ev_.frames.size() == 2; }));
  {
    std::lock_guard lk(ev_.mu_);
    const InFrame& r = ev_.frames[0];
    EXPECT_EQ(r.hdr.xid, 7u);
    EXPECT_EQ(r.bulk.data(), ev_.lender->memory.data());  // no buffer of the transport's
    EXPECT_TRUE(test::same(r.bulk, test::pattern(kBulk, 8)));
    EXPECT_EQ(ev_.lender->out.load(), 1);  // held by the delivered frame
    const InFrame& q = ev_.frames[1];
    EXPECT_EQ(q.hdr.xid, 8u);
    EXPECT_NE(q.bulk.data(), ev_.lender->memory.data());  // a request's: the transport's own
    EXPECT_TRUE(test::same(q.bulk, test::pattern(kBulk, 9)));
    ev_.frames.clear();  // the receiver lets go of the reply: the memory is its lender's again
  }
  EXPECT_TRUE(returned());
}

TEST_F(BulkSinkTest, ClosingTheConnectionGivesBackMemoryAReplyWasStillArrivingInto) {
  std::vector<uint8_t> reply = frame(9, FrameKind::kReply);
  // The header and a part of the bulk; the rest never comes (a peer stopped mid-reply).
  ASSERT_TRUE(test::write_all(fd_, reply.data(), reply.size() / 3));
  ASSERT_TRUE(ev_.wait([&] { return ev_.asked.load() >= 1; }));
  ConnectionPtr c;
  {
    std::lock_guard lk(ev_.mu_);
    c = ev_.conns.at(0);
  }
  EXPECT_EQ(ev_.lender->out.load(), 1);  // the I/O thread reads on into it
  // What the lender's cancel does (Net::bulk_sink): the connection closes, and lets go.
  c->close(Status(Code::kCancelled, "the caller gave up"));
  ASSERT_TRUE(ev_.wait([&] { return ev_.closed.size() == 1; }));
  EXPECT_TRUE(returned());
  std::lock_guard lk(ev_.mu_);
  EXPECT_TRUE(ev_.frames.empty());  // nothing half-received is delivered
}

}  // namespace
}  // namespace pfsnet
