// TcpConnection (tcp_internal.h): one socket -- TLS set-up and the handshake's reads and
// writes, then framing over its byte stream (tcp_stream.h: the socket, or TLS over it): the
// batched write path, the read path, close.
#include <poll.h>

#include <algorithm>

#include "transport/tcp_internal.h"
#include "wire/crc32c.h"

namespace pfsnet::tcp_detail {

void TcpConnection::start_tls(std::shared_ptr<const TlsContext> ctx, bool client,
                              const ClusterKeys& keys) {
  std::error_code ec;
  sock_.native_non_blocking(true, ec);
  tls_ = std::make_unique<TlsSession>(std::move(ctx), sock_.native_handle(), client, keys);
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
    if (r.want == TlsIo::Want::kNone) {
      // From here the records may be ours (tls_records.h), sealed and opened by the stream.
      if (auto s = tls_->take_traffic_secrets())
        stream_ = std::make_unique<TlsRecordStream>(sock_.native_handle(), s->read, s->write);
      co_return;
    }
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
    if (tls_ && !r.failed.ok() && !r.by_peer && !r.tls_refused) {
      // The peer closed; an alert it sent first says why (TLS 1.3 refuses a client's
      // certificate after the client's handshake ended, and the close may beat this
      // write): what is left of its stream, read here on the handshake's own thread.
      uint8_t scratch[512];
      iovec v{scratch, sizeof(scratch)};
      for (int i = 0; i < 16; ++i) {
        StreamIo a = s.read({&v, 1});
        if (a.tls_refused) throw_if_failed(a);
        if (!a.failed.ok() || a.n == 0) break;
      }
    }
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
  if (zc_) {
    zc_retired_ = true;
    t_.zc_retire(sock_.native_handle(), zc_);
  }
  t_.forget(id_);  // first: whoever hears of the close finds its I/O thread one lighter
  if (prev == kOpen) {
    PFS_LOG_INFO("connection {} closed: {}", describe(), why.message());
    wait_for_caller_reading();
    t_.events_.on_closed(*this, why);
  }
}

void TcpConnection::wait_for_caller_reading() {
  // A caller reading the socket (receive_here) may be handing a frame up at this moment;
  // the shutdown above ends its poll and its next read sees the close, and it leaves. Only
  // the I/O thread waits (a caller closing is that reader itself), bounded.
  if (!io_.get_executor().running_in_this_thread()) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (read_by_caller()) {
    if (std::chrono::steady_clock::now() >= until) {
      PFS_LOG_WARN("connection {}: a caller still reads it 2 s after its close", describe());
      return;
    }
    std::this_thread::yield();
  }
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
  iov_bulk_.clear();
  batch_bytes_ = 0;
  for (size_t i = 0; i < batch_.size(); ++i) {
    OutFrame& f = *batch_[i];
    if (!f.credits_set) f.hdr.credits = take_credits_to_return();
    f.hdr.payload_len = static_cast<uint32_t>(f.payload_len());
    f.hdr.bulk_len = static_cast<uint32_t>(f.bulk_size());
    // Extensions only where the handshake says the peer takes them (none on version 1).
    fit_extensions(wire_, &f.hdr.ext);
    encode_frame_head(f.hdr, wire_.version, &headers_[i]);
    push_iov(headers_[i].bytes.data(), headers_[i].size);
    if (!f.payload.empty()) push_iov(f.payload.data(), f.payload.size());
    if (f.sealed) push_iov(f.seal, kDataCrcSize);
    if (f.bulk_size()) push_iov(f.bulk->data(), f.bulk_size(), &f.bulk);
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
    StreamIo r = write_out();
    if (!r.failed.ok()) {
      Status s = failure("write to", r);
      complete_batch(s);
      close(s);  // on the I/O thread: this may be a sender's
      MutexLock lk(tx_mu_);
      writing_ = false;
      return;
    }
    if (iov_.empty()) {
      complete_batch(Status::Ok());
      continue;
    }
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

StreamIo TcpConnection::write_out() {
  if (!zc_ || !zc_->on()) {
    StreamIo r = stream_->write(iov_);
    if (r.failed.ok()) skip_iov(r.n);
    return r;
  }
  reap_zero_copy();  // the bulk of sends completed since: let go before more is pinned
  const int fd = fd_.load(std::memory_order_relaxed);
  size_t total = 0;
  for (int call = 0; call < 64 && !iov_.empty(); ++call) {  // bounded per turn
    size_t k = 0;                                           // the first long bulk
    while (k < iov_.size() && !(iov_bulk_[k] && zc_->wants(iov_[k].iov_len))) ++k;
    StreamIo r;
    if (k == iov_.size()) {
      r = PlainStream(fd).write(iov_);
    } else if (k > 0) {
      r = PlainStream(fd).write(std::span(iov_.data(), k), MSG_MORE);
    } else {
      r = zc_->send(fd, iov_[0], *iov_bulk_[0]);
    }
    if (!r.failed.ok()) return StreamIo{.n = total, .failed = r.failed, .by_peer = r.by_peer};
    skip_iov(r.n);
    total += r.n;
    if (r.n == 0) break;  // the socket is full
  }
  return StreamIo{.n = total};
}

void TcpConnection::start_zero_copy() {
  if (t_.opts_.zc_min_payload == 0 || tls_) return;
  int one = 1;
  const int fd = sock_.native_handle();
  if (::setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) != 0) {
    PFS_LOG_DEBUG("connection {}: no SO_ZEROCOPY ({}): bulk copied", describe(),
                  std::strerror(errno));
    return;
  }
  zc_ = std::make_shared<ZeroCopySends>(t_.opts_.zc_min_payload, t_.opts_.zc_keep_when_copied);
}

TcpConnection::~TcpConnection() {
  // Closed without do_close (a transport stopped before its close ran) while the kernel
  // still pins bulk this lets go: reset, so what it had yet to send is dropped, not sent.
  if (zc_ && !zc_retired_ && zc_->outstanding() > 0 && sock_.is_open()) {
    linger l{1, 0};
    ::setsockopt(sock_.native_handle(), SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  }
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
    StreamIo r = write_out();
    if (!r.failed.ok()) {
      fail_batch(failure("write to", r));
      return;
    }
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

bool TcpConnection::take_rx_io() {
  uint32_t s = rx_.load(std::memory_order_acquire);
  for (;;) {
    if (s & kRxIo) return true;  // this thread's already (a turn of its own chain)
    uint32_t want = (s & kRxCaller) ? (s | kRxParked) : (s | kRxIo);
    if (rx_.compare_exchange_weak(s, want, std::memory_order_acq_rel, std::memory_order_acquire))
      return !(s & kRxCaller);
  }
}

void TcpConnection::read_more() {
  if (rx_large_) return;  // a large frame's rest is being read: it reads on when done
  auto self = shared_from_this();
  if (!take_rx_io()) {  // a caller reads: it reads what came before it leaves; then the wait
    arm_read();
    return;
  }
  tl_waiting_for_bulk = false;
  // Closed (on this thread) since this turn was posted: nothing more goes up -- on_closed
  // has run, and the layer above may have let go of what it keeps in the connection.
  if (state_.load() == kClosed) return;
  if (rx_resume_) {  // a caller left a large frame in rbuf_
    rx_resume_ = false;
    DeferScope defer;
    if (!dispatch_buffered(t_.clock_.now())) return;
  }
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
      // Waiting for the socket: a caller may read meanwhile.
      rx_.fetch_and(~kRxIo, std::memory_order_acq_rel);
      arm_read();
      return;
    }
  }
  asio::post(io_, [self] { self->read_more(); });
}

void TcpConnection::arm_read() {
  if (rx_armed_) return;  // one wait at a time (a caller's hand-back may find one queued)
  rx_armed_ = true;
  when_readable([self = shared_from_this()] {
    self->rx_armed_ = false;
    self->read_more();
  });
}

Connection::Here TcpConnection::receive_here(const std::atomic<bool>& done, Duration max_wait,
                                             int wake_fd) {
  if (tls_ || state_.load() != kOpen) return Here::kNo;  // TLS: the I/O thread's alone
  uint32_t none = 0;
  if (!rx_.compare_exchange_strong(none, kRxCaller, std::memory_order_acq_rel,
                                   std::memory_order_relaxed))
    return Here::kNo;  // the I/O thread (or another caller) reads it now
  auto self = shared_from_this();
  if (rx_resume_) {  // a large frame waits in rbuf_ for the I/O thread: its turn first
    rx_.store(0, std::memory_order_release);
    asio::post(io_, [self] { self->read_more(); });
    return Here::kNo;
  }
  const int fd = fd_.load(std::memory_order_acquire);
  const auto until = std::chrono::steady_clock::now() + max_wait;
  Here out = Here::kNo;
  std::optional<Status> failed;
  bool hand_back = false;
  for (int turn = 0; turn < 100000; ++turn) {  // bounded: each turn is a wake-up or a second
    if (done.load(std::memory_order_acquire)) {
      out = Here::kDone;
      break;
    }
    auto left = until - std::chrono::steady_clock::now();
    if (left <= Duration::zero()) {
      out = Here::kTimedOut;
      break;
    }
    auto slice = std::min<Duration>(left, std::chrono::seconds(1));
    timespec ts{static_cast<time_t>(slice.count() / 1000000000),
                static_cast<long>(slice.count() % 1000000000)};
    pollfd p[2] = {{fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int n = ::ppoll(p, 2, &ts, nullptr);
    if (n < 0 && errno != EINTR) break;
    if (p[1].revents) {
      out = Here::kWoken;
      break;
    }
    // POLLERR stays while zero-copy notifications wait in the error queue: taken here.
    if ((p[0].revents & POLLERR) && zc_) zc_->reap(fd);
    if (p[0].revents && !read_here(&failed)) {
      hand_back = true;
      break;
    }
  }
  // Leaving. The I/O thread marked kRxParked when the socket turned readable meanwhile
  // and waits again, for bytes that come after: what came before is read here first.
  for (int round = 0; !hand_back; ++round) {
    uint32_t mine = kRxCaller;
    if (rx_.compare_exchange_strong(mine, 0, std::memory_order_acq_rel)) break;
    rx_.fetch_and(~kRxParked, std::memory_order_acq_rel);
    if (round == 8 || !read_here(&failed)) hand_back = true;  // a busy connection: its I/O thread's
  }
  if (hand_back) {
    rx_.store(0, std::memory_order_release);
    if (failed) {
      asio::post(io_, [self, s = *failed] { self->fail_read(s); });
    } else {
      asio::post(io_, [self] { self->read_more(); });
    }
  }
  if (out == Here::kNo && done.load(std::memory_order_acquire)) out = Here::kDone;
  return out;
}

bool TcpConnection::read_here(std::optional<Status>* failed) {
  for (int round = 0; round < 16; ++round) {  // then the I/O thread reads on
    if (state_.load() == kClosed) return false;
    iovec v{rbuf_.data() + rlen_, rbuf_.size() - rlen_};
    StreamIo r = stream_->read({&v, 1});
    if (!r.failed.ok()) {
      *failed = failure("read from", r);
      return false;
    }
    if (r.n > 0 && !took(r.n, true)) return false;
    if (r.n == 0 || r.drained) return true;
  }
  return false;
}

void TcpConnection::fail_read(const Status& s) {
  if (state_.load() != kClosed) do_close(s);
}

template <class Then>
void TcpConnection::when_readable(Then then) {
  // Only this I/O thread waits on the socket through asio (a caller in receive_here
  // polls it): bytes that come between the last read and the wait make it ready at its
  // next epoll_wait, after the wait is queued.
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
      // A zero-copy notification wakes the wait as well (EPOLLERR).
      self->reap_zero_copy();
      then();
    }
  });
}

bool TcpConnection::took(size_t n, bool here) {
  TimePoint now = t_.clock_.now();
  if (rlen_ == 0) partial_first_byte_ = now;
  rlen_ += n;

  DeferScope defer;
  return dispatch_buffered(now, here);
}

bool TcpConnection::dispatch_buffered(TimePoint now, bool here) {
  size_t pos = 0;
  TimePoint first_byte = partial_first_byte_;
  while (rlen_ - pos >= kHeaderSize) {
    auto h = decode_header(std::span(rbuf_.data() + pos, kHeaderSize), t_.opts_.limits);
    if (h.ok() && h->version != wire_.version)
      h = Status(Code::kProtocol, "a version-" + std::to_string(h->version) +
                                      " frame on a version-" + std::to_string(wire_.version) +
                                      " connection");
    if (h.ok() && h->ext_len) {  // version 2's extensions: read whole before the rest
      if (rlen_ - pos - kHeaderSize < h->ext_len) break;
      Status e = decode_extensions(std::span(rbuf_.data() + pos + kHeaderSize, h->ext_len), &*h);
      if (!e.ok()) h = e;
    }
    if (!h.ok()) {
      PFS_LOG_WARN("closing connection {}: {}", describe(), h.status().message());
      do_close(h.status());
      return false;
    }
    if (h->version >= 2) {  // its NIDs are the connection's
      h->src_nid = peer_nid();
      h->dst_nid = local_;
    }
    const size_t head = kHeaderSize + h->ext_len;
    size_t body = size_t(h->payload_len) + h->bulk_len;
    size_t avail = rlen_ - pos - head;
    InFrame f;
    f.hdr = *h;
    if (avail >= body) {
      const uint8_t* p = rbuf_.data() + pos + head;
      f.payload = Buffer::copy_of(std::span(p, h->payload_len));
      if (std::optional<Buffer> sink = bulk_sink(*h)) {
        f.bulk = std::move(*sink);
        std::memcpy(f.bulk.data(), p + h->payload_len, h->bulk_len);
      } else {
        f.bulk = Buffer::copy_of(std::span(p + h->payload_len, h->bulk_len));
      }
      f.times = RxTimes{first_byte, now};
      pos += head + body;
      first_byte = now;
      if (!deliver(std::move(f))) return false;
      continue;
    }
    if (head + body <= rbuf_.size() / 2) break;  // small: wait for more in rbuf_
    if (here) {  // a large frame is the I/O thread's: left in rbuf_ for it
      rx_resume_ = true;
      break;
    }
    // Large frame: copy what is here, read the rest straight into its buffers.
    f.payload = Buffer(h->payload_len);
    // The caller's own memory when it lent some for this reply; else page-aligned (a
    // block store may take it as it is).
    std::optional<Buffer> sink = bulk_sink(*h);
    f.bulk = sink ? std::move(*sink) : Buffer::page_aligned(h->bulk_len);
    const uint8_t* p = rbuf_.data() + pos + head;
    size_t in_payload = std::min<size_t>(avail, h->payload_len);
    if (in_payload) std::memcpy(f.payload.data(), p, in_payload);
    size_t in_bulk = avail - in_payload;
    if (in_bulk) std::memcpy(f.bulk.data(), p + in_payload, in_bulk);
    // A sealed frame's bulk is checksummed piece by piece as it comes in, while in cache.
    if (h->flags & kFlagDataCrc) f.bulk_crc = crc32c(std::span(f.bulk.data(), in_bulk));
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
  return !rx_resume_ && state_.load() != kClosed;
}

void TcpConnection::read_large(InFrame f, size_t have_payload, size_t have_bulk) {
  rx_large_ = true;  // until it is delivered (or the connection closes)
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
  const size_t plen = frame->payload.size();
  for (int round = 0; round < 64 && have < total; ++round) {  // bounded per turn
    ssize_t got = read_into(*frame, have);
    if (got < 0) return;  // closed
    if (got > 0) {
      size_t from = std::max(have, plen) - plen;
      have += static_cast<size_t>(got);
      size_t to = std::max(have, plen) - plen;
      if (frame->bulk_crc && to > from)
        frame->bulk_crc = crc32c(std::span(frame->bulk.data() + from, to - from), *frame->bulk_crc);
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
    self->rx_large_ = false;
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

std::optional<Buffer> TcpConnection::bulk_sink(const FrameHeader& h) {
  if (h.kind != FrameKind::kReply || h.bulk_len == 0) return std::nullopt;
  std::optional<Buffer> sink = t_.events_.bulk_sink(*this, h);
  if (sink && sink->size() != h.bulk_len) return std::nullopt;  // not for this frame
  return sink;
}

bool TcpConnection::deliver(InFrame&& f) {
  t_.events_.on_frame(*this, std::move(f));
  if (tl_deferred.active && ++tl_deferred.frames >= kFlushEveryFrames) tl_deferred.flush();
  return state_.load() != kClosed;
}

}  // namespace pfsnet::tcp_detail
