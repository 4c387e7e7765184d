#include "transport/tcp_transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <asio.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <thread>
#include <unordered_map>

#include "base/log.h"
#include "base/mutex.h"
#include "transport/tcp_internal.h"
#include "wire/handshake.h"

namespace pfsnet {

using asio::ip::tcp;

HealthKind health_kind_for_errno(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
      return HealthKind::kPeerNiConnectError;
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ETIMEDOUT:
    case EHOSTDOWN:
      return HealthKind::kPeerNiUnreachable;
    case EADDRNOTAVAIL:
    case EAFNOSUPPORT:
    case EADDRINUSE:
    case EINVAL:
      return HealthKind::kPeerNiAddrError;
    case ENETDOWN:
      return HealthKind::kLocalNiDown;
    default:
      return HealthKind::kPeerNiConnectError;
  }
}

namespace {

using tcp_detail::endpoint_of;
using tcp_detail::kHandshakeMaxPayload;

// Handshake frame I/O (through TLS when the connection has it).
asio::awaitable<void> write_frame(TcpConnection& c, FrameKind kind, const Nid& src, const Nid& dst,
                                  const Buffer& payload, uint16_t version = 1, uint64_t xid = 0) {
  FrameHeader h;
  h.kind = kind;
  h.src_nid = src;
  h.dst_nid = dst;
  h.xid = xid;
  h.payload_len = static_cast<uint32_t>(payload.size());
  EncodedHead e;
  encode_frame_head(h, version, &e);
  std::array<asio::const_buffer, 2> bufs = {asio::buffer(e.bytes.data(), e.size),
                                            asio::buffer(payload.data(), payload.size())};
  co_await c.hs_write(bufs);
}

asio::awaitable<void> write_frame(TcpConnection& c, const HandshakeMachine::Out& out,
                                  const Nid& src, const Nid& dst) {
  co_await write_frame(c, out.kind, src, dst, out.payload, out.version, out.xid);
}

struct HsFrame {
  FrameHeader hdr;
  Buffer payload;
};

asio::awaitable<Result<HsFrame>> read_frame(TcpConnection& c) {
  EncodedHeader e;
  co_await c.hs_read(asio::buffer(e));
  FrameLimits lim{kHandshakeMaxPayload, 0};
  auto h = decode_header(e, lim);
  if (!h.ok()) co_return h.status();
  HsFrame f{*h, Buffer(h->payload_len)};
  if (h->payload_len) co_await c.hs_read(asio::buffer(f.payload.data(), f.payload.size()));
  co_return f;
}

// The first byte a client sends: a TLS record's (handshake, 0x16) or a frame's magic.
constexpr uint8_t kTlsHandshakeRecord = 0x16;

// Waits for the client's first byte and peeks at it (nothing is consumed); nullopt when
// the client closed.
asio::awaitable<std::optional<uint8_t>> peek_first_byte(tcp::socket& s) {
  for (int i = 0; i < 16; ++i) {  // a wake-up without data is rare; the timer bounds it too
    co_await s.async_wait(tcp::socket::wait_read, asio::use_awaitable);
    uint8_t b = 0;
    ssize_t n = ::recv(s.native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 1) co_return b;
    if (n == 0) co_return std::nullopt;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      throw std::system_error(errno, std::generic_category(), "recv");
  }
  throw std::runtime_error("no data from the peer");
}

std::string nids_string(const std::vector<Nid>& nids) {
  std::string s;
  for (const Nid& n : nids) s += (s.empty() ? "" : ",") + n.to_string();
  return s;
}

// With certificates, the peer's must name the NIDs it announces (its subjectAltName's IP
// addresses): another node's certificate, or one for no address, is refused by name.
void check_certificate(const TcpConnection& c, HandshakeMachine* hs) {
  const TlsSession* tls = c.tls();
  if (!tls || !tls->uses_certificates()) return;
  hs->check_peer([tls](const std::vector<Nid>& nids) {
    return certificate_names_nids(tls->peer_subject(), tls->peer_ip_names(), nids);
  });
}

}  // namespace

