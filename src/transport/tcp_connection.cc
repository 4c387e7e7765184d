// TcpConnection (tcp_internal.h): one socket -- TLS set-up and the handshake's reads and
// writes, the batched write path (plain and TLS), the read path, close.
#include "transport/tcp_internal.h"

namespace pfsnet::tcp_detail {

void TcpConnection::start_tls(std::shared_ptr<const TlsContext> ctx, bool client) {
  std::error_code ec;
  sock_.native_non_blocking(true, ec);
  tls_ = std::make_unique<TlsSession>(std::move(ctx), sock_.native_handle(), client);
}

asio::awaitable<void> TcpConnection::tls_wait(const TlsIo& r) {
  if (r.want == TlsIo::Want::kRead) {
    co_await sock_.async_wait(tcp::socket::wait_read, asio::use_awaitable);
  } else if (r.want == TlsIo::Want::kWrite) {
    co_await sock_.async_wait(tcp::socket::wait_write, asio::use_awaitable);
  } else if (r.want == TlsIo::Want::kClosed) {
    throw std::runtime_error("connection closed during TLS (is tls.enabled on at both ends?)");
  } else if (r.sys_errno != 0) {
    throw std::system_error(r.sys_errno, std::generic_category(), "TLS");
  } else {
    throw TlsRefused("TLS: " + r.error);
  }
}

asio::awaitable<void> TcpConnection::tls_handshake() {
  for (int i = 0; i < 64; ++i) {  // a TLS 1.3 handshake takes a few round trips
    TlsIo r = tls_->handshake();
    if (r.want == TlsIo::Want::kNone) co_return;
    co_await tls_wait(r);
  }
  throw std::runtime_error("TLS handshake did not finish");
}

asio::awaitable<void> TcpConnection::hs_read(asio::mutable_buffer b) {
  if (!tls_) {
    co_await asio::async_read(sock_, b, asio::use_awaitable);
    co_return;
  }
  size_t got = 0;
  while (got < b.size()) {
    TlsIo r = tls_->read(static_cast<uint8_t*>(b.data()) + got, b.size() - got);
    got += r.n;
    if (r.n == 0) co_await tls_wait(r);
  }
}

asio::awaitable<void> TcpConnection::hs_write(std::span<const asio::const_buffer> bufs) {
  if (!tls_) {
    co_await asio::async_write(sock_, bufs, asio::use_awaitable);
    co_return;
  }
  std::vector<uint8_t> all;
  for (const auto& b : bufs)
    all.insert(all.end(), static_cast<const uint8_t*>(b.data()),
               static_cast<const uint8_t*>(b.data()) + b.size());
  size_t put = 0;
  while (put < all.size()) {
    TlsIo r = tls_->write(all.data() + put, all.size() - put);
    put += r.n;
    if (r.n == 0) co_await tls_wait(r);
  }
}

void TcpConnection::abort_socket() {
  std::error_code ec;
  sock_.cancel(ec);
  sock_.shutdown(tcp::socket::shutdown_both, ec);
}

void TcpConnection::send_now(std::unique_ptr<OutFrame> f) {
  MutexLock lk(tx_mu_);
  if (tx_closed_) {
    Status s = closed_status_locked();
    lk.unlock();
    fail_frame(*f, s);
    return;
  }
  txq_.push_back(std::move(f));
  if (writing_) return;
  writing_ = true;
  lk.unlock();
  if (tl_deferred.active && io_.get_executor().running_in_this_thread()) {
    tl_deferred.conns.push_back(shared_from_this());  // flushed with the read batch
    return;
  }
  write_direct();
}

void TcpConnection::do_close(const Status& why) {
  int prev = state_.exchange(kClosed);
  if (prev == kClosed) return;
  std::error_code ec;
  sock_.shutdown(tcp::socket::shutdown_both, ec);
  sock_.cancel(ec);
  std::deque<std::unique_ptr<OutFrame>> q;
  Status s;
  {
    MutexLock lk(tx_mu_);
    tx_closed_ = true;
    close_reason_ = why.message();
    close_kind_ = why.health_kind();
    s = closed_status_locked();
    // The writer owns frames it has taken; they fail when its write fails.
    q.swap(txq_);
  }
  for (auto& f : q) fail_frame(*f, s);
  if (prev == kOpen) {
    PFS_LOG_INFO("connection {} closed: {}", describe(), why.message());
    t_.events_.on_closed(*this, why);
  }
  t_.forget(id_);
}

bool TcpConnection::fill_batch() {
  std::deque<std::unique_ptr<OutFrame>> raced;  // queued after close: failed unlocked
  {
    MutexLock lk(tx_mu_);
    if (txq_.empty() || tx_closed_) {
      writing_ = false;
      raced.swap(txq_);
      Status s = closed_status_locked();
      lk.unlock();
      // Completions may send again (on this connection, too): never under tx_mu_.
      for (auto& f : raced) fail_frame(*f, s);
      return false;
    }
    while (!txq_.empty() && batch_.size() < kMaxBatchFrames) {
      batch_.push_back(std::move(txq_.front()));
      txq_.pop_front();
    }
  }
  headers_.resize(batch_.size());
  iov_.clear();
  batch_bytes_ = 0;
  for (size_t i = 0; i < batch_.size(); ++i) {
    OutFrame& f = *batch_[i];
    if (!f.credits_set) f.hdr.credits = take_credits_to_return();
    f.hdr.payload_len = static_cast<uint32_t>(f.payload.size());
    f.hdr.bulk_len = static_cast<uint32_t>(f.bulk_size());
    encode_header(f.hdr, &headers_[i]);
    push_iov(headers_[i].data(), kHeaderSize);
    if (!f.payload.empty()) push_iov(f.payload.data(), f.payload.size());
    if (f.bulk_size()) push_iov(f.bulk->data(), f.bulk_size());
  }
  write_start_ = t_.clock_.now();
  return true;
}

void TcpConnection::complete_batch(const Status& s) {
  TxTimes times{write_start_, t_.clock_.now()};
  for (auto& f : batch_)
    if (f->done) f->done->on_tx_done(s, times);
  batch_.clear();
}

void TcpConnection::write_direct() {
  for (int round = 0; round < 4; ++round) {
    if (!fill_batch()) return;
    ssize_t n;
    Status failed;
    if (tls_) {
      n = tls_write_batch(&failed);
    } else {
      struct iovec vec[3 * kMaxBatchFrames];
      for (size_t i = 0; i < iov_.size(); ++i) {
        vec[i].iov_base = const_cast<void*>(iov_[i].data());
        vec[i].iov_len = iov_[i].size();
      }
      msghdr msg{};
      msg.msg_iov = vec;
      msg.msg_iovlen = iov_.size();
      n = ::sendmsg(sock_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        int err = errno;
        failed = Status(Code::kClosed,
                        "write to " + describe() + " failed: " + std::string(std::strerror(err)),
                        health_kind_for_errno(err));
      }
    }
    if (n == static_cast<ssize_t>(batch_bytes_)) {
      complete_batch(Status::Ok());
      continue;
    }
    if (!failed.ok()) {
      complete_batch(failed);
      close(failed);
      MutexLock lk(tx_mu_);
      writing_ = false;
      return;
    }
    size_t written = n > 0 ? static_cast<size_t>(n) : 0;
    if (io_.get_executor().running_in_this_thread()) {
      io_write_batch(written);
    } else {
      auto self = shared_from_this();
      asio::post(io_, [self, written] { self->io_write_batch(written); });
    }
    return;
  }
  auto self = shared_from_this();
  asio::post(io_, [self] { self->write_direct(); });
}

ssize_t TcpConnection::tls_write_batch(Status* failed) {
  tls_wbuf_.resize(batch_bytes_);
  size_t off = 0;
  for (const auto& b : iov_) {
    std::memcpy(tls_wbuf_.data() + off, b.data(), b.size());
    off += b.size();
  }
  TlsIo last;
  size_t put = tls_put(0, &last);
  if (put < batch_bytes_ && last.want != TlsIo::Want::kWrite) {
    *failed = tls_failure(last, "write to");
    return -1;
  }
  return put > 0 ? static_cast<ssize_t>(put) : -1;
}

size_t TcpConnection::tls_put(size_t off, TlsIo* last) {
  while (off < batch_bytes_) {
    *last = tls_->write(tls_wbuf_.data() + off, batch_bytes_ - off);
    if (last->n == 0) break;
    off += last->n;
  }
  return off;
}

Status TcpConnection::tls_failure(const TlsIo& r, const char* what) const {
  if (r.want == TlsIo::Want::kClosed) return Status(Code::kClosed, "closed by peer");
  HealthKind kind = r.bad_mac          ? HealthKind::kPeerNiCorrupt
                    : r.sys_errno != 0 ? health_kind_for_errno(r.sys_errno)
                                       : HealthKind::kPeerNiConnectError;
  return Status(Code::kClosed, std::string(what) + " " + describe() + " failed: TLS: " + r.error,
                kind);
}

void TcpConnection::tls_write_rest(size_t off) {
  auto self = shared_from_this();
  TlsIo r;
  off = tls_put(off, &r);
  if (off < batch_bytes_) {
    if (r.want == TlsIo::Want::kWrite) {
      sock_.async_wait(tcp::socket::wait_write, [self, off](std::error_code ec) {
        if (!ec) {
          self->tls_write_rest(off);
          return;
        }
        Status s(Code::kClosed, "write to " + self->describe() + " failed: " + ec.message(),
                 health_kind_for_errno(ec.value()));
        self->fail_batch(s);
      });
      return;
    }
    fail_batch(tls_failure(r, "write to"));
    return;
  }
  complete_batch(Status::Ok());
  write_direct();
}

void TcpConnection::fail_batch(const Status& s) {
  complete_batch(s);
  do_close(s);
  MutexLock lk(tx_mu_);
  writing_ = false;
}

void TcpConnection::io_write_batch(size_t skip) {
  if (tls_) {
    tls_write_rest(skip);
    return;
  }
  size_t i = 0;
  while (i < iov_.size() && skip >= iov_[i].size()) skip -= iov_[i++].size();
  if (i < iov_.size() && skip) {
    iov_[i] = asio::const_buffer(static_cast<const uint8_t*>(iov_[i].data()) + skip,
                                 iov_[i].size() - skip);
  }
  iov_.erase(iov_.begin(), iov_.begin() + static_cast<long>(i));
  auto self = shared_from_this();
  asio::async_write(sock_, iov_, transfer_all_unbounded, [self](std::error_code ec, size_t) {
    if (ec) {
      self->fail_batch(Status(Code::kClosed,
                              "write to " + self->describe() + " failed: " + ec.message(),
                              health_kind_for_errno(ec.value())));
      return;
    }
    self->complete_batch(Status::Ok());
    self->write_direct();
  });
}

void TcpConnection::read_more() {
  tl_waiting_for_bulk = false;
  if (tls_) {
    tls_read_more();
    return;
  }
  auto self = shared_from_this();
  sock_.async_read_some(asio::buffer(rbuf_.data() + rlen_, rbuf_.size() - rlen_),
                        [self](std::error_code ec, size_t n) { self->on_read(ec, n); });
}

void TcpConnection::fail_read(const std::error_code& ec) {
  if (state_.load() == kClosed) return;
  if (ec == asio::error::eof) {
    do_close(Status(Code::kClosed, "closed by peer"));
  } else {
    do_close(Status(Code::kClosed, ec.message(), health_kind_for_errno(ec.value())));
  }
}

void TcpConnection::on_read(std::error_code ec, size_t n) {
  if (ec || state_.load() == kClosed) {
    fail_read(ec ? ec : asio::error::operation_aborted);
    return;
  }
  if (took(n)) read_more();
}

void TcpConnection::tls_read_more() {
  auto self = shared_from_this();
  for (int i = 0; i < 64; ++i) {
    if (state_.load() == kClosed) return;
    TlsIo r = tls_->read(rbuf_.data() + rlen_, rbuf_.size() - rlen_);
    if (r.n == 0) {
      if (r.want == TlsIo::Want::kRead) {
        sock_.async_wait(tcp::socket::wait_read, [self](std::error_code ec) {
          if (ec || self->state_.load() == kClosed) {
            self->fail_read(ec ? ec : asio::error::operation_aborted);
            return;
          }
          self->tls_read_more();
        });
        return;
      }
      if (state_.load() != kClosed) do_close(tls_failure(r, "read from"));
      return;
    }
    if (!took(r.n)) return;
  }
  asio::post(io_, [self] { self->tls_read_more(); });
}

bool TcpConnection::took(size_t n) {
  TimePoint now = t_.clock_.now();
  if (rlen_ == 0) partial_first_byte_ = now;
  rlen_ += n;

  DeferScope defer;
  return dispatch_buffered(now);
}

bool TcpConnection::dispatch_buffered(TimePoint now) {
  size_t pos = 0;
  TimePoint first_byte = partial_first_byte_;
  while (rlen_ - pos >= kHeaderSize) {
    auto h = decode_header(std::span(rbuf_.data() + pos, kHeaderSize), t_.opts_.limits);
    if (!h.ok()) {
      PFS_LOG_WARN("closing connection {}: {}", describe(), h.status().message());
      do_close(h.status());
      return false;
    }
    size_t body = size_t(h->payload_len) + h->bulk_len;
    size_t avail = rlen_ - pos - kHeaderSize;
    InFrame f;
    f.hdr = *h;
    if (avail >= body) {
      const uint8_t* p = rbuf_.data() + pos + kHeaderSize;
      f.payload = Buffer::copy_of(std::span(p, h->payload_len));
      f.bulk = Buffer::copy_of(std::span(p + h->payload_len, h->bulk_len));
      f.times = RxTimes{first_byte, now};
      pos += kHeaderSize + body;
      first_byte = now;
      if (!deliver(std::move(f))) return false;
      continue;
    }
    if (kHeaderSize + body <= rbuf_.size() / 2) break;  // small: wait for more in rbuf_
    // Large frame: copy what is here, read the rest straight into its buffers.
    f.payload = Buffer(h->payload_len);
    f.bulk = Buffer::page_aligned(h->bulk_len);  // a block store may take it as it is
    const uint8_t* p = rbuf_.data() + pos + kHeaderSize;
    size_t in_payload = std::min<size_t>(avail, h->payload_len);
    if (in_payload) std::memcpy(f.payload.data(), p, in_payload);
    size_t in_bulk = avail - in_payload;
    if (in_bulk) std::memcpy(f.bulk.data(), p + in_payload, in_bulk);
    f.times.first_byte = first_byte;
    rlen_ = 0;
    read_large(std::move(f), in_payload, in_bulk);
    return false;
  }
  if (pos > 0) {
    std::memmove(rbuf_.data(), rbuf_.data() + pos, rlen_ - pos);
    rlen_ -= pos;
    partial_first_byte_ = now;
  }
  return state_.load() != kClosed;
}

void TcpConnection::read_large(InFrame f, size_t have_payload, size_t have_bulk) {
  read_large_rest(std::make_shared<InFrame>(std::move(f)), have_payload + have_bulk, false);
}

ssize_t TcpConnection::read_into(InFrame& f, size_t have) {
  size_t plen = f.payload.size(), total = plen + f.bulk.size();
  if (tls_) {
    uint8_t* dst = have < plen ? f.payload.data() + have : f.bulk.data() + (have - plen);
    TlsIo r = tls_->read(dst, have < plen ? plen - have : total - have);
    if (r.n > 0) return static_cast<ssize_t>(r.n);
    if (r.want == TlsIo::Want::kRead) return 0;
    if (state_.load() != kClosed) do_close(tls_failure(r, "read from"));
    return -1;
  }
  iovec v[2];
  size_t n = 0;
  if (have < plen) {
    v[n++] = {f.payload.data() + have, plen - have};
    v[n++] = {f.bulk.data(), f.bulk.size()};
  } else {
    v[n++] = {f.bulk.data() + (have - plen), total - have};
  }
  msghdr msg{};
  msg.msg_iov = v;
  msg.msg_iovlen = n;
  for (int i = 0; i < 8; ++i) {  // EINTR: again, a bounded number of times
    ssize_t got = ::recvmsg(sock_.native_handle(), &msg, MSG_DONTWAIT);
    if (got > 0) return got;
    if (got == 0) {
      fail_read(asio::error::eof);
      return -1;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno != EINTR) break;
  }
  fail_read(std::error_code(errno, asio::error::get_system_category()));
  return -1;
}

void TcpConnection::read_large_rest(std::shared_ptr<InFrame> frame, size_t have, bool waited) {
  auto self = shared_from_this();
  size_t total = frame->payload.size() + frame->bulk.size();
  for (int round = 0; round < 64 && have < total; ++round) {  // bounded per turn
    ssize_t got = read_into(*frame, have);
    if (got < 0) return;  // closed
    if (got > 0) {
      have += static_cast<size_t>(got);
      continue;
    }
    tl_waiting_for_bulk = true;
    sock_.async_wait(tcp::socket::wait_read, [self, frame, have](std::error_code ec) {
      if (ec || self->state_.load() == kClosed) {
        self->fail_read(ec ? ec : asio::error::operation_aborted);
        return;
      }
      self->read_large_rest(frame, have, true);
    });
    return;
  }
  if (have < total) {  // the round limit: the rest on a later turn
    asio::post(io_, [self, frame, have] { self->read_large_rest(frame, have, true); });
    return;
  }
  auto finish = [self, frame] {
    if (self->state_.load() == kClosed) return;
    frame->times.complete = self->t_.clock_.now();
    bool ok;
    {
      DeferScope defer;
      ok = self->deliver(std::move(*frame));
    }
    if (ok) self->read_more();
  };
  // Whole at once, from inside the read of its header: delivered on a later turn, so
  // reading does not recurse.
  if (waited) {
    finish();
  } else {
    asio::post(io_, finish);
  }
}

bool TcpConnection::deliver(InFrame&& f) {
  t_.events_.on_frame(*this, std::move(f));
  if (tl_deferred.active && ++tl_deferred.frames >= kFlushEveryFrames) tl_deferred.flush();
  return state_.load() != kClosed;
}

}  // namespace pfsnet::tcp_detail
