// The inside of TcpTransport, shared by its two files: the transport's state (Impl:
// I/O threads, listeners, the connection table) and TcpConnection (one socket: the
// batched write path, the read path, close). tcp_transport.cc holds the handshake,
// listen, connect and stop. Not installed.
// Threads: as TcpTransport (tcp_transport.h).
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <asio.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <thread>
#include <unordered_map>

#include "base/log.h"
#include "base/mutex.h"
#include "transport/tcp_kernel_info.h"
#include "transport/tcp_transport.h"
#include "transport/tls.h"
#include "wire/handshake.h"

namespace pfsnet {

using asio::ip::tcp;

namespace tcp_detail {

// The TLS protocol failed (not the socket): the ends do not share a key, a certificate
// was not accepted, or the bytes were not TLS. A refusal, like a wrong cluster key.
struct TlsRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An I/O thread's loop. With `busy_poll` > 0 the thread, once it has run what was ready,
// keeps polling (ready handlers, then a non-blocking epoll_wait) that long before it
// blocks: a frame that comes within it is handled without waking a sleeping thread, which
// on a VM costs more than a whole loopback round trip (waking an idle vCPU). It costs at
// most `busy_poll` of CPU per burst of work. Returns when the context stops or runs out
// of work.
inline void run_io(asio::io_context& ctx, std::chrono::microseconds busy_poll) {
  if (busy_poll.count() <= 0) {
    ctx.run();
    return;
  }
  while (!ctx.stopped()) {
    auto until = std::chrono::steady_clock::now() + busy_poll;
    bool ran;
    do {
      ran = ctx.poll() > 0;
    } while (!ran && !ctx.stopped() && std::chrono::steady_clock::now() < until);
    if (!ran) ctx.run_one();
  }
}

constexpr size_t kReadBufferSize = 64 * 1024;
constexpr size_t kMaxBatchFrames = 128;
constexpr uint32_t kHandshakeMaxPayload = 4096;

// asio's transfer_all() caps every read or write system call at 64 KiB; a 1 MiB bulk
// would take 16 calls. This condition lets each call move as much as the socket takes.
inline size_t transfer_all_unbounded(const std::error_code& ec, size_t) {
  return ec ? 0 : size_t(64) << 20;
}

class TcpConnection;

// Frames delivered from one read between flushes of the writes they caused. A read of a
// burst of requests is answered in parts of this many: the peer starts on the first
// replies while the rest are served, so both ends work at once (two halves of a burst in
// flight); answered whole, a burst would bounce between them, one end idle at a time.
constexpr size_t kFlushEveryFrames = 32;

// Writes deferred while a read batch is dispatched on an I/O thread (`active`): the
// connections with frames waiting, written together after every kFlushEveryFrames frames
// and at the end. One per thread, reused: a batch allocates nothing.
struct DeferredWrites {
  bool active = false;
  std::vector<std::shared_ptr<TcpConnection>> conns;
  size_t frames = 0;  // delivered since the last flush
  void flush();
};
inline thread_local DeferredWrites tl_deferred;

// Defers this thread's writes for one read batch (handlers do not nest) and flushes them
// at its end.
class DeferScope {
 public:
  DeferScope() { tl_deferred.active = true; }
  ~DeferScope() {
    tl_deferred.active = false;
    tl_deferred.flush();
  }
  DeferScope(const DeferScope&) = delete;
  DeferScope& operator=(const DeferScope&) = delete;
};

inline tcp::endpoint endpoint_of(const Nid& nid, uint16_t port) {
  return tcp::endpoint(asio::ip::address_v4(nid.addr), port);
}

}  // namespace tcp_detail

using tcp_detail::TcpConnection;

class TcpTransport::Impl {
 public:
  Impl(TransportOptions opts, std::vector<Nid> node_nids, Clock& clock, TransportEvents& events)
      : opts_(std::move(opts)),
        node_nids_(std::move(node_nids)),
        clock_(clock),
        events_(events),
        tx_buffer_(opts_.tx_buffer_bytes),
        rx_buffer_(opts_.rx_buffer_bytes) {
    int n = std::max(1, opts_.io_threads);
    for (int i = 0; i < n; ++i) {
      ctx_.push_back(std::make_shared<asio::io_context>(1));
      guards_.emplace_back(asio::make_work_guard(*ctx_.back()));
    }
    exited_.resize(n);
    for (int i = 0; i < n; ++i) {
      exit_futures_.push_back(exited_[i].get_future());
      threads_.emplace_back([this, i] {
        tcp_detail::run_io(*ctx_[i], opts_.busy_poll);
        exited_[i].set_value();
      });
    }
  }