void TcpTransport::Impl::established(const std::shared_ptr<TcpConnection>& c,
                                     std::vector<Nid> peer_nids, WireSession wire) {
  c->set_peer_nids(std::move(peer_nids));
  c->set_wire(std::move(wire));
  c->mark_open();
  PFS_LOG_INFO("connection {} established", c->describe());
  events_.on_connected(c);
  c->start_reading();
}

std::shared_ptr<asio::io_context> TcpTransport::Impl::next_ctx() {
  if (ctx_.size() == 1) return ctx_[0];
  std::vector<size_t> served(ctx_.size(), 0);
  {
    MutexLock lk(mu_);
    for (const auto& [id, c] : conns_)
      for (size_t i = 0; i < ctx_.size(); ++i)
        if (&c->io() == ctx_[i].get()) ++served[i];
  }
  return ctx_[std::min_element(served.begin(), served.end()) - served.begin()];
}

void TcpTransport::Impl::add(const std::shared_ptr<TcpConnection>& c) {
  MutexLock lk(mu_);
  conns_[c->id()] = c;
}

Status TcpTransport::Impl::listen(const Nid& local, uint16_t port) {
  auto acc = std::make_shared<tcp::acceptor>(*ctx_[0]);
  std::error_code ec;
  tcp::endpoint ep = endpoint_of(local, port);
  acc->open(ep.protocol(), ec);
  if (!ec) acc->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && local.is_large()) acc->set_option(asio::ip::v6_only(true), ec);
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(Code::kInvalidArgument,
                  "cannot listen on " + local.to_string() + " port " + std::to_string(port) + ": " +
                      ec.message(),
                  health_kind_for_errno(ec.value()));
  }
  {
    MutexLock lk(mu_);
    acceptors_.push_back(acc);
  }
  asio::co_spawn(*ctx_[0], accept_loop(acc, local), asio::detached);
  return Status::Ok();
}

asio::awaitable<void> TcpTransport::Impl::accept_loop(std::shared_ptr<tcp::acceptor> acc,
                                                      Nid local) {
  for (;;) {
    auto io = next_ctx();
    auto c = std::make_shared<TcpConnection>(*this, io, local, false, new_connection_id());
    std::error_code ec;
    co_await acc->async_accept(c->socket(), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || stopped_) co_return;
      PFS_LOG_WARN("accept on {} failed: {}", local.to_string(), ec.message());
      continue;
    }
    set_socket_options(c->socket());
    add(c);
    asio::co_spawn(*io, server_handshake(c), asio::detached);
  }
}

