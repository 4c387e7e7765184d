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

StreamIo PlainStream::write(std::span<const iovec> from, int flags) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(from.data());
  msg.msg_iovlen = from.size();
  for (int i = 0; i < 8; ++i) {
    ssize_t n = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL | flags);
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

TlsRecordStream::TlsRecordStream(int fd, const TrafficSecret& read, const TrafficSecret& write,
                                 uint64_t max_records)
    : fd_(fd),
      sealer_(write, update_requested_, max_records),
      out_(new uint8_t[RecordSealer::sealed_size(kBatchPlain)]),
      opener_(read, update_requested_),
      in_(new uint8_t[kInBuffer + kTlsMaxRecord]) {}

StreamIo TlsRecordStream::write(std::span<const iovec> from) {
  size_t total = 0;
  for (const iovec& v : from) total += v.iov_len;
  size_t put = 0;                             // plaintext of `from` reported by this call
  for (int round = 0; round < 64; ++round) {  // bounded: a batch per round
    if (out_off_ == out_len_) {
      if (put >= total) break;
      out_len_ = out_off_ = reported_ = ends_done_ = 0;
      ends_.clear();
      sealer_.seal(from, put, kBatchPlain, out_.get(), out_len_, ends_);
      if (out_len_ == 0) break;
    }
    ssize_t k =
        ::send(fd_, out_.get() + out_off_, out_len_ - out_off_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      int err = errno;
      return errno_failure(put, err);
    }
    out_off_ += static_cast<size_t>(k);
    while (ends_done_ < ends_.size() && ends_[ends_done_].out_end <= out_off_) {
      put += ends_[ends_done_].plain_end - reported_;
      reported_ = ends_[ends_done_].plain_end;
      ++ends_done_;
    }
  }
  return StreamIo{.n = put};
}

StreamIo TlsRecordStream::read(std::span<const iovec> into) {
  if (over_) return ended_;
  std::vector<iovec> rest(into.begin(), into.end());
  size_t n = 0;
  bool emptied = false;  // a recv of this call found the socket with no more
  for (int round = 0; round < 8 && !rest.empty(); ++round) {
    size_t used = 0;
    OpenResult r = opener_.open({in_.get() + in_start_, in_end_ - in_start_}, used, rest);
    in_start_ += used;
    n += r.n;
    skip_written(rest, r.n);
    if (r.closed || !r.error.empty()) {
      over_ = true;
      if (r.closed) {
        ended_ = peer_closed();
      } else {
        ended_ = StreamIo{.failed = Status(Code::kClosed, "TLS: " + r.error,
                                           r.bad_mac ? HealthKind::kPeerNiCorrupt
                                                     : HealthKind::kPeerNiConnectError),
                          .tls_refused = true};
      }
      if (n > 0) return StreamIo{.n = n};
      return ended_;
    }
    if (rest.empty() || opener_.has_plain()) break;
    if (n > 0) {
      // What is here is given; wait for the socket only if it had no more and no whole
      // record is left.
      bool whole = RecordOpener::record_size({in_.get() + in_start_, in_end_ - in_start_}) > 0;
      return StreamIo{.n = n, .drained = emptied && !whole};
    }
    if (in_start_ == in_end_) {
      in_start_ = in_end_ = 0;
    } else if (in_start_ > 0 && kInBuffer + kTlsMaxRecord - in_end_ < kTlsMaxRecord) {
      std::memmove(in_.get(), in_.get() + in_start_, in_end_ - in_start_);
      in_end_ -= in_start_;
      in_start_ = 0;
    }
    size_t space = kInBuffer + kTlsMaxRecord - in_end_;
    ssize_t got = ::recv(fd_, in_.get() + in_end_, space, MSG_DONTWAIT);
    if (got > 0) {
      in_end_ += static_cast<size_t>(got);
      emptied = static_cast<size_t>(got) < space;
      continue;
    }
    if (got == 0) {
      over_ = true;
      ended_ = peer_closed();
      return ended_;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return StreamIo{};
    if (errno == EINTR) continue;
    over_ = true;
    ended_ = errno_failure(0, errno);
    return ended_;
  }
  return StreamIo{.n = n};
}

}  // namespace pfsnet::tcp_detail
