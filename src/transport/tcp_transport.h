// TcpTransport: the TCP LND. Standalone asio with a small fixed number of I/O threads;
// connections are authenticated with the cluster key (wire/handshake.h), use
// TCP_NODELAY and the kernel's autotuned socket buffers unless sizes are set
// (lnet.tx_buffer_size, rx_buffer_size), and report per-frame timings.
//
// Write path: a sender writes directly on its own thread when the connection is idle
// (no thread hop); otherwise frames queue and the I/O thread writes them in batches.
// Replies sent while the I/O thread is dispatching received frames are batched into one
// writev at the end of the read.
// Threads: public methods are thread-safe except stop(), which must not run on an I/O
// thread.
#pragma once

#include <pfsnet/clock.h>

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace pfsnet {

// Maps a socket or connect error (errno value) to its LNet health kind.
HealthKind health_kind_for_errno(int err);

class TcpTransport final : public Transport {
 public:
  // `node_nids`: every NID of this node, announced in handshakes. `clock` and `events`
  // must outlive the transport.
  TcpTransport(TransportOptions opts, std::vector<Nid> node_nids, Clock& clock,
               TransportEvents& events);
  ~TcpTransport() override;

  Status listen(const Nid& local, uint16_t port) override;
  void connect(const Nid& local, const Nid& remote, uint16_t port, ConnectCallback cb) override;
  void connect_bulk(const Nid& local, const Nid& remote, uint16_t port,
                    ConnectCallback cb) override;
  bool has_bulk_connections(const Nid&) const override { return true; }
  void post(std::function<void()> fn) override;
  void set_socket_buffers(int tx_bytes, int rx_bytes) override;
  void stop() override;
  // Zero-copy sends so far (TransportOptions::zc_min_payload), over open and closed
  // connections.
  ZeroCopyStats zero_copy_stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pfsnet