  ~Impl() { stop(); }

  std::shared_ptr<asio::io_context> next_ctx() { return ctx_[rr_.fetch_add(1) % ctx_.size()]; }

  Status listen(const Nid& local, uint16_t port);
  void connect(const Nid& local, const Nid& remote, uint16_t port, ConnectCallback cb, bool bulk);
  void stop();

  void set_socket_options(tcp::socket& s) {
    int one = 1;
    setsockopt(s.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // A size set turns the kernel's autotuning off for that buffer. The FORCE variants
    // pass net.core.wmem_max/rmem_max (they need CAP_NET_ADMIN); without it the kernel
    // caps the size there. Either way it doubles what it is given (its bookkeeping).
    if (int b = tx_buffer_.load(); b > 0) {
      if (setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDBUFFORCE, &b, sizeof(b)) != 0)
        setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
    }
    if (int b = rx_buffer_.load(); b > 0) {
      if (setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVBUFFORCE, &b, sizeof(b)) != 0)
        setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
    }
  }

  // What a connection from `local` announces: `local` first, then the node's other NIDs.
  void add(const std::shared_ptr<TcpConnection>& c);
  // Both handshake sides end here: the connection opens, the net hears of it, reads start.
  void established(const std::shared_ptr<TcpConnection>& c, std::vector<Nid> peer_nids);
  void forget(uint64_t id) {
    MutexLock lk(mu_);
    conns_.erase(id);
  }

  asio::awaitable<void> accept_loop(std::shared_ptr<tcp::acceptor> acc, Nid local);
  asio::awaitable<void> server_handshake(std::shared_ptr<TcpConnection> c);
  asio::awaitable<void> client_connect(std::shared_ptr<TcpConnection> c, Nid remote, uint16_t port,
                                       ConnectCallback cb);

  TransportOptions opts_;
  std::vector<Nid> node_nids_;
  Clock& clock_;
  TransportEvents& events_;
  // Shared with connections, so a socket never outlives its io_context.
  std::vector<std::shared_ptr<asio::io_context>> ctx_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards_;
  std::vector<std::thread> threads_;
  std::vector<std::promise<void>> exited_;
  std::vector<std::future<void>> exit_futures_;
  std::atomic<size_t> rr_{0};
  std::atomic<bool> stopped_{false};
  // SO_SNDBUF/SO_RCVBUF for new connections (0: autotuning); set_socket_buffers moves them.
  std::atomic<int> tx_buffer_, rx_buffer_;

  Mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<TcpConnection>> conns_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<tcp::acceptor>> acceptors_ GUARDED_BY(mu_);
};

namespace tcp_detail {

class TcpConnection final : public Connection, public std::enable_shared_from_this<TcpConnection> {
 public:
  TcpConnection(TcpTransport::Impl& t, std::shared_ptr<asio::io_context> io, Nid local,
                bool outgoing, uint64_t id)
      : t_(t), io_keep_(std::move(io)), io_(*io_keep_), sock_(io_), rbuf_(kReadBufferSize) {
    local_ = local;
    outgoing_ = outgoing;
    id_ = id;
  }

  tcp::socket& socket() { return sock_; }
  asio::io_context& io() { return io_; }

  // ---- TLS (tls.h): set up on the I/O thread before the handshake; fixed after. ----

