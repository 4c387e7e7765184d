// EmulatingTransport: a Transport decorator that holds frames before the transport under
// it writes them -- link emulation and fault delays, for any transport (TCP sockets, the
// in-memory one, a future RDMA one) without any of them knowing.
//
//   Link emulation: frames from local NI L to peer NI P go through the LinkPipe of the
//     first EmulationRule matching (L, P) -- one pipe per pair: they leave at the rule's
//     rate and arrive its delay later. Their write times are the emulated link's: written
//     when they entered the pipe, done when their last byte left it.
//   A shared link (rule.shared) is the local NI's own: every peer's frames go through one
//     pipe out, and frames received go up through one pipe in, at its rate (no delay: the
//     sending end has that), in the order they came.
//   Fault delays: `hold` (when set) names, per frame, a time before which it is not
//     written (Net's delay rules).
//
// A held frame carries the credits owed when it entered the hold; credits released while
// it waits ride on a later frame, as on a real WAN. The decorator keeps the credit count
// of its connections, so every frame it hands down has hdr.credits set (credits_set).
// Frames that need no hold go straight down on the caller's thread.
//
// Threads: as Transport. Held frames are released from `timers` (its thread, or MemHub's
// pump); events from the inner transport are passed up on the inner transport's threads.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "transport/link_pipe.h"
#include "transport/timer_queue.h"
#include "transport/transport.h"

namespace pfsnet {

class EmulatingTransport final : public Transport, private TransportEvents {
 public:
  // When a frame on `c` may be written; TimePoint{} = at once.
  using HoldFn = std::function<TimePoint(const Connection& c, const OutFrame& f)>;
  using InnerFactory = std::function<std::unique_ptr<Transport>(TransportEvents&)>;

  // Builds the inner transport with `make_inner`, this decorator receiving its events.
  // `events` must outlive the transport; `clock` and `timers` its connections too (a
  // holder may keep one past the transport).
  EmulatingTransport(std::vector<EmulationRule> rules, HoldFn hold, Clock& clock,
                     TimerQueue& timers, TransportEvents& events, const InnerFactory& make_inner);
  ~EmulatingTransport() override;

  Status listen(const Nid& local, uint16_t port) override;
  void connect(const Nid& local, const Nid& remote, uint16_t port, ConnectCallback cb) override;
  void connect_bulk(const Nid& local, const Nid& remote, uint16_t port,
                    ConnectCallback cb) override;
  bool has_bulk_connections(const Nid& local) const override;
  void post(std::function<void()> fn) override;
  bool progress() override;
  void set_socket_buffers(int tx_bytes, int rx_bytes) override;
  void stop() override;

 private:
  class Conn;

  // TransportEvents of the inner transport.
  void on_connected(const ConnectionPtr& c) override;
  void on_frame(Connection& c, InFrame&& f) override;
  std::optional<Buffer> bulk_sink(Connection& c, const FrameHeader& h) override;
  void on_closed(Connection& c, const Status& why) override;
  void on_local_ni_down(const Nid& local, const Status& why) override {
    events_.on_local_ni_down(local, why);
  }
  uint16_t min_peer_level() const override { return events_.min_peer_level(); }
  uint32_t rx_window() const override { return events_.rx_window(); }

  // The outer connection of `inner` (its Connection::upper, set in on_connected).
  static Conn* outer_of(const Connection& inner);
  // `cb` told of the outer connection of what the inner transport connected.
  ConnectCallback outer_callback(ConnectCallback cb);

  std::vector<EmulationRule> rules_;
  HoldFn hold_;
  Clock& clock_;
  TimerQueue& timers_;
  TransportEvents& events_;
  Mutex mu_;
  // Pipes by (local NI, peer NI); a shared link's by (local NI, kSharedOut / kSharedIn).
  // (No NID has an empty address: these two name no peer.)
  static Nid shared_key(uint16_t which) {
    Nid n;
    n.addr_len = 0;
    n.net_num = which;
    return n;
  }
  std::map<std::pair<Nid, Nid>, std::shared_ptr<LinkPipe>> pipes_ GUARDED_BY(mu_);
  mutable Mutex conns_mu_;
  // inner -> outer: owns the outer connections (not read per frame: Connection::upper is).
  std::unordered_map<const Connection*, std::shared_ptr<Conn>> conns_ GUARDED_BY(conns_mu_);
  std::unique_ptr<Transport> inner_;
};

}  // namespace pfsnet
