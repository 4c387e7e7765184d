// The inside of Net, shared by its parts (net.cc: the send core; net_events.cc: transport
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
//   ConnState::tx_mu, Health's, FaultInjector's, Net::conns_mu_, Net::recovery_mu_,
//     Net::dead_mu_ (leaves: nothing is taken under them)
// Peer NIs, peers and paths are never freed before the Net, so their pointers stay valid
// once the table's lock is dropped.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "net/net.h"

namespace pfsnet {

struct Net::LocalNi {
  LocalNi(Nid n, uint16_t p, TimePoint now, int64_t wall_ms)
      : nid(n), port(p), health(now, wall_ms) {}
  const Nid nid;
  const uint16_t port;
  Health health;
  std::atomic<bool> up{true};
  NetCounters counters;
  std::vector<Path*> paths;  // guarded by the PeerTable's lock (appended as paths appear)

  std::mutex mu;              // the NI's send lock; guards the rest and its paths' state
  int64_t tx_credits = 0;     // NI credits left
  int64_t min_credits = 0;    // low-water mark
  std::deque<Path*> blocked;  // paths waiting for an NI credit
};

struct Net::PeerNi {
  PeerNi(Nid n, TimePoint now, int64_t wall_ms) : nid(n), health(now, wall_ms) {}
  const Nid nid;
  Health health;
  std::atomic<bool> dead{false};  // declared dead by the MGS (every NI of the peer)
  NetCounters counters;
  std::atomic<int64_t> min_credits{0};  // low-water mark of its connections' windows
  // Guarded by the PeerTable's lock.
  Peer* peer = nullptr;
  std::vector<Path*> paths;
  // Guarded by Net::recovery_mu_.
  bool recovering = false;  // in Net::recovering_
};

struct Net::Peer {
  std::vector<PeerNi*> nis;    // guarded by the PeerTable's lock
  std::vector<Nid> announced;  // every NID the peer announced, in its order (same lock)
};

struct Net::Path {
  Path(LocalNi* n, PeerNi* p) : ni(n), pni(p) {}
  LocalNi* const ni;
  PeerNi* const pni;
  std::atomic<uint64_t> last_used{0};  // round-robin: the path used longest ago goes first
  // Guarded by ni->mu.
  ConnectionPtr tx_conn;
  std::shared_ptr<ConnState> tx_state;
  std::vector<ConnectionPtr> conns;
  bool connecting = false;
  bool blocked_on_ni = false;
  std::deque<TxMsg*> queue;
};

// Net's own state of one connection (the transport carries none of it).
struct Net::ConnState {
  LocalNi* ni = nullptr;
  Path* path = nullptr;
  std::weak_ptr<Connection> conn;
  uint64_t conn_id = 0;
  std::atomic<uint32_t> high_water{1};  // credits owed before an explicit credit frame
  // Guarded by ni->mu.
  int64_t tx_credits = 0;   // this connection's window left
  int64_t outstanding = 0;  // messages sent and not yet credited back
  // Messages handed to the connection and not completed yet (intrusive list).
  std::mutex tx_mu;
  TxMsg* head = nullptr;
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
  uint64_t conn_id = 0;

  void on_tx_done(const Status& s, const TxTimes& t) override;
};

inline bool same_net(const Nid& a, const Nid& b) {
  return a.type == b.type && a.net_num == b.net_num;
}

inline bool is_local_kind(HealthKind k) {
  return k == HealthKind::kLocalNiDown || k == HealthKind::kLocalNiUp ||
         k == HealthKind::kLocalNiSendTimeout;
}

}  // namespace pfsnet