asio::awaitable<void> TcpTransport::Impl::server_handshake(std::shared_ptr<TcpConnection> c) {
  auto& s = c->socket();
  std::string from;
  {
    std::error_code ec;
    auto ep = s.remote_endpoint(ec);
    from = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  asio::steady_timer timer(c->io());
  timer.expires_after(opts_.handshake_timeout);
  timer.async_wait([c](std::error_code ec) {
    if (!ec) c->abort_socket();
  });
  Status fail;
  try {
    // TLS first (when on), so everything after it -- the NIDs of the HELLOs too -- is
    // encrypted. A peer on the other setting is told by name, not left to a decode error.
    auto first = co_await peek_first_byte(s);
    if (!first) throw std::runtime_error("closed before its HELLO");
    bool peer_tls = *first == kTlsHandshakeRecord;
    if (opts_.tls && !peer_tls) {
      PFS_LOG_ERROR_LIMITED("plaintext connection from " + from.substr(0, from.rfind(':')),
                            "refusing plaintext connection from {}: tls.enabled is on here", from);
      co_await write_frame(*c, FrameKind::kReject, c->local_nid(), Nid(),
                           Buffer::copy_of(std::string_view(
                               "this node requires TLS (tls.enabled = true at both ends)")));
      timer.cancel();
      c->do_close(Status(Code::kRejected, "plaintext peer"));
      co_return;
    }
    if (!opts_.tls && peer_tls)
      throw std::runtime_error("the peer speaks TLS but tls.enabled is off here");
    const ClusterKeys keys = opts_.cluster_key.get();  // one set for TLS and the handshake
    if (opts_.tls) {
      c->start_tls(opts_.tls, false, keys);
      co_await c->tls_handshake();
    }
    // The handshake (wire/handshake.h's machine): the client's HELLO, then its proof.
    HandshakeMachine hs = HandshakeMachine::server(keys, announced_nids(c->local_nid(), node_nids_),
                                                   speaks_now(opts_.wire, events_));
    check_certificate(*c, &hs);
    using State = HandshakeMachine::State;
    for (int i = 0; i < 2 && hs.state() == State::kRunning; ++i) {
      auto f = co_await read_frame(*c);
      if (!f.ok()) throw std::runtime_error(f.status().message());
      HandshakeMachine::Step st = hs.on_frame(f->hdr, f->payload.span());
      Nid peer = hs.peer_nids().empty() ? Nid() : hs.peer_nids().front();
      if (st.send) co_await write_frame(*c, *st.send, c->local_nid(), peer);
    }
    switch (hs.state()) {
      case State::kEstablished:
        timer.cancel();
        c->set_bulk((hs.client_flags() & kHelloBulk) != 0);
        if (c->tls())
          PFS_LOG_INFO("connection from {} ({}): {}", nids_string(hs.peer_nids()), from,
                       c->tls()->describe());
        established(c, hs.peer_nids(), hs.session());
        co_return;
      case State::kRefusedByPeer:
        PFS_LOG_ERROR("connection from {} ({}) refused by the peer: {}",
                      nids_string(hs.peer_nids()), from, hs.why());
        c->do_close(Status(Code::kRejected, "refused by peer"));
        co_return;
      case State::kRefused:  // its REJECT is sent
        // The wrong key, or no wire version in common.
        PFS_LOG_ERROR_LIMITED(
            "refusing connection from " + nids_string(hs.peer_nids()) + ": " + hs.why(),
            "refusing connection from {} ({}): {}", nids_string(hs.peer_nids()), from, hs.why());
        timer.cancel();
        c->do_close(Status(Code::kRejected, hs.why()));
        co_return;
      case State::kRunning:
      case State::kFailed:
        break;
    }
    throw std::runtime_error(hs.why());
  } catch (const std::exception& e) {
    fail = Status(Code::kProtocol, e.what());
  }
  timer.cancel();
  if (!stopped_)
    PFS_LOG_WARN_LIMITED("handshake with " + from.substr(0, from.rfind(':')) + " failed",
                         "handshake with {} failed: {}", from, fail.message());
  c->do_close(fail);
}

void TcpTransport::Impl::connect(const Nid& local, const Nid& remote, uint16_t port,
                                 ConnectCallback cb, bool bulk) {
  auto io = next_ctx();
  auto c = std::make_shared<TcpConnection>(*this, io, local, true, new_connection_id());
  c->set_bulk(bulk);
  c->set_peer_nids({remote});
  add(c);
  asio::co_spawn(*io, client_connect(c, remote, port, std::move(cb)), asio::detached);
}

asio::awaitable<void> TcpTransport::Impl::client_connect(std::shared_ptr<TcpConnection> c,
                                                         Nid remote, uint16_t port,
                                                         ConnectCallback cb) {
  auto& s = c->socket();
  std::string target = remote.to_string();
  auto timed_out = std::make_shared<bool>(false);
  asio::steady_timer timer(c->io());
  timer.expires_after(opts_.connect_timeout + opts_.handshake_timeout);
  timer.async_wait([c, timed_out](std::error_code ec) {
    if (!ec) {
      *timed_out = true;
      c->abort_socket();
    }
  });
  auto finish = [&](Status st) {
    timer.cancel();
    PFS_LOG_WARN_LIMITED("connect " + c->local_nid().to_string() + " -> " + target + " failed",
                         "connect {} -> {} failed: {}", c->local_nid().to_string(), target,
                         st.to_string());
    c->do_close(st);
    cb(st);
  };

  std::error_code ec;
  s.open(c->local_nid().is_large() ? tcp::v6() : tcp::v4(), ec);
  if (!ec) set_socket_options(s);
  if (!ec) s.bind(endpoint_of(c->local_nid(), 0), ec);
  if (ec) {
    finish(Status(Code::kUnreachable,
                  "cannot bind " + c->local_nid().address_string() + ": " + ec.message(),
                  health_kind_for_errno(ec.value())));
    co_return;
  }
  co_await s.async_connect(endpoint_of(remote, port),
                           asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    if (*timed_out) {
      finish(Status(Code::kUnreachable, "connect to " + target + " timed out",
                    HealthKind::kPeerNiUnreachable));
    } else {
      finish(Status(Code::kUnreachable, "connect to " + target + ": " + ec.message(),
                    health_kind_for_errno(ec.value())));
    }
    co_return;
  }
  set_socket_options(s);

  Status fail;
  try {
    const ClusterKeys keys = opts_.cluster_key.get();
    if (opts_.tls) {
      c->start_tls(opts_.tls, true, keys);
      co_await c->tls_handshake();
    }
    // The handshake (wire/handshake.h's machine): HELLO, the server's proof, ours.
    HandshakeMachine hs = HandshakeMachine::client(keys, announced_nids(c->local_nid(), node_nids_),
                                                   c->bulk() ? kHelloBulk : uint8_t{0},
                                                   speaks_now(opts_.wire, events_));
    check_certificate(*c, &hs);
    using State = HandshakeMachine::State;
    HandshakeMachine::Step st = hs.start();
    for (int i = 0; i < 3 && st.send; ++i) {
      co_await write_frame(*c, *st.send, c->local_nid(), remote);
      if (hs.state() != State::kRunning) break;
      auto r = co_await read_frame(*c);
      if (!r.ok()) throw std::runtime_error(r.status().message());
      st = hs.on_frame(r->hdr, r->payload.span());
    }
    switch (hs.state()) {
      case State::kEstablished:
        timer.cancel();
        if (c->tls()) PFS_LOG_INFO("connection to {}: {}", target, c->tls()->describe());
        established(c, hs.peer_nids(), hs.session());
        cb(ConnectionPtr(c));
        co_return;
      case State::kRefusedByPeer:
        PFS_LOG_ERROR("connection to {} refused by the peer: {}", target, hs.why());
        finish(Status(Code::kRejected, "refused by " + target + ": " + hs.why(),
                      HealthKind::kPeerNiConnectionRejected));
        co_return;
      case State::kRefused:                  // its REJECT is sent
        if (hs.why() != kWrongClusterKey) {  // no wire version in common
          PFS_LOG_ERROR("refusing connection to {}: {}", target, hs.why());
          finish(Status(Code::kRejected, "refusing " + target + ": " + hs.why(),
                        HealthKind::kPeerNiConnectionRejected));
          co_return;
        }
        PFS_LOG_ERROR("refusing connection to {}: it does not hold our cluster key", target);
        finish(Status(Code::kRejected,
                      target + " does not hold the cluster key (wrong cluster key)",
                      HealthKind::kPeerNiConnectionRejected));
        co_return;
      case State::kRunning:
      case State::kFailed:
        break;
    }
    throw std::runtime_error(hs.why().empty() ? "the handshake did not end" : hs.why());
  } catch (const tcp_detail::TlsRefused& e) {
    fail = Status(Code::kRejected,
                  "TLS handshake with " + target + " refused: " + std::string(e.what()) +
                      (opts_.tls->uses_certificates() ? ""
                                                      : " (wrong cluster key, or certificates "
                                                        "at the other end)"),
                  HealthKind::kPeerNiConnectionRejected);
  } catch (const std::exception& e) {
    fail = *timed_out ? Status(Code::kUnreachable, "handshake with " + target + " timed out",
                               HealthKind::kPeerNiUnreachable)
                      : Status(Code::kUnreachable, "handshake with " + target + ": " + e.what(),
                               HealthKind::kPeerNiConnectError);
  }
  finish(fail);
}

void TcpTransport::Impl::stop() {
  if (stopped_.exchange(true)) return;
  std::vector<std::shared_ptr<TcpConnection>> conns;
  std::vector<std::shared_ptr<tcp::acceptor>> accs;
  {
    MutexLock lk(mu_);
    for (auto& [id, c] : conns_) conns.push_back(c);
    accs.swap(acceptors_);
  }
  for (auto& a : accs) {
    asio::post(*ctx_[0], [a] {
      std::error_code ec;
      a->close(ec);
    });
  }
  for (auto& c : conns) c->close(Status(Code::kCancelled, "transport stopped"));
  conns.clear();
  // Without work guards each loop returns once its closes and cancelled operations have
  // run; a loop still busy after the bound is stopped.
  for (auto& g : guards_) g.reset();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (size_t i = 0; i < threads_.size(); ++i) {
    if (exit_futures_[i].wait_until(deadline) != std::future_status::ready) ctx_[i]->stop();
    if (threads_[i].joinable()) threads_[i].join();
  }
  zc_graveyard_.finish();
  MutexLock lk(mu_);
  conns_.clear();
}

void TcpTransport::Impl::zc_retire(int fd, std::shared_ptr<tcp_detail::ZeroCopySends> z) {
  zc_graveyard_.retire(fd, std::move(z));
  if (zc_graveyard_.kept() > 0) arm_zc_sweep();
}

void TcpTransport::Impl::arm_zc_sweep() {
  // One sweep armed at a time; none once stopping (a timer armed then ends within 20 ms,
  // and stop() finishes the graveyard after the threads).
  if (stopped_.load() || zc_sweep_armed_.exchange(true)) return;
  auto timer = std::make_shared<asio::steady_timer>(*ctx_[0], std::chrono::milliseconds(20));
  timer->async_wait([this, timer](std::error_code) {
    zc_sweep_armed_.store(false);
    if (zc_graveyard_.sweep() > 0) arm_zc_sweep();
  });
}

ZeroCopyStats TcpTransport::Impl::zero_copy_stats() {
  ZeroCopyStats s = zc_graveyard_.stats();
  MutexLock lk(mu_);
  for (auto& [id, c] : conns_) s.add(c->zero_copy_stats());
  return s;
}

TcpTransport::TcpTransport(TransportOptions opts, std::vector<Nid> node_nids, Clock& clock,
                           TransportEvents& events)
    : impl_(std::make_unique<Impl>(std::move(opts), std::move(node_nids), clock, events)) {}
TcpTransport::~TcpTransport() { impl_->stop(); }
Status TcpTransport::listen(const Nid& local, uint16_t port) { return impl_->listen(local, port); }
ZeroCopyStats TcpTransport::zero_copy_stats() const { return impl_->zero_copy_stats(); }
void TcpTransport::connect(const Nid& local, const Nid& remote, uint16_t port, ConnectCallback cb) {
  impl_->connect(local, remote, port, std::move(cb), false);
}
void TcpTransport::connect_bulk(const Nid& local, const Nid& remote, uint16_t port,
                                ConnectCallback cb) {
  impl_->connect(local, remote, port, std::move(cb), true);
}
void TcpTransport::post(std::function<void()> fn) { asio::post(*impl_->ctx_[0], std::move(fn)); }
void TcpTransport::set_socket_buffers(int tx_bytes, int rx_bytes) {
  impl_->tx_buffer_.store(std::max(0, tx_bytes));
  impl_->rx_buffer_.store(std::max(0, rx_bytes));
}
void TcpTransport::stop() { impl_->stop(); }

}  // namespace pfsnet
