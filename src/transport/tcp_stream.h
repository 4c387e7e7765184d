// The byte stream beneath TCP framing: the socket itself (PlainStream), or TLS over it
// (TlsStream, tls.h). A stream only moves bytes, never blocking; framing, batching and the
// waits for the socket are the connection's (TcpConnection), written once for both.
// Threads: one reader and one writer at a time, as the connection's read and write paths
// are (TLS serialises the two inside its session).
#pragma once

#include <pfsnet/status.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "transport/tls.h"

namespace pfsnet::tcp_detail {

// What one call did: moved `n` bytes; or, with `n` zero and `failed` ok, wants the socket
// readable (read) or writable (write) first; or the connection is over (`failed`: "closed
// by peer", or the reason with its health kind). Built by field name (StreamIo{.n = 5,
// .drained = true}): its flags are bools, and a positional one lands in the wrong field.
struct StreamIo {
  size_t n = 0;
  Status failed;
  bool by_peer = false;  // `failed` is the peer's orderly close
  // A read that took less than it had room for, from the socket itself: the socket had no
  // more, so the next read would only find it empty -- wait for it first. (asio's own reads
  // do so: one system call per message, not a second that fails. TLS never says so: its
  // session may hold decrypted bytes the socket no longer shows.)
  bool drained = false;
  bool tls_refused = false;  // `failed` is TLS's own (an alert, a bad record), not the socket's
};

// Drops the first `n` bytes of `iov` (a write took them): whole buffers go, a partly taken
// one is advanced in place.
inline void skip_written(std::vector<iovec>& iov, size_t n) {
  size_t i = 0;
  while (i < iov.size() && n >= iov[i].iov_len) n -= iov[i++].iov_len;
  if (i < iov.size() && n) {
    iov[i].iov_base = static_cast<uint8_t*>(iov[i].iov_base) + n;
    iov[i].iov_len -= n;
  }
  iov.erase(iov.begin(), iov.begin() + static_cast<long>(i));
}

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Into the buffers, in order; at least one byte of room.
  virtual StreamIo read(std::span<const iovec> into) = 0;
  // From the buffers, in order, as far as the socket takes them. After a short write the
  // next call carries the rest of the same bytes (TLS must be given them again).
  virtual StreamIo write(std::span<const iovec> from) = 0;
};

// recvmsg/sendmsg on the socket, MSG_DONTWAIT.
class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(int fd) : fd_(fd) {}
  StreamIo read(std::span<const iovec> into) override;
  StreamIo write(std::span<const iovec> from) override;

 private:
  int fd_;
};

// Through the connection's TLS session. A write gathers its buffers into one (records are
// cut from it: a record per small frame would cost a record's overhead each) and keeps
// what the socket did not take until the next call.
class TlsStream final : public ByteStream {
 public:
  explicit TlsStream(TlsSession& tls) : tls_(tls) {}
  StreamIo read(std::span<const iovec> into) override;
  StreamIo write(std::span<const iovec> from) override;

 private:
  TlsSession& tls_;
  std::vector<uint8_t> pending_;  // the write's bytes, from pending_off_ not yet taken
  size_t pending_off_ = 0;
};

}  // namespace pfsnet::tcp_detail
