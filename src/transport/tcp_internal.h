// The inside of TcpTransport, shared by its files: the transport's state (Impl: I/O
// threads, listeners, the connection table) and TcpConnection (one socket: the batched
// write path, the read path, close -- in tcp_connection.cc). tcp_transport.cc holds the
// handshake, listen, connect and stop. Not installed.
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
#include <optional>
#include <thread>
#include <unordered_map>

#include "base/log.h"
#include "base/mutex.h"
#include "base/thread_name.h"
#include "transport/tcp_kernel_info.h"
#include "transport/tcp_stream.h"
#include "transport/tcp_transport.h"
#include "transport/tcp_zerocopy.h"
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

// Set on an I/O thread when the last thing it did was to wait for more of a large frame
// (TcpConnection::read_large_rest); cleared when it waits for a new frame.
inline thread_local bool tl_waiting_for_bulk = false;

// An I/O thread's loop. With `busy_poll` > 0 the thread, once it has run what was ready,
// keeps polling (ready handlers, then a non-blocking epoll_wait) that long before it
// blocks: a frame that comes within it is handled without waking a sleeping thread, which
// on a VM costs more than a whole loopback round trip (waking an idle vCPU). It costs at
// most `busy_poll` of CPU per burst of work -- except where it buys nothing: after a read
// that left a large frame waiting for the rest of its bytes (tl_waiting_for_bulk), the
// thread sleeps at once. The frame is complete only when its last byte comes, and on a
// long fast path the next segment comes within the poll every time, so polling there kept
// the thread spinning the whole transfer (at 4 Gbit/s and 50 ms RTT both daemons spent
// 1.71 CPU s per GiB written with it, 1.36 without).
// Returns when the context stops or runs out of work.
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
    } while (!ran && !tl_waiting_for_bulk && !ctx.stopped() &&
             std::chrono::steady_clock::now() < until);
    if (!ran) ctx.run_one();
  }
}

constexpr size_t kReadBufferSize = 64 * 1024;
constexpr size_t kMaxBatchFrames = 128;
constexpr uint32_t kHandshakeMaxPayload = 4096;

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

inline asio::ip::address address_of(const Nid& nid) {
  if (nid.addr_len == 16) {
    asio::ip::address_v6::bytes_type b;
    std::copy(nid.addr.begin(), nid.addr.end(), b.begin());
    return asio::ip::address_v6(b);
  }
  return asio::ip::address_v4(nid.ipv4());
}

