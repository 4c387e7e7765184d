// Raw TCP over the same bytes as a data path (raw_streams.h).
#include "raw_streams.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace pfsnet::bench {
namespace {

using Steady = std::chrono::steady_clock;
constexpr size_t kPiece = 1 << 20;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("raw TCP streams: " + what + ": " + std::strerror(errno));
}

// A 10 s deadline on every send and receive: a stream that stops fails the run.
void set_deadlines(int fd) {
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// Memory of `n` bytes (at least one piece), every page touched.
std::unique_ptr<uint8_t[]> touched(size_t n) {
  auto p = std::make_unique<uint8_t[]>(std::max(n, kPiece));
  std::memset(p.get(), 0x5a, std::max(n, kPiece));
  return p;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

double raw_tcp_streams_mib_s(const RawStreams& r) {
  const int n = r.streams;
  Fd listener{socket(AF_INET, SOCK_STREAM, 0)};
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.33.1", &sa.sin_addr);
  socklen_t len = sizeof(sa);
  if (bind(listener.fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      listen(listener.fd, n) != 0 ||
      getsockname(listener.fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    fail("listening on 127.0.33.1");
  std::vector<Fd> tx(static_cast<size_t>(n)), rx(static_cast<size_t>(n));
  set_deadlines(listener.fd);
  for (int k = 0; k < n; ++k) {
    tx[k].fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(tx[k].fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) fail("connecting");
    if ((rx[k].fd = accept(listener.fd, nullptr, nullptr)) < 0) fail("accepting");
    set_deadlines(tx[k].fd);
    set_deadlines(rx[k].fd);
  }
  std::vector<std::unique_ptr<uint8_t[]>> src, dst;
  for (int k = 0; k < n; ++k) {
    src.push_back(touched(r.src_bytes_per_stream));
    dst.push_back(touched(r.dst_bytes_per_stream));
  }
  std::atomic<bool> go{false};
  std::atomic<int> failed{0};
  std::vector<Steady::time_point> ends(static_cast<size_t>(n));
  // One end of a stream: its bytes sent from (received into) `mem`, walked a piece at a
  // time over its `size` bytes.
  auto pump = [&](int fd, uint8_t* mem, size_t size, bool send_side, Steady::time_point* end) {
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    const size_t span = std::max(size, kPiece) / kPiece * kPiece;
    size_t at = 0;
    uint64_t left = r.bytes_per_stream;
    while (left > 0) {
      const size_t piece = static_cast<size_t>(std::min<uint64_t>(left, kPiece));
      for (size_t done = 0; done < piece;) {
        ssize_t m = send_side ? send(fd, mem + at + done, piece - done, MSG_NOSIGNAL)
                              : recv(fd, mem + at + done, piece - done, 0);
        if (m <= 0) {
          failed.fetch_add(1);
          return;
        }
        done += static_cast<size_t>(m);
      }
      left -= piece;
      at = (at + kPiece) % span;
    }
    if (end) *end = Steady::now();
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k) {
    threads.emplace_back(pump, tx[k].fd, src[k].get(), r.src_bytes_per_stream, true, nullptr);
    threads.emplace_back(pump, rx[k].fd, dst[k].get(), r.dst_bytes_per_stream, false, &ends[k]);
  }
  const auto start = Steady::now();
  go.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  if (failed.load() > 0)
    throw std::runtime_error(
        "raw TCP streams: a stream stopped (an error or 10 s without progress)");
  const auto last = *std::max_element(ends.begin(), ends.end());
  const double secs = std::chrono::duration<double>(last - start).count();
  return static_cast<double>(r.bytes_per_stream) * n / (1 << 20) / secs;
}

}  // namespace pfsnet::bench
