#include "transport/tcp_stream.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "transport/tcp_transport.h"

namespace pfsnet::tcp_detail {

namespace {

StreamIo errno_failure(size_t n, int err) {
  return StreamIo{.n = n,
                  .failed = Status(Code::kClosed, std::strerror(err), health_kind_for_errno(err))};
}

StreamIo peer_closed() {
  return StreamIo{.failed = Status(Code::kClosed, "closed by peer"), .by_peer = true};
}

// The failure of a TLS call that moved nothing and wants no socket, after `n` bytes.
StreamIo tls_failure(size_t n, const TlsIo& r) {
  if (r.want == TlsIo::Want::kClosed) return peer_closed();
  HealthKind kind = r.bad_mac          ? HealthKind::kPeerNiCorrupt
                    : r.sys_errno != 0 ? health_kind_for_errno(r.sys_errno)
                                       : HealthKind::kPeerNiConnectError;
  return StreamIo{.n = n,
                  .failed = Status(Code::kClosed, "TLS: " + r.error, kind),
                  .tls_refused = r.sys_errno == 0};
}

}  // namespace

StreamIo PlainStream::read(std::span<const iovec> into) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(into.data());
  msg.msg_iovlen = into.size();
  for (int i = 0; i < 8; ++i) {  // EINTR: again, a bounded number of times
    ssize_t got = ::recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (got > 0) {
      size_t room = 0;
      for (const iovec& v : into) room += v.iov_len;
      return StreamIo{.n = static_cast<size_t>(got), .drained = static_cast<size_t>(got) < room};
    }
    if (got == 0) return peer_closed();
    if (errno == EAGAIN || errno == EWOULDBLOCK) return StreamIo{};
    if (errno != EINTR) break;
  }
  return errno_failure(0, errno);
}

StreamIo PlainStream::write(std::span<const iovec> from) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(from.data());
  msg.msg_iovlen = from.size();
  for (int i = 0; i < 8; ++i) {
    ssize_t n = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return StreamIo{.n = static_cast<size_t>(n)};
    if (errno == EAGAIN || errno == EWOULDBLOCK) return StreamIo{};
    if (errno != EINTR) break;
  }
  return errno_failure(0, errno);
}

StreamIo TlsStream::read(std::span<const iovec> into) {
  // The first buffer with room (OpenSSL reads into one); the caller reads on for the rest.
  for (const iovec& v : into) {
    if (v.iov_len == 0) continue;
    TlsIo r = tls_.read(v.iov_base, v.iov_len);
    if (r.n > 0) return StreamIo{.n = r.n};
    if (r.want == TlsIo::Want::kRead) return StreamIo{};
    return tls_failure(0, r);
  }
  return StreamIo{};
}

StreamIo TlsStream::write(std::span<const iovec> from) {
  if (pending_off_ >= pending_.size()) {
    size_t total = 0;
    for (const iovec& v : from) total += v.iov_len;
    pending_.resize(total);
    pending_off_ = 0;
    size_t off = 0;
    for (const iovec& v : from) {
      std::memcpy(pending_.data() + off, v.iov_base, v.iov_len);
      off += v.iov_len;
    }
  }
  size_t put = 0;
  while (pending_off_ < pending_.size()) {
    TlsIo r = tls_.write(pending_.data() + pending_off_, pending_.size() - pending_off_);
    if (r.n == 0) {
      if (r.want == TlsIo::Want::kWrite) break;
      return tls_failure(put, r);
    }
    pending_off_ += r.n;
    put += r.n;
  }
  if (pending_off_ >= pending_.size()) {
    pending_.clear();
    pending_off_ = 0;
  }
  return StreamIo{put, Status::Ok()};
}

}  // namespace pfsnet::tcp_detail