inline tcp::endpoint endpoint_of(const Nid& nid, uint16_t port) {
  return tcp::endpoint(address_of(nid), port);
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
    PFS_LOG_INFO("TCP transport: {} I/O thread(s) (lnet.io_threads)", n);
    for (int i = 0; i < n; ++i) {
      ctx_.push_back(std::make_shared<asio::io_context>(1));
      guards_.emplace_back(asio::make_work_guard(*ctx_.back()));
    }
    exited_.resize(n);
    for (int i = 0; i < n; ++i) {
      exit_futures_.push_back(exited_[i].get_future());
      threads_.emplace_back([this, i] {
        name_this_thread("pfs-tcp-io");
        tcp_detail::run_io(*ctx_[i], opts_.busy_poll);
        exited_[i].set_value();
      });
    }
  }

  ~Impl() { stop(); }

  // The I/O thread for a new connection: the one serving the fewest open connections
  // (socklnd's ksocknal_choose_scheduler_locked), so a server's clients spread over them.
  std::shared_ptr<asio::io_context> next_ctx();

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
  void established(const std::shared_ptr<TcpConnection>& c, std::vector<Nid> peer_nids,
                   WireSession wire);
  void forget(uint64_t id) {
    MutexLock lk(mu_);
    conns_.erase(id);
  }
  // A closed connection's zero-copy sends (tcp_zerocopy.h): its socket kept by the
  // graveyard while the kernel has not completed them, swept every 20 ms on the first I/O
  // thread until none is left (or the transport stops).
  void zc_retire(int fd, std::shared_ptr<tcp_detail::ZeroCopySends> z);
  void arm_zc_sweep();
  ZeroCopyStats zero_copy_stats();

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
  std::atomic<bool> stopped_{false};
  // SO_SNDBUF/SO_RCVBUF for new connections (0: autotuning); set_socket_buffers moves them.
  std::atomic<int> tx_buffer_, rx_buffer_;

  tcp_detail::ZcGraveyard zc_graveyard_;
  std::atomic<bool> zc_sweep_armed_{false};

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
  // `keys`: the node's cluster keys when its handshake began (TLS keyed from them).
  void start_tls(std::shared_ptr<const TlsContext> ctx, bool client, const ClusterKeys& keys);
  TlsSession* tls() const { return tls_.get(); }

  // Waits for what a TLS call wants of the socket; throws on an error or the end.
  asio::awaitable<void> tls_wait(const TlsIo& r);
  asio::awaitable<void> tls_handshake();
  // The handshake's frame I/O, through the byte stream as the data path's is (the socket,
  // or TLS once start_tls ran): all of `b` read, all of `bufs` written, waiting for the
  // socket between calls. A failure throws (the handshake's timer bounds every wait).
  asio::awaitable<void> hs_read(asio::mutable_buffer b);
  asio::awaitable<void> hs_write(std::span<const asio::const_buffer> bufs);
  void set_peer_nids(std::vector<Nid> n) { peer_nids_ = std::move(n); }
  // Before the connection is reported (the handshake's I/O thread).
  void set_bulk(bool b) { bulk_ = b; }
  void set_wire(WireSession w) { wire_ = std::move(w); }

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
  void abort_socket();

  void send(std::unique_ptr<OutFrame> f) override { send_now(std::move(f)); }

  void send_now(std::unique_ptr<OutFrame> f);

  // Called by the I/O thread after a read batch for connections with deferred writes:
  // written at once, on this thread, like any other sender's.
  void flush_deferred() { write_direct(); }

  void mark_open() {
    open_stream();
    fd_.store(sock_.native_handle(), std::memory_order_release);
    start_zero_copy();
    state_.store(kOpen);
  }

  void start_reading() { read_more(); }
  // Tests: whether a caller reads the connection now (receive_here); whether nobody does.
  bool read_by_caller() const { return (rx_.load() & kRxCaller) != 0; }
  // Before on_closed: until no caller reads (its last frame is up), on the I/O thread.
  void wait_for_caller_reading();
  bool read_by_nobody() const { return rx_.load() == 0; }

  // A waiting caller reads the connection itself (Connection::receive_here): plaintext
  // only, and only while the I/O thread is not reading it.
  Here receive_here(const std::atomic<bool>& done, Duration max_wait, int wake_fd) override;

  void do_close(const Status& why);

  // Its zero-copy figures (none when it sends none).
  ZeroCopyStats zero_copy_stats() const { return zc_ ? zc_->stats() : ZeroCopyStats{}; }

  ~TcpConnection() override;

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
  bool fill_batch();

  // `bulk`: the frame's bulk, when these are its bytes (sent zero-copy if long enough).
  void push_iov(const void* p, size_t n, const BulkData* bulk = nullptr) {
    iov_.push_back(iovec{const_cast<void*>(p), n});
    iov_bulk_.push_back(bulk);
    batch_bytes_ += n;
  }
  // Drops the first `n` bytes of the batch's buffers (written).
  void skip_iov(size_t n) {
    const size_t before = iov_.size();
    skip_written(iov_, n);
    iov_bulk_.erase(iov_bulk_.begin(), iov_bulk_.begin() + static_cast<long>(before - iov_.size()));
  }
  // Writes what the socket takes now of the batch's buffers, dropping them as written:
  // one stream write; with zero-copy on, a send per stretch (the bytes up to a bulk copied
  // with MSG_MORE, a long bulk zero-copy), as many as the socket takes. `n`: bytes written.
  StreamIo write_out();
  // At open: SO_ZEROCOPY and zc_ when lnet.zc_min_payload asks for it (plaintext only:
  // TLS sends sealed copies).
  void start_zero_copy();
  // Lets go of the bulk whose zero-copy sends the kernel completed. Any thread.
  void reap_zero_copy() {
    if (zc_ && zc_->outstanding() > 0) zc_->reap(fd_.load(std::memory_order_acquire));
  }

  void complete_batch(const Status& s);

  // On the sender's thread (or the I/O thread): the queued frames written to the stream
  // without blocking, completed here -- no completion is posted, so the I/O thread's loop
  // runs no extra turn (an epoll_wait) per batch. What the socket does not take whole
  // continues on the I/O thread (write_rest); after a few rounds the I/O thread takes over,
  // so one busy sender does not write forever on another's thread.
  void write_direct();

  // "<what> <connection> failed: <the stream's reason>"; the peer's close as it is
  // ("closed by peer").
  Status failure(const char* what, const StreamIo& r) const;

  // On the I/O thread: the rest of the batch, waiting for the socket between writes.
  void write_rest();

  void fail_batch(const Status& s);

  // ---- read path: the I/O thread, or a caller waiting for its reply (receive_here) ----
  //
  // One reader at a time owns rbuf_ and the stream's read side, and delivers in order:
  // rx_ says who. The I/O thread takes kRxIo when it reads and gives it up only when it
  // waits for the socket (not while a large frame's rest is read: rx_large_). A caller
  // takes kRxCaller only from nobody. The I/O thread that finds a caller reading marks
  // kRxParked and waits for the socket again (edge-triggered: for bytes that come after);
  // the caller, leaving, reads what came before while it finds the mark. It hands reading
  // back with a posted turn when it stopped with work left for the I/O thread (a large
  // frame, bytes buffered: rx_resume_; a failure; a busy connection). The owner's acquire
  // and release on rx_ order its reads of rbuf_ after the previous owner's.
  static constexpr uint32_t kRxIo = 1, kRxCaller = 2, kRxParked = 4;
  // The I/O thread's claim: true when it may read (it had it, or took it); false when a
  // caller reads, marked kRxParked.
  bool take_rx_io();
  // Queues read_more's wait for the socket, unless it is queued. I/O thread.
  void arm_read();

  // Reads what the stream has into rbuf_ and delivers the frames it completes, a bounded
  // number of reads per turn; waits for the socket only when the stream asks (TLS may
  // hold decrypted bytes the socket no longer shows). I/O thread.
  void read_more();

  // receive_here's reads once the socket is readable: false when the caller must stop and
  // hand back (a failure, in *failed; a large frame; closed; a busy connection).
  bool read_here(std::optional<Status>* failed);

  // Closes the connection for a failed read (unless closed already).
  void fail_read(const Status& s);

  // Runs `then` on the I/O thread once the socket is readable; closes the connection
  // instead when the wait fails or it was closed meanwhile.
  template <class Then>
  void when_readable(Then then);

  // `n` more bytes are in rbuf_: delivers the frames they complete. Returns whether to
  // read on.
  bool took(size_t n, bool here = false);

  // Delivers every complete frame in rbuf_. Returns false when reading must not
  // continue from rbuf_ (closed, or a large frame's remainder is being read directly).
  // `here` (a caller reads): a large frame is left in rbuf_ for the I/O thread
  // (rx_resume_), and false returned.
  bool dispatch_buffered(TimePoint now, bool here = false);

  void read_large(InFrame f, size_t have_payload, size_t have_bulk);

  // Reads the rest of a large frame (`have` of its payload and bulk are here) straight
  // into its buffers, through read_into, waiting for the socket between reads -- and then
  // the I/O thread does not busy-poll (tl_waiting_for_bulk, run_io). Done at once
  // (`waited` false), it finishes on a posted turn, so reading does not recurse.
  //
  // (Tried and left: SO_RCVLOWAT at 64 or 256 KiB while it waits, so the kernel wakes the
  // thread per batch of segments, not per segment. It cut the CPU per GiB by about a
  // quarter (1.23 s against 1.71) but the delay line's writes fell to 0.32-0.39 of iperf3,
  // the probe reading 109-146 MiB/s on a 477 MiB/s line. Not understood; a candidate:
  // above the mark the receiver no longer acks at once (__tcp_ack_snd_check), and BBR's
  // rate follows the ACKs.)
  void read_large_rest(std::shared_ptr<InFrame> frame, size_t have, bool waited);
  // One non-blocking read of the stream into the frame's rest: the bytes read; 0: none
  // until the socket is readable again; -1: the connection failed (closed here).
  ssize_t read_into(InFrame& f, size_t have);

  bool deliver(InFrame&& f);
  // The memory a reply's bulk goes into when its caller lent some (TransportEvents::bulk_sink).
  std::optional<Buffer> bulk_sink(const FrameHeader& h);

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
  std::vector<EncodedHead> headers_;  // each frame's header and extensions
  std::vector<iovec> iov_;
  std::vector<const BulkData*> iov_bulk_;  // iov_'s: the frame's bulk, or null
  size_t batch_bytes_ = 0;
  // Zero-copy sends (tcp_zerocopy.h); set at open, fixed after; null: off.
  std::shared_ptr<ZeroCopySends> zc_;
  bool zc_retired_ = false;  // do_close gave them to the graveyard (the I/O thread's)
  TimePoint write_start_;

  std::unique_ptr<TlsSession> tls_;  // set before the connection opens; null: plaintext
  // The socket, or tls_ over it: set by the handshake's first frame I/O, by start_tls, or by
  // mark_open, before any frame is read or written.
  std::unique_ptr<ByteStream> stream_;
  ByteStream& open_stream() {
    if (!stream_) stream_ = std::make_unique<PlainStream>(sock_.native_handle());
    return *stream_;
  }

  // rx: the reader's (rx_), or the I/O thread's alone (rx_armed_, rx_large_)
  std::atomic<uint32_t> rx_{0};
  Buffer rbuf_;
  size_t rlen_ = 0;
  TimePoint partial_first_byte_;
  bool rx_resume_ = false;  // rbuf_ starts with a large frame a caller left undelivered
  bool rx_armed_ = false;   // read_more's wait for the socket is queued
  bool rx_large_ = false;   // a large frame's rest is being read (read_large_rest)

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
