// What the Net's tests over the in-memory transport share: a receiver that logs what it is
// handed, a completion that logs results, and a node (a Net on some NIDs, started, its
// receiver the log). For tests only; not installed.
#pragma once

#include <utility>
#include <vector>

#include "net/net.h"
#include "transport/mem_transport.h"

namespace pfsnet::net_testing {

struct Received {
  Nid from;
  InFrame frame;
  RxCredit credit;
};

class RxLog : public NetRx {
 public:
  void on_message(const Nid& from, InFrame&& f, RxCredit credit) override {
    got.push_back(Received{from, std::move(f), std::move(credit)});
  }
  void on_connection_closed(uint64_t, const Nid& peer, const Status&) override {
    disconnected.push_back(peer);
  }
  void on_corrupt(const Nid& from, const FrameHeader& hdr, RxCredit credit) override {
    corrupt.push_back(Received{from, InFrame{hdr, {}, {}, {}}, std::move(credit)});
  }
  std::vector<Received> got, corrupt;
  std::vector<Nid> disconnected;
};

struct TxLog : TxCompletion {
  void on_tx_done(const Status& s, const TxTimes&) override { results.push_back(s); }
  std::vector<Status> results;
};

// A Net on `nids` over `hub`, listening, handing what it receives to `rx`.
struct MemNode {
  MemNode(MemHub& hub, Clock& clock, std::vector<Nid> nids, NetOptions o)
      : net(std::move(o), nids, clock, [&hub, &clock, nids](TransportEvents& ev) {
          TransportOptions to;
          to.cluster_key = "0123456789abcdef";
          return std::make_unique<MemTransport>(hub, to, nids, clock, ev);
        }) {
    net.set_rx(&rx);
    start_status = net.start();
  }
  RxLog rx;
  Net net;
  Status start_status;
};

}  // namespace pfsnet::net_testing
