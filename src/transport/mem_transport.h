// MemTransport: an in-memory transport with the same interface as TcpTransport, for unit
// tests and large simulations. Every node's MemTransport attaches to one MemHub; nothing
// happens until the hub is pumped, so a test decides exactly when frames move.
//
// Threads: send/close/post/connect may be called from any thread; every callback runs
// on the thread that calls MemHub::pump().
#pragma once

#include <pfsnet/clock.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "base/mutex.h"
#include "transport/timer_queue.h"
#include "transport/transport.h"

namespace pfsnet {

class MemTransport;

class MemHub final : public TimerQueue {
 public:
  // Runs queued events (frame deliveries, completions, connects) until none is left or
  // `max_events` ran. Returns how many ran.
  size_t pump(size_t max_events = 1'000'000);
  size_t pending() const;
  void enqueue(std::function<void()> fn);
  // While stalled, frames handed to connections stay in flight (neither delivered nor
  // completed), as on a link that went silent; unstalling releases them in order.
  void set_stalled(bool stalled);
  // The same for the link between NIDs `a` and `b` alone (both ways): its frames stay in
  // flight and connects between them wait, as behind a pulled cable or a firewall that
  // drops everything; healing releases them in order (TCP's retransmissions getting
  // through). Other links are untouched.
  void set_cut(const Nid& a, const Nid& b, bool cut);
  // A frame delivery from `from` to `to`: held while stalled or while their link is cut.
  void enqueue_frame(const Nid& from, const Nid& to, std::function<void()> fn,
                     const void* owner = nullptr);
  // Connection `owner` closed: the frames it sent that a cut holds run now -- they find it
  // closed and fail, never delivered -- as a closed socket fails what it had not sent
  // (without it, what a connection closed for a passed deadline held would wait for the
  // heal, which TCP never makes a sender do).
  void release_held_of(const void* owner);
  // Frames from `from` to `to` arrive `one_way` after they were sent (in order; zero: at
  // once): a link's delay, seen by TCP's round trip and the RPC statistics alike.
  void set_delay(const Nid& from, const Nid& to, Duration one_way);
  bool delayed(const Nid& from, const Nid& to) const;
  // Connects to `nid` fail as a kernel's do when no host answers ARP or there is no route:
  // EHOSTUNREACH, PEER_NI_UNREACHABLE (not refused: PEER_NI_CONNECT_ERROR).
  void set_no_host(const Nid& nid, bool no_host);
  // A connect from `from` to `to`: held while their link is cut.
  void enqueue_connect(const Nid& from, const Nid& to, std::function<void()> fn);
  // Drops what `from` sent that a cut holds (its frames, its connects): before the
  // transport of `from` goes, as a process that dies takes its unsent data with it.
  void drop_held_from(const Nid& from);
  // TimerQueue: `fn` runs from pump() once the transports' clock has passed `t`.
  void run_at(TimePoint t, std::function<void()> fn) override;
  void set_clock(Clock* c) {
    MutexLock lk(mu_);
    clock_ = c;
  }

 private:
  friend class MemTransport;
  mutable Mutex mu_;
  std::deque<std::function<void()>> events_;
  std::deque<std::function<void()>> held_;
  static std::pair<Nid, Nid> link_of(const Nid& a, const Nid& b);
  bool is_cut(const Nid& a, const Nid& b) const REQUIRES(mu_);
  std::set<std::pair<Nid, Nid>> cut_ GUARDED_BY(mu_);
  struct CutHeld {
    std::pair<Nid, Nid> link;
    Nid from;
    std::function<void()> fn;
    const void* owner = nullptr;  // the connection that sent it (frames only)
  };
  std::deque<CutHeld> cut_held_ GUARDED_BY(mu_);
  // Per direction (from, to): its delay, and when its last frame arrives (none overtakes).
  std::map<std::pair<Nid, Nid>, Duration> delay_ GUARDED_BY(mu_);
  std::map<std::pair<Nid, Nid>, TimePoint> last_arrival_ GUARDED_BY(mu_);
  std::multimap<TimePoint, std::function<void()>> timed_;
  Clock* clock_ GUARDED_BY(mu_) = nullptr;
  bool stalled_ GUARDED_BY(mu_) = false;
  std::map<Nid, MemTransport*> listeners_ GUARDED_BY(mu_);  // NID -> transport
  std::set<Nid> no_host_ GUARDED_BY(mu_);                   // set_no_host
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
};

class MemTransport final : public Transport {
 public:
  MemTransport(MemHub& hub, TransportOptions opts, std::vector<Nid> node_nids, Clock& clock,
               TransportEvents& events);
  ~MemTransport() override;

  Status listen(const Nid& local, uint16_t port) override;
  // Connects; fails with PEER_NI_CONNECT_ERROR when nobody listens on `remote` and with
  // PEER_NI_CONNECTION_REJECTED when the cluster keys differ.
  void connect(const Nid& local, const Nid& remote, uint16_t port, ConnectCallback cb) override;
  // A bulk connection: Connection::bulk() at both ends, as TCP's.
  void connect_bulk(const Nid& local, const Nid& remote, uint16_t port,
                    ConnectCallback cb) override;
  bool has_bulk_connections(const Nid&) const override { return true; }
  void post(std::function<void()> fn) override { hub_.enqueue(std::move(fn)); }
  void stop() override;

  class Conn;

 private:
  void open(const Nid& local, const Nid& remote, bool bulk, ConnectCallback cb);

  MemHub& hub_;
  TransportOptions opts_;
  std::vector<Nid> node_nids_;
  Clock& clock_;
  TransportEvents& events_;
  std::vector<Nid> listening_;
  Mutex mu_;
  std::vector<std::weak_ptr<Conn>> conns_ GUARDED_BY(mu_);
};

}  // namespace pfsnet
