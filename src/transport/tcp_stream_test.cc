// The plain byte stream over a socket pair: what one call reports (tcp_stream.h), which
// the connection's read loop and the handshake's I/O act on.
#include "transport/tcp_stream.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>

namespace pfsnet::tcp_detail {
namespace {

class PlainStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  StreamIo read_into(PlainStream& s, std::array<uint8_t, 64>& buf) {
    iovec v{buf.data(), buf.size()};
    return s.read({&v, 1});
  }
  int fds_[2] = {-1, -1};
};

TEST_F(PlainStreamTest, AShortReadSaysDrainedAndNothingElse) {
  PlainStream a(fds_[0]), b(fds_[1]);
  const char msg[] = "hello";
  iovec out{const_cast<char*>(msg), 5};
  StreamIo w = a.write({&out, 1});
  EXPECT_TRUE(w.failed.ok());
  EXPECT_EQ(w.n, 5u);

  std::array<uint8_t, 64> buf{};
  StreamIo r = read_into(b, buf);
  EXPECT_TRUE(r.failed.ok());
  EXPECT_EQ(r.n, 5u);
  EXPECT_TRUE(r.drained);  // 5 of 64: the socket had no more
  EXPECT_FALSE(r.by_peer);
  EXPECT_FALSE(r.tls_refused);
  EXPECT_EQ(std::memcmp(buf.data(), msg, 5), 0);

  StreamIo empty = read_into(b, buf);  // nothing there: wait for the socket
  EXPECT_TRUE(empty.failed.ok());
  EXPECT_EQ(empty.n, 0u);
}

TEST_F(PlainStreamTest, AFullReadIsNotDrained) {
  PlainStream a(fds_[0]), b(fds_[1]);
  std::array<uint8_t, 100> data{};
  iovec out{data.data(), data.size()};
  ASSERT_EQ(a.write({&out, 1}).n, 100u);
  std::array<uint8_t, 64> buf{};
  StreamIo r = read_into(b, buf);
  EXPECT_EQ(r.n, 64u);
  EXPECT_FALSE(r.drained);  // it filled the room: there may be more
}

TEST_F(PlainStreamTest, ThePeersCloseIsByPeer) {
  PlainStream b(fds_[1]);
  ::close(fds_[0]);
  fds_[0] = -1;
  std::array<uint8_t, 64> buf{};
  StreamIo r = read_into(b, buf);
  EXPECT_FALSE(r.failed.ok());
  EXPECT_TRUE(r.by_peer);
  EXPECT_FALSE(r.drained);
}

TEST(SkipWrittenTest, WholeBuffersGoAndAPartOneIsAdvanced) {
  char a[3], b[5], c[2];
  std::vector<iovec> iov = {{a, 3}, {b, 5}, {c, 2}};
  skip_written(iov, 5);  // a, and 2 of b
  ASSERT_EQ(iov.size(), 2u);
  EXPECT_EQ(iov[0].iov_base, b + 2);
  EXPECT_EQ(iov[0].iov_len, 3u);
  EXPECT_EQ(iov[1].iov_base, c);
  skip_written(iov, 0);
  EXPECT_EQ(iov.size(), 2u);
  skip_written(iov, 5);  // the rest exactly
  EXPECT_TRUE(iov.empty());
}

}  // namespace
}  // namespace pfsnet::tcp_detail
