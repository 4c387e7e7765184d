// LndSwitch: one Transport over the LNDs of a node, as LNet runs one LND per net type.
// Each local NI's listener and connections go to the transport that carries its net:
// TcpTransport for the @tcp NIs, a FabricTransport (libfabric: RDMA) per @o2ib NI. The
// connections and events are the inner transports' own, passed up unchanged.
//
// make_lnds builds a node's set from its config; check_lnds says, before anything
// starts, whether every @o2ib net's libfabric provider is there -- a node never carries an
// @o2ib NI over sockets instead.
//
// Threads: as Transport. The routing is fixed at construction.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/config.h>

#include <memory>
#include <vector>

#include "transport/emulating_transport.h"
#include "transport/transport.h"

namespace pfsnet {

class LndSwitch final : public Transport {
 public:
  struct Lnd {
    std::vector<Nid> nis;  // the local NIs it carries
    std::unique_ptr<Transport> transport;
  };
  explicit LndSwitch(std::vector<Lnd> lnds);
  ~LndSwitch() override;

  // A local NI no LND carries is an error (kInvalidArgument) naming it.
  Status listen(const Nid& local, uint16_t port) override;
  void connect(const Nid& local, const Nid& remote, uint16_t port, ConnectCallback cb) override;
  void connect_bulk(const Nid& local, const Nid& remote, uint16_t port,
                    ConnectCallback cb) override;
  bool has_bulk_connections(const Nid& local) const override;
  // On the first LND's I/O thread.
  void post(std::function<void()> fn) override;
  bool progress() override;
  void set_socket_buffers(int tx_bytes, int rx_bytes) override;
  void stop() override;

 private:
  Transport* lnd_of(const Nid& local) const;
  std::vector<Lnd> lnds_;
};

// Whether each @o2ib net of `cfg` can run: its libfabric provider (and domain) offers
// MSG endpoints with RMA on the NI's address. The error names the net, libfabric, the
// provider and libfabric's answer.
Status check_lnds(const Config& cfg);

// The LNDs of a node with `cfg`'s nets (`nids`, announced in every handshake): one
// TcpTransport for the @tcp NIs and a FabricTransport per @o2ib NI, with its [[net]]'s
// provider, domain and queue depths. A node of @tcp NIs only gets the TcpTransport alone.
// `clock` and `events` must outlive it.
std::unique_ptr<Transport> make_lnds(const Config& cfg, const TransportOptions& opts,
                                     const std::vector<Nid>& nids, Clock& clock,
                                     TransportEvents& events);

// A node's whole stack: its LNDs (make_lnds) under the decorator that holds frames
// (EmulatingTransport: the config's [[emulation]] links, and `hold`, Net's fault delays).
// `clock`, `timers` and `events` must outlive it.
std::unique_ptr<Transport> make_node_transport(const Config& cfg, const TransportOptions& opts,
                                               const std::vector<Nid>& nids, Clock& clock,
                                               TimerQueue& timers, EmulatingTransport::HoldFn hold,
                                               TransportEvents& events);

}  // namespace pfsnet
