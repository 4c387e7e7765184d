// The inside of Net (LocalNi and Path are in net.h, where the lock requirements of Net's
// functions name their locks), shared by its parts (net.cc: the send core; net_events.cc: transport
// events, deadlines, link state, recovery; net_info.cc: snapshots; peer_table.cc). Not
// installed.
//
// Locks, in the order they may be taken (never the other way):
//   PeerTable's shared mutex (readers on every send; writers when a peer NI or path is
//     created, and for discovery)
//   LocalNi::mu -- the NI's send lock: its credits and blocked paths, and every path and
//     connection state of the NI (queues, connections, windows). No lock is shared by the
//     peers of different NIs, and none by every peer: a send takes the table's lock
//     shared and its NI's lock.
//   ConnState::tx_mu, Health's, FaultInjector's, Net::recovery_mu_,
//     Net::dead_mu_, Net::routes_mu_, RouterState::mu (leaves: nothing is taken under
//     them)
// Peer NIs, peers and paths are never freed before the Net, so their pointers stay valid
// once the table's lock is dropped.
#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <vector>

#include "base/free_list.h"
#include "base/mutex.h"
#include "net/net.h"

namespace pfsnet {

struct Net::PeerNi {
  PeerNi(Nid n, TimePoint now, int64_t wall_ms) : nid(n), health(now, wall_ms) {}
  const Nid nid;
  Health health;
  std::atomic<bool> dead{false};  // declared dead by the MGS (every NI of the peer)
  NetCounters counters;
  std::atomic<int64_t> min_credits{0};  // low-water mark of its connections' windows
  // Guarded by Net::recovery_mu_ (not named: a PeerNi does not point to its Net).
  bool recovering = false;  // in Net::recovering_

 private:
  friend class PeerTable;
  // PeerTable's (see there).
  Peer* peer = nullptr;
  std::vector<Path*> paths;
};

// PeerTable's (see there).
struct Net::Peer {
 private:
  friend class PeerTable;
  std::vector<PeerNi*> nis;
  std::vector<Nid> announced;  // every NID the peer announced, in its order
};

// Net's own state of one connection (the transport carries none of it).
// Held by its connection (Connection::upper) and by what is in flight on it.
struct Net::ConnState {
  std::atomic<bool> closed{false};  // on_closed took it (or the Net shut down)
  LocalNi* ni = nullptr;
  Path* path = nullptr;
  std::weak_ptr<Connection> conn;
  uint64_t conn_id = 0;
  std::atomic<uint32_t> high_water{1};         // credits owed before an explicit credit frame
  int64_t tx_credits GUARDED_BY(ni->mu) = 0;   // this connection's window left
  int64_t outstanding GUARDED_BY(ni->mu) = 0;  // messages sent and not yet credited back
  // The receive window the peer grants (kFeatureWindow; 0: none): the window is this
  // node's peer_credits or that, whichever is lower.
  int64_t peer_window GUARDED_BY(ni->mu) = 0;
  int64_t window(int64_t peer_credits) const REQUIRES(ni->mu) {
    return peer_window ? std::min(peer_credits, peer_window) : peer_credits;
  }
  // Messages handed to the connection and not completed yet (intrusive list).
  Mutex tx_mu;
  TxMsg* head GUARDED_BY(tx_mu) = nullptr;
};

struct Net::TxMsg final : TxCompletion {
  Net* net = nullptr;
  Path* path = nullptr;
  std::unique_ptr<OutFrame> frame;
  TimePoint deadline;
  TxCompletion* user = nullptr;
  uint64_t bytes = 0;
  // While handed to a connection (the links guarded by cs->tx_mu); keeps the state alive
  // until the message completes, even after the connection closed.
  std::shared_ptr<ConnState> cs;
  TxMsg* prev = nullptr;
  TxMsg* next = nullptr;
  bool expired = false;
  bool routed = false;  // to a gateway, for a NID on another network
  Nid route_dst;        // routed: that NID
  uint64_t conn_id = 0;

  void on_tx_done(const Status& s, const TxTimes& t) override;
  PFSNET_THREAD_FREE_LIST(TxMsg)
};

// A frame a router forwards (net_router.cc).
struct Net::Forward final : TxCompletion {
  Net* net = nullptr;
  PeerNi* from = nullptr;  // the peer NI it came from (whose router credit it holds)
  RouterPool pool = RouterPool::kTiny;
  RxCredit credit;  // of the hop it came on: returned once it is written on
  std::unique_ptr<OutFrame> frame;
  uint64_t bytes = 0;

  void on_tx_done(const Status& s, const TxTimes& t) override;
};

// A router's state (lnet.routing): its buffers and its counters.
struct Net::RouterState {
  RouterState(std::array<int64_t, kRouterPools> sizes, int64_t peer_credits)
      : buffers(sizes, peer_credits) {}
  mutable Mutex mu;  // a leaf: nothing is taken under it
  RouterBuffers<PeerNi*, std::unique_ptr<Forward>> buffers GUARDED_BY(mu);
  std::atomic<uint64_t> forwarded{0}, forwarded_bytes{0};
  std::atomic<uint64_t> no_route{0}, failed{0}, loop{0}, corrupt{0}, no_window{0};
  // Bytes of the frames it holds to forward (in its buffers or waiting for one), and the
  // most it has held.
  std::atomic<int64_t> held_bytes{0}, held_bytes_max{0};
};

// Whether NIs `a` and `b` can form a path: the same network, and -- an @tcp network may
// hold IPv4 and IPv6 NIs alike, as LNet's does -- the same address family.
inline bool same_net(const Nid& a, const Nid& b) {
  return a.type == b.type && a.net_num == b.net_num && a.addr_len == b.addr_len;
}

inline bool is_local_kind(HealthKind k) {
  return k == HealthKind::kLocalNiDown || k == HealthKind::kLocalNiUp ||
         k == HealthKind::kLocalNiSendTimeout;
}

}  // namespace pfsnet
