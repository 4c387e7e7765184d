// TcpConnection (tcp_internal.h): one socket -- TLS set-up and the handshake's reads and
// writes, then framing over its byte stream (tcp_stream.h: the socket, or TLS over it): the
// batched write path, the read path, close.
#include "transport/tcp_internal.h"

namespace pfsnet::tcp_detail {

void TcpConnection::start_tls(std::shared_ptr<const TlsContext> ctx, bool client) {
  std::error_code ec;
  sock_.native_non_blocking(true, ec);
  tls_ = std::make_unique<TlsSession>(std::move(ctx), sock_.native_handle(), client);
  stream_ = std::make_unique<TlsStream>(*tls_);
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

namespace {

// A failed stream call in the handshake: thrown, as the handshake's other failures are.
void throw_if_failed(const StreamIo& r) {
  if (r.failed.ok()) return;
  if (r.by_peer) throw std::runtime_error("connection closed by peer during the handshake");
  if (r.tls_refused) throw TlsRefused(r.failed.message());  // e.g. TLS 1.3's late "unknown ca"
  throw std::runtime_error(r.failed.message());
}

}  // namespace

asio::awaitable<void> TcpConnection::hs_read(asio::mutable_buffer b) {
  ByteStream& s = open_stream();
  auto* p = static_cast<uint8_t*>(b.data());
  size_t got = 0;
  while (got < b.size()) {
    iovec v{p + got, b.size() - got};
    StreamIo r = s.read({&v, 1});
    throw_if_failed(r);
    got += r.n;
    if (got < b.size() && (r.n == 0 || r.drained))
      co_await sock_.async_wait(tcp::socket::wait_read, asio::use_awaitable);
  }
}

asio::awaitable<void> TcpConnection::hs_write(std::span<const asio::const_buffer> bufs) {
  ByteStream& s = open_stream();
  std::vector<iovec> rest;
  for (const auto& b : bufs)
    if (b.size() != 0) rest.push_back(iovec{const_cast<void*>(b.data()), b.size()});
  while (!rest.empty()) {
    StreamIo r = s.write(rest);
    throw_if_failed(r);
    skip_written(rest, r.n);
    if (!rest.empty()) co_await sock_.async_wait(tcp::socket::wait_write, asio::use_awaitable);
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
      // Only frames that raced the close need its status (a string: not on every write).
      Status s = raced.empty() ? Status::Ok() : closed_status_locked();
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
    f.hdr.payload_len = static_cast<uint32_t>(f.payload_len());
    f.hdr.bulk_len = static_cast<uint32_t>(f.bulk_size());
    encode_header(f.hdr, &headers_[i]);
    push_iov(headers_[i].data(), kHeaderSize);
    if (!f.payload.empty()) push_iov(f.payload.data(), f.payload.size());
    if (f.sealed) push_iov(f.seal, kDataCrcSize);
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
    StreamIo r = stream_->write(iov_);
    if (!r.failed.ok()) {
      Status s = failure("write to", r);
      complete_batch(s);
      close(s);  // on the I/O thread: this may be a sender's
      MutexLock lk(tx_mu_);
      writing_ = false;
      return;
    }
    if (r.n == batch_bytes_) {
      complete_batch(Status::Ok());
      continue;
    }
    skip_written(iov_, r.n);
    if (io_.get_executor().running_in_this_thread()) {
      write_rest();
    } else {
      auto self = shared_from_this();
      asio::post(io_, [self] { self->write_rest(); });
    }
    return;
  }
  auto self = shared_from_this();
  asio::post(io_, [self] { self->write_direct(); });
}

Status TcpConnection::failure(const char* what, const StreamIo& r) const {
  if (r.by_peer) return r.failed;
  return Status(Code::kClosed,
                std::string(what) + " " + describe() + " failed: " + r.failed.message(),
                r.failed.health_kind());
}

void TcpConnection::write_rest() {
  auto self = shared_from_this();
  for (int round = 0; round < 64; ++round) {  // bounded per turn
    StreamIo r = stream_->write(iov_);
    if (!r.failed.ok()) {
      fail_batch(failure("write to", r));
      return;
    }
    skip_written(iov_, r.n);
    if (iov_.empty()) {
      complete_batch(Status::Ok());
      write_direct();
      return;
    }
    if (r.n == 0) {
      sock_.async_wait(tcp::socket::wait_write, [self](std::error_code ec) {
        if (!ec) {
          self->write_rest();
          return;
        }
        self->fail_batch(Status(Code::kClosed,
                                "write to " + self->describe() + " failed: " + ec.message(),
                                health_kind_for_errno(ec.value())));
      });
      return;
    }
  }
  asio::post(io_, [self] { self->write_rest(); });
}

void TcpConnection::fail_batch(const Status& s) {
  complete_batch(s);
  do_close(s);
  MutexLock lk(tx_mu_);
  writing_ = false;
}

void TcpConnection::read_more() {
  tl_waiting_for_bulk = false;
  auto self = shared_from_this();
  for (int round = 0; round < 64; ++round) {  // bounded per turn
    if (state_.load() == kClosed) return;
    iovec v{rbuf_.data() + rlen_, rbuf_.size() - rlen_};
    StreamIo r = stream_->read({&v, 1});
    if (!r.failed.ok()) {
      fail_read(failure("read from", r));
      return;
    }
    if (r.n > 0 && !took(r.n)) return;
    if (r.n == 0 || r.drained) {
      when_readable([self] { self->read_more(); });
      return;
    }
  }
  asio::post(io_, [self] { self->read_more(); });
}

void TcpConnection::fail_read(const Status& s) {
  if (state_.load() != kClosed) do_close(s);
}

template <class Then>
void TcpConnection::when_readable(Then then) {
  // Only this I/O thread waits on the socket: bytes that come between the last read and
  // the wait make it ready at its next epoll_wait, after the wait is queued.
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this(),
                                            then = std::move(then)](std::error_code ec) {
    if (ec == asio::error::eof) {
      self->fail_read(Status(Code::kClosed, "closed by peer"));
    } else if (ec || self->state_.load() == kClosed) {
      if (!ec) ec = asio::error::operation_aborted;
      self->fail_read(Status(Code::kClosed,
                             "read from " + self->describe() + " failed: " + ec.message(),
                             health_kind_for_errno(ec.value())));
    } else {
      then();
    }
  });
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
  iovec v[2];
  size_t n = 0;
  if (have < plen) {
    v[n++] = {f.payload.data() + have, plen - have};
    v[n++] = {f.bulk.data(), f.bulk.size()};
  } else {
    v[n++] = {f.bulk.data() + (have - plen), total - have};
  }
  StreamIo r = stream_->read({v, n});
  if (!r.failed.ok()) {
    fail_read(failure("read from", r));
    return -1;
  }
  return static_cast<ssize_t>(r.n);
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
    when_readable([self, frame, have] { self->read_large_rest(frame, have, true); });
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