  // Wraps the socket in TLS (`client`: this end starts the handshake).
  void start_tls(std::shared_ptr<const TlsContext> ctx, bool client) {
    std::error_code ec;
    sock_.native_non_blocking(true, ec);
    tls_ = std::make_unique<TlsSession>(std::move(ctx), sock_.native_handle(), client);
  }
  TlsSession* tls() const { return tls_.get(); }

  // Waits for what a TLS call wants of the socket; throws on an error or the end.
  asio::awaitable<void> tls_wait(const TlsIo& r) {
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
  asio::awaitable<void> tls_handshake() {
    for (int i = 0; i < 64; ++i) {  // a TLS 1.3 handshake takes a few round trips
      TlsIo r = tls_->handshake();
      if (r.want == TlsIo::Want::kNone) co_return;
      co_await tls_wait(r);
    }
    throw std::runtime_error("TLS handshake did not finish");
  }
  // The handshake's frame I/O: through TLS when it is on.
  asio::awaitable<void> hs_read(asio::mutable_buffer b) {
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
  asio::awaitable<void> hs_write(std::span<const asio::const_buffer> bufs) {
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
  void set_peer_nids(std::vector<Nid> n) { peer_nids_ = std::move(n); }
  // Before the connection is reported (the handshake's I/O thread).
  void set_bulk(bool b) { bulk_ = b; }

  bool is_open() const override { return state_.load() == kOpen; }
  // The descriptor stays open while this object lives (do_close only shuts it down), so
  // any thread holding the connection may ask -- also once it is closed, when Net adds its
  // last figures to the path's totals.
  std::optional<TcpKernelInfo> kernel_tcp_info(bool with_buffers) const override {
    if (state_.load() == kHandshake) return std::nullopt;
    return read_tcp_kernel_info(fd_.load(std::memory_order_acquire), with_buffers);
  }
  void post(std::function<void()> fn) override { asio::post(io_, std::move(fn)); }

  void close(const Status& why) override {
    auto self = shared_from_this();
    asio::post(io_, [self, why] { self->do_close(why); });
  }

  // Before the handshake finishes (timer expiry): abort whatever the socket is doing.
  void abort_socket() {
    std::error_code ec;
    sock_.cancel(ec);
    sock_.shutdown(tcp::socket::shutdown_both, ec);
  }

  void send(std::unique_ptr<OutFrame> f) override { send_now(std::move(f)); }

  void send_now(std::unique_ptr<OutFrame> f) {
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

  // Called by the I/O thread after a read batch for connections with deferred writes:
  // written at once, on this thread, like any other sender's.
  void flush_deferred() { write_direct(); }

  void mark_open() {
    fd_.store(sock_.native_handle(), std::memory_order_release);
    state_.store(kOpen);
  }

  void start_reading() { read_more(); }

  void do_close(const Status& why) {
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

  ~TcpConnection() override = default;

 private:
  enum State { kHandshake = 0, kOpen = 1, kClosed = 2 };

  // Under tx_mu_: do_close writes the reason under it.
  Status closed_status_locked() const REQUIRES(tx_mu_) {
    return Status(Code::kClosed, "connection " + describe() + " closed: " + close_reason_,
                  close_kind_);
  }

  static void fail_frame(OutFrame& f, const Status& s) {
    if (f.done) f.done->on_tx_done(s, TxTimes{});
  }

  // ---- write path. Exactly one writer at a time (writing_ == true). ----

  // Moves queued frames into the batch and encodes them. Returns false (and gives up the
  // writer role) when there is nothing to write.
  bool fill_batch() {
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

  void push_iov(const void* p, size_t n) {
    iov_.push_back(asio::const_buffer(p, n));
    batch_bytes_ += n;
  }

  void complete_batch(const Status& s) {
    TxTimes times{write_start_, t_.clock_.now()};
    for (auto& f : batch_)
      if (f->done) f->done->on_tx_done(s, times);
    batch_.clear();
  }

  // On the sender's thread (or the I/O thread): non-blocking sendmsg of the queued frames,
  // completed here -- no completion is posted, so the I/O thread's loop runs no extra
  // turn (an epoll_wait) per batch. What the socket does not take whole continues as an
  // asynchronous write on the I/O thread; after a few rounds the I/O thread takes over, so
  // one busy sender does not write forever on another's thread.
  void write_direct() {
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

  // TLS: the batch in one buffer (records are cut from it; per-frame writes would make a
  // record of every small frame), written as far as the socket takes it. Returns the
  // bytes written, -1 (EAGAIN) when none, or sets *failed.
  ssize_t tls_write_batch(Status* failed) {
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

  // TLS: writes tls_wbuf_ from `off` until it is all written or a call does not move a
  // byte (*last says why: kWrite, the socket is full). Returns the new offset.
  size_t tls_put(size_t off, TlsIo* last) {
    while (off < batch_bytes_) {
      *last = tls_->write(tls_wbuf_.data() + off, batch_bytes_ - off);
      if (last->n == 0) break;
      off += last->n;
    }
    return off;
  }

  Status tls_failure(const TlsIo& r, const char* what) const {
    if (r.want == TlsIo::Want::kClosed) return Status(Code::kClosed, "closed by peer");
    HealthKind kind = r.bad_mac          ? HealthKind::kPeerNiCorrupt
                      : r.sys_errno != 0 ? health_kind_for_errno(r.sys_errno)
                                         : HealthKind::kPeerNiConnectError;
    return Status(Code::kClosed, std::string(what) + " " + describe() + " failed: TLS: " + r.error,
                  kind);
  }

  // TLS, on the I/O thread: write the rest of tls_wbuf_ from `off`, waiting for the socket.
  void tls_write_rest(size_t off) {
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

  void fail_batch(const Status& s) {
    complete_batch(s);
    do_close(s);
    MutexLock lk(tx_mu_);
    writing_ = false;
  }

  // On the I/O thread: write the current batch, skipping `skip` bytes already written.
  void io_write_batch(size_t skip) {
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

  // ---- read path (I/O thread) ----

  void read_more() {
    if (tls_) {
      tls_read_more();
      return;
    }
    auto self = shared_from_this();
    sock_.async_read_some(asio::buffer(rbuf_.data() + rlen_, rbuf_.size() - rlen_),
                          [self](std::error_code ec, size_t n) { self->on_read(ec, n); });
  }

  void fail_read(const std::error_code& ec) {
    if (state_.load() == kClosed) return;
    if (ec == asio::error::eof) {
      do_close(Status(Code::kClosed, "closed by peer"));
    } else {
      do_close(Status(Code::kClosed, ec.message(), health_kind_for_errno(ec.value())));
    }
  }

  void on_read(std::error_code ec, size_t n) {
    if (ec || state_.load() == kClosed) {
      fail_read(ec ? ec : asio::error::operation_aborted);
      return;
    }
    if (took(n)) read_more();
  }

  // TLS: reads what OpenSSL has (it may hold decrypted bytes the socket no longer shows)
  // and waits for the socket only when it asks; a bounded number of reads per turn.
  void tls_read_more() {
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

  // `n` more bytes are in rbuf_: delivers the frames they complete. Returns whether to
  // read on.
  bool took(size_t n) {
    TimePoint now = t_.clock_.now();
    if (rlen_ == 0) partial_first_byte_ = now;
    rlen_ += n;

    DeferScope defer;
    return dispatch_buffered(now);
  }

  // Delivers every complete frame in rbuf_. Returns false when reading must not
  // continue from rbuf_ (closed, or a large frame's remainder is being read directly).
  bool dispatch_buffered(TimePoint now) {
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

  void read_large(InFrame f, size_t have_payload, size_t have_bulk) {
    auto self = shared_from_this();
    auto frame = std::make_shared<InFrame>(std::move(f));
    if (tls_) {
      tls_read_large(frame, have_payload + have_bulk, false);
      return;
    }
    std::array<asio::mutable_buffer, 2> bufs = {
        asio::buffer(frame->payload.data() + have_payload, frame->payload.size() - have_payload),
        asio::buffer(frame->bulk.data() + have_bulk, frame->bulk.size() - have_bulk)};
    asio::async_read(sock_, bufs, transfer_all_unbounded,
                     [self, frame](std::error_code ec, size_t) {
                       if (ec || self->state_.load() == kClosed) {
                         self->fail_read(ec ? ec : asio::error::operation_aborted);
                         return;
                       }
                       frame->times.complete = self->t_.clock_.now();
                       bool ok;
                       {
                         DeferScope defer;
                         ok = self->deliver(std::move(*frame));
                       }
                       if (ok) self->read_more();
                     });
  }

  // TLS: reads the rest of a large frame (`have` of its payload and bulk are here). Done
  // at once, it finishes on a posted turn, so reading does not recurse.
  void tls_read_large(std::shared_ptr<InFrame> frame, size_t have, bool waited) {
    auto self = shared_from_this();
    size_t plen = frame->payload.size(), total = plen + frame->bulk.size();
    while (have < total) {
      uint8_t* dst =
          have < plen ? frame->payload.data() + have : frame->bulk.data() + (have - plen);
      size_t room = have < plen ? plen - have : total - have;
      TlsIo r = tls_->read(dst, room);
      have += r.n;
      if (r.n > 0) continue;
      if (r.want == TlsIo::Want::kRead) {
        sock_.async_wait(tcp::socket::wait_read, [self, frame, have](std::error_code ec) {
          if (ec || self->state_.load() == kClosed) {
            self->fail_read(ec ? ec : asio::error::operation_aborted);
            return;
          }
          self->tls_read_large(frame, have, true);
        });
        return;
      }
      if (state_.load() != kClosed) do_close(tls_failure(r, "read from"));
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
    if (waited) {
      finish();
    } else {
      asio::post(io_, finish);
    }
  }

  bool deliver(InFrame&& f) {
    t_.events_.on_frame(*this, std::move(f));
    if (tl_deferred.active && ++tl_deferred.frames >= kFlushEveryFrames) tl_deferred.flush();
    return state_.load() != kClosed;
  }

  TcpTransport::Impl& t_;
  std::shared_ptr<asio::io_context> io_keep_;
  asio::io_context& io_;
  tcp::socket sock_;
  std::atomic<int> state_{kHandshake};
  std::atomic<int> fd_{-1};  // the socket's descriptor once open, for kernel_tcp_info

  // tx
  Mutex tx_mu_;
  std::deque<std::unique_ptr<OutFrame>> txq_ GUARDED_BY(tx_mu_);
  bool writing_ GUARDED_BY(tx_mu_) = false;
  bool tx_closed_ GUARDED_BY(tx_mu_) = false;
  std::string close_reason_ GUARDED_BY(tx_mu_);
  HealthKind close_kind_ GUARDED_BY(tx_mu_) = HealthKind::kNone;
  // Owned by the current writer.
  std::vector<std::unique_ptr<OutFrame>> batch_;
  std::vector<EncodedHeader> headers_;
  std::vector<asio::const_buffer> iov_;
  size_t batch_bytes_ = 0;
  TimePoint write_start_;
  std::vector<uint8_t> tls_wbuf_;  // TLS: the batch in one piece

  std::unique_ptr<TlsSession> tls_;  // set before the connection opens; null: plaintext

  // rx (I/O thread)
  Buffer rbuf_;
  size_t rlen_ = 0;
  TimePoint partial_first_byte_;

  friend class TcpTransport::Impl;
};

inline void DeferredWrites::flush() {
  frames = 0;
  // A write's completions may defer another connection's writes: the loop takes them too.
  for (size_t i = 0; i < conns.size(); ++i) {
    std::shared_ptr<TcpConnection> c = std::move(conns[i]);
    c->flush_deferred();
  }
  conns.clear();
}

}  // namespace tcp_detail
}  // namespace pfsnet
