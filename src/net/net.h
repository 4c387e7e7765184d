// Net: LNet's middle layer. Local NIs (one per [[net]]), peers with all their NIs
// (multi-rail), credit-based flow control, health, transmit deadlines and fault injection
// over a Transport.
//
// Multi-rail: a peer is a node; it has one peer NI per NID it announced in the handshake.
// A message addressed to any NID of a peer travels on a path (local NI, peer NI) on the
// same network, chosen per message: never a local NI that is down; the healthiest local
// NI, then the healthiest peer NI (health less the penalty of a degraded NI: see
// set_degraded), then RDMA (@o2ib) before sockets, then the most
// credits, then round-robin. A node with both kinds of NI thus uses RDMA while that path
// is healthy, TCP when it fails, and RDMA again once it has recovered.
//
// Credits (the LNET WAN study, and LNet's o2iblnd): every connection has a window of
// `peer_credits` messages (requests and replies; control frames are free). The receiver
// returns a credit when the layer above has consumed the message (RxCredit is released),
// piggybacked on its next frame or, when `credit_high_water` are owed and nothing is going
// back, in an explicit credit frame. Each local NI has `credits` for all its peers
// together; an NI credit is held from send until the peer returns the message's credit.
//
// Integrity: with `checksum` (lnet.checksum) every request and reply leaves sealed with the
// CRC-32C of its payload and bulk (wire/data_crc.h); a frame that arrives sealed is checked
// before anything else looks at it, and one that fails goes up as NetRx::on_corrupt --
// never as a message -- counted and blamed on the peer NI as PEER_NI_CORRUPT.
//
// Health (LNet health, as current LNet): every local NI and peer NI has a health value, 1000
// when healthy. A failure lowers the NI it is blamed on by health_sensitivity (local kinds:
// the local NI; peer kinds, remote timeouts included: the peer NI); a
// success raises it by as much. An NI below 1000 is in recovery: recovery_due() names
// it for a recovery ping at once, then after recovery_interval x 2^n (n = pings since
// its last success), at most 900 s apart, until it is healthy again.
//
// Deadlines: every send carries a transmit deadline. expire(now) fails a message still
// queued here past it as a local timeout (it never left the queue), blamed on what it
// waited for: the local NI's credits (LOCAL_NI_SEND_TIMEOUT, the local NI) or the peer --
// its peer_credits not returned, or no connection yet (PEER_NI_UNREACHABLE, the peer NI);
// a hung server holding our credits thus never lowers a healthy local NI. It closes the connection
// of a message handed to the transport and not completed by then (a remote timeout,
// PEER_NI_UNREACHABLE). Waiting for a reply is the RPC layer's part: it reports a reply that did
// not come with report_remote_timeout(). Resending is the RPC layer's part too; Net only classifies
// and reports.
//
// In parts: the peer table and discovery (peer_table.h), health (health.h: pure logic on
// the clock), the fault injector (fault_injector.h) and the send/receive core here. Net
// keeps its own state of each connection; the transport returns credits (Connection::
// return_credit). net_internal.h states the locks: no lock is shared by all peers on the
// send path (the peer table's lock is taken shared, then the NI's own).
//
// Threads: every public function may be called from any thread; NetRx callbacks run on
// the I/O thread of the connection; TxCompletion callbacks on the sending thread, the I/O
// thread or the thread of expire()/set_link_state()/shutdown().
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/config.h>
#include <pfsnet/ni_info.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "net/fault_injector.h"
#include "net/health.h"
#include "net/router_buffers.h"
#include "net/routes.h"
#include "net/send_wait.h"
#include "net/slowness.h"
#include "transport/transport.h"

namespace pfsnet {

// Holds one receive credit of a connection; returns it when destroyed or released.
// Move-only. Release it as soon as the message's buffers are no longer needed.
class RxCredit {
 public:
  RxCredit() = default;
  // Returns through Connection::return_credit(c, high_water).
  RxCredit(std::weak_ptr<Connection> c, uint32_t high_water)
      : conn_(std::move(c)), high_water_(high_water) {}
  RxCredit(RxCredit&& o) noexcept { *this = std::move(o); }
  RxCredit& operator=(RxCredit&& o) noexcept {
    release();
    conn_ = std::move(o.conn_);
    high_water_ = o.high_water_;
    o.conn_.reset();
    return *this;
  }
  ~RxCredit() { release(); }
  void release();

 private:
  std::weak_ptr<Connection> conn_;
  uint32_t high_water_ = 1;
};

// The upper layer (rpc) implements this.
class NetRx {
 public:
  virtual ~NetRx() = default;
  // A request or reply arrived from `from` (the sending peer NI). I/O thread.
  virtual void on_message(const Nid& from, InFrame&& f, RxCredit credit) = 0;
  // A message from `from` whose data failed its checksum (kFlagDataCrc): only its header,
  // checked by its own CRC, is left. Net counted it and blamed the peer NI
  // (PEER_NI_CORRUPT); the layer above has it sent again. I/O thread.
  virtual void on_corrupt(const Nid& from, const FrameHeader& hdr, RxCredit credit) = 0;
  // Connection `conn_id` (to `peer_nid`) closed; messages written on it (TxTimes::conn_id)
  // will get no reply.
  virtual void on_connection_closed(uint64_t conn_id, const Nid& peer_nid, const Status& why) = 0;
  // Memory to receive the bulk of reply `hdr` into, lent by its caller
  // (TransportEvents::bulk_sink); `cancel` closes the connection receiving it (for a caller
  // that gives up waiting: its memory comes back once the connection let it go). I/O
  // thread; default: none.
  virtual std::optional<Buffer> reply_memory(const FrameHeader& hdr, std::function<void()> cancel) {
    (void)hdr;
    (void)cancel;
    return std::nullopt;
  }
};

// Counters of an NI or a peer NI. Atomic: updated from several threads.
struct NetCounters {
  std::atomic<uint64_t> send_count{0}, send_bytes{0}, recv_count{0}, recv_bytes{0};
  std::atomic<uint64_t> local_timeouts{0}, remote_timeouts{0}, drops{0}, resends{0};
  std::atomic<uint64_t> faults{0};  // messages dropped or delayed by fault injection
  // Sends that found their connection's window or the NI's credits exhausted and queued
  // (the sign that peer_credits or credits limit throughput).
  std::atomic<uint64_t> credit_waits{0};
  // Connects started and failed; sends that queued for a backed-off reconnect (those it
  // would come too late for fail at once, counted as PEER_NI_CONNECT_ERROR).
  std::atomic<uint64_t> connects{0}, connect_failures{0}, reconnect_waits{0};
  std::array<std::atomic<uint64_t>, kNumHealthKinds> errors{};
  void count_error(HealthKind k) {
    if (k != HealthKind::kNone) errors[static_cast<size_t>(k)].fetch_add(1);
  }
};

// A message this large (frame header, payload and bulk) goes on a bulk connection of its
// path when it has them (lnet.conns_per_peer > 1); smaller ones keep the first connection.
inline constexpr uint64_t kBulkConnMinBytes = 64 * 1024;

struct NetOptions {
  int64_t credits = 64;
  int64_t peer_credits = 8;
  int64_t health_sensitivity = 100;
  Duration transaction_timeout = std::chrono::seconds(50);
  Duration recovery_interval = std::chrono::seconds(1);
  // Reconnect backoff (lnet.min_reconnect_ms, lnet.max_reconnect_ms).
  Duration min_reconnect = std::chrono::seconds(1);
  Duration max_reconnect = std::chrono::seconds(60);
  bool checksum = true;           // lnet.checksum: seal requests and replies (wire/data_crc.h)
  int64_t conns_per_peer = 1;     // lnet.conns_per_peer: bulk connections per TCP path
  std::map<Nid, uint16_t> ports;  // local NID -> port; peers use the same port
  // Routing (net_router.cc): the routes this node sends by; whether it forwards for others
  // (lnet.routing) and with what buffers; how long a forwarded frame may wait to go on
  // (LNet's LND timeout: transaction_timeout / (retry_count + 1)).
  std::vector<RouteConfig> routes;
  bool routing = false;
  std::array<int64_t, kRouterPools> router_buffers{2048, 512, 64};
  int64_t peer_buffer_credits = 0;  // 0: peer_credits
  Duration forward_timeout = std::chrono::seconds(50) / 3;
  // Router pings (rpc/router_pinger.h): how often each gateway is asked, how long it has
  // to answer, and whether a gateway whose NI on a route's network is down is left for that
  // route (LNet's avoid_asym_router_failure).
  Duration router_ping_interval = std::chrono::seconds(10);
  Duration router_ping_timeout = std::chrono::seconds(5);
  bool avoid_asym_router_failure = true;

  static NetOptions from(const Config& cfg);
  // Credits owed before an explicit credit frame is sent: half the window, at least 1,
  // at most peer_credits - 1 (so a sender always has a credit while none is sent).
  uint32_t credit_high_water() const;
};

// One path's traffic and, when asked for, its TCP totals: what the health monitor samples
// every second.
struct PathSample {
  Nid local, peer;
  uint64_t bytes = 0;  // sent and received on the path since it was created
  bool tcp = false;    // tcp_total was read (a TCP path that has had a connection)
  TcpTotals tcp_total;
  // The kernel's smoothed and lowest RTT of its busiest open connection (0: none open).
  double srtt_ms = 0, min_rtt_ms = 0;
  // The most queue in the smoothed RTT of a connection that sent within the last second
  // (the busiest's when none did): what the wire holds now (ms).
  double queue_ms = 0;
  std::vector<ConnFigures> conns;  // each open connection's
};

// One peer node's traffic, summed over its NIs: a light snapshot for sampling every
// second (no strings, no NID lists). `peer` names the node by its lowest NID, as
// NiInfo::peer does.
struct PeerLoad {
  Nid peer;
  uint64_t bytes = 0;  // sent and received, frame headers included
  uint64_t sends = 0;
  bool up = false;  // a connection to one of its NIs is open
};

// A route as the Net sees it now (`pfsnet route show`): its gateway's state.
struct RouteInfo {
  RouteConfig route;
  bool usable = false;
  // "up"; or why the gateway is not used: "no local NI up on tcp1", "declared dead: ...",
  // "reconnect backs off 3.2 s more after: ...".
  std::string state;
  bool connected = false;  // a connection to the gateway is open
  int health = 0;          // the gateway NI's (selection value)
  int64_t credits = 0;     // free on the path to it (negative: messages queued)
  uint64_t sent = 0;       // messages sent to the gateway NI (its own and routed)
  int64_t queued = 0;      // messages waiting here for it (a credit, its window, a connection)
  // When the gateway's router pings last changed what they say (answering or not, routing
  // or not, its NIs' states), wall-clock ms; 0: no answer yet.
  int64_t since_unix_ms = 0;
};

// What the last router ping of a gateway found (rpc/router_pinger.h).
struct GatewayStatus {
  bool answered = false;                  // it answered (false: the ping failed; `why` says how)
  bool routing = false;                   // it routes (lnet.routing)
  std::vector<std::pair<Nid, bool>> nis;  // its NIs, each up or not
  std::string why;
  TimePoint at{};             // when (set by Net)
  int64_t since_unix_ms = 0;  // since when it says what it says (set by Net)
};

// A router's figures (`pfsnet routerstat`), since start.
struct RouterStats {
  bool routing = false;  // lnet.routing: this node forwards for others
  uint64_t forwarded = 0, forwarded_bytes = 0;
  // Frames not forwarded: no route to their network (or the next hop failed them: dead,
  // unreachable, deadline), a loop (kMaxFrameHops), this node is not a router.
  uint64_t dropped_no_route = 0, dropped_failed = 0, dropped_loop = 0, dropped_not_router = 0;
  // From a peer whose connection grants no receive window (kFeatureWindow): what it could
  // leave in the router would be bounded by nothing.
  uint64_t dropped_no_window = 0;
  // Forwarded though their data failed its checksum on the way in (the destination refuses
  // them and their sender sends again; counted here against the hop they came on).
  uint64_t corrupt = 0;
  std::array<RouterPoolStats, kRouterPools> pools{};
  int64_t peer_buffer_credits = 0;
  // Bytes of frames held to forward now (in buffers or waiting for one), and the most held.
  int64_t held_bytes = 0, held_bytes_max = 0;
  int64_t peer_queued = 0;  // frames waiting for a credit of their peer now
  uint64_t peer_waits = 0;  // ... since start
  // Routed frames that reached this node as their destination, and that it sent routed.
  uint64_t received_routed = 0, sent_routed = 0;
};

// A recovery ping to send: from `local` to `peer`, on exactly that path.
struct RecoveryTarget {
  Nid local;
  Nid peer;
  bool for_local_ni = false;  // the local NI is the one recovering
};

using TransportFactory = std::function<std::unique_ptr<Transport>(TransportEvents&)>;

class Net final : public TransportEvents {
 public:
  // `local_nids` in [[net]] order. `clock` must outlive the Net.
  Net(NetOptions opts, std::vector<Nid> local_nids, Clock& clock, TransportFactory make_transport);
  ~Net() override;

  void set_rx(NetRx* rx) { rx_ = rx; }
  // Starts listening on every local NI.
  Status start();
  // Closes every connection, fails every queued send with kCancelled, stops the transport.
  void shutdown();

  // Sends `f` to the peer owning `dst` on the path selection picks. `done` (may be null)
  // is told exactly once: written (TxTimes names the path), or failed (no local NI on
  // the peer's networks, NI down, connect error, connection closed, deadline passed).
  // f->hdr's src and dst are set here.
  void send(const Nid& dst, std::unique_ptr<OutFrame> f, TimePoint deadline, TxCompletion* done);
  // Sends on the path `local` -> `peer`. `strict`: only that path (recovery pings);
  // otherwise it is preferred while its local NI is up and falls back to selection.
  void send_via(const Nid& local, const Nid& peer, std::unique_ptr<OutFrame> f, TimePoint deadline,
                TxCompletion* done, bool strict);
  // Runs the transport's ready completions on this thread (Transport::progress): for a
  // caller that waits for a reply. Returns whether there was any. Any thread.
  bool progress() { return !shut_.load() && transport_->progress(); }
  // A caller waiting for a reply from `dst` receives it on this thread
  // (Connection::receive_here): from the connection small messages to `dst` go on, when
  // one path leads there (with several, the reply may come on any: kNo, the caller waits
  // as usual). Any thread but an I/O thread.
  Connection::Here receive_here(const Nid& dst, const std::atomic<bool>& done, Duration max_wait,
                                int wake_fd);
  // SO_SNDBUF/SO_RCVBUF of the TCP connections made from now on (0: the kernel's
  // autotuning); open ones keep theirs (lnet.tx_buffer_size, rx_buffer_size). Any thread.
  void set_socket_buffers(int tx_bytes, int rx_bytes) {
    transport_->set_socket_buffers(tx_bytes, rx_bytes);
  }

  // When a send to `dst` may next go on a path without waiting for a reconnect: `now`
  // while one of its paths is connected, connecting, or free to connect; else the
  // earliest backoff's end (a caller whose send failed on a connect waits for that, within
  // its own deadline, rather than resending at once). Any thread.
  TimePoint connect_due(const Nid& dst, TimePoint now);

  // What a send to `dst` waits for now, on each of its paths where one waits (`pfsnet diag
  // ops`: a client's RPC in its `network` phase): "reconnect L -> P backs off 1.2 s more
  // after: <why>", "connecting L -> P", "waiting for a credit of local NI L (credits 64,
  // all held)", "waiting for peer_credits on L -> P (8 sent, none credited back yet)", "N
  // message(s) queued on L -> P" (the write under way). Joined by "; "; empty when nothing
  // waits (or `dst` is unknown), with the kind that weighs most. Takes each path's NI lock
  // in turn. Any thread.
  SendWait send_wait(const Nid& dst, TimePoint now);
  // What TCP says of what was written to `dst`, per path, from its open connections'
  // kernel figures (a system call each): "TCP on L -> P: all N B acknowledged (srtt 0.1 ms)",
  // "... 3 segment(s) lost, 2 retransmitting, 12 unacknowledged (srtt 900.0 ms, lowest
  // 0.1 ms)", "... the peer's window is closed, 64 KiB unsent". Kind kNone without TCP. For
  // `diag ops`: a client RPC waiting for its reply. Any thread.
  ReplyWait reply_wait(const Nid& dst);

  // Applies transmit deadlines at `now` (see above), and returns the credits owed on any
  // connection on an explicit credit frame. Returns how many messages it failed or whose
  // connection it closed.
  size_t expire(TimePoint now);

  // A message sent on `path` got no reply by its deadline: a remote timeout. Demerits
  // the peer NI, counts it, and closes the connection (so nothing more waits on it) --
  // unless it went through a router (TxTimes::routed), whose connection carries others'.
  void report_remote_timeout(const TxTimes& path, const std::string& what);
  // A message that failed on `path` is being sent again: counted on both NIs.
  void note_resend(const TxTimes& path);

  // Link events: the interface of local NI `local` went down or came up.
  // Down: the NI is not selected, its connections close, its queued sends fail
  // (LOCAL_NI_DOWN). Up: selectable again (LOCAL_NI_UP), in recovery until healthy.
  // Returns false for an unknown NID. `penalize` false: the state found at start-up (no
  // failure is counted and the health is left alone).
  bool set_link_state(const Nid& local, bool up, bool penalize = true);

  // Membership: the MGS declared the peer owning `nid` dead (or back). While dead, sends
  // to it fail at once with kPeerDead and `why`, its queued sends fail so, and it gets no
  // recovery pings; hearing from it directly clears the mark.
  void set_peer_dead(const Nid& nid, bool dead, const std::string& why);
  bool peer_dead(const Nid& nid) const;
  // Closes every connection to the peer owning `nid` (a server dropping a dead client).
  void drop_peer(const Nid& nid, const std::string& why);

  // Slowness (health that sees more than errors; the health monitor decides): the local
  // NI or peer NI `nid` is degraded for `cause` -- selection takes `penalty` off its health
  // -- or, with SlowCause::kNone, no longer. `evidence`: the figures behind the call, for
  // the views. Returns false for an unknown NID.
  bool set_degraded(const Nid& nid, bool local, SlowCause cause, int penalty,
                    const std::string& evidence);
  // The paths `want` picks (given each one's NIs and bytes), each with its TCP totals (a
  // system call per connection).
  std::vector<PathSample> path_samples(
      const std::function<bool(const Nid& local, const Nid& peer, uint64_t bytes)>& want) const;

  // NIs whose recovery ping is due at `now`; each is scheduled for its next one.
  std::vector<RecoveryTarget> recovery_due(TimePoint now);

  // Fault delays: when a frame on `c` may be written (TimePoint{} = at once), from the
  // delay rules. The transport decorator that holds frames asks (EmulatingTransport's
  // hold function); the message keeps its credit meanwhile.
  TimePoint fault_hold(const Connection& c, const OutFrame& f);

  uint64_t add_fault(FaultRule rule);
  bool del_fault(uint64_t id);
  std::vector<FaultRule> faults() const;

  // Changes `credits` (per NI) and `peer_credits` (per connection) at run time: every
  // NI and open connection moves by the difference (a lowered window drains as credits
  // come back); what the new credits allow is sent at once.
  void set_credits(int64_t credits, int64_t peer_credits);
  // lnet.checksum at run time: whether the messages this node sends from now on carry
  // their data's CRC. Frames that carry one are checked whatever this says.
  void set_checksum(bool on) { checksum_.store(on, std::memory_order_relaxed); }
  // lnet.conns_per_peer at run time: every TCP path this end connected opens bulk
  // connections up to `n` at once, as a path does when it connects (1: none; connections
  // open already stay). Paths the peer connected open theirs at their next large message
  // if the peer has not.
  void set_conns_per_peer(int64_t n);
  int64_t conns_per_peer() const { return conns_per_peer_.load(std::memory_order_relaxed); }
  // The cluster's minimum release level (membership learns it from the MGS; `pfsnet
  // upgrade`): every handshake from now on refuses a peer below it (wire/handshake.h).
  // Connections open already keep going until they close.
  void set_min_peer_level(uint16_t level) {
    min_peer_level_.store(level, std::memory_order_relaxed);
  }
  bool checksum() const { return checksum_.load(std::memory_order_relaxed); }

  // Routes at run time (`pfsnet route add/del`): checked as the config's are (not to one of
  // this node's networks, through a gateway on one of them); `replace` changes the hops and
  // priority of a route that is there. Frames sent from then on take them. Any thread.
  Status add_route(const RouteConfig& r, bool replace = false);
  Status del_route(uint32_t net, const std::optional<Nid>& gateway);
  std::vector<RouteInfo> routes();
  RouterStats router_stats() const;
  // Router pings: the gateways of every route (each once), what the last ping of one found
  // (the next choice of a gateway takes it into account), and what this node says of
  // itself when pinged: whether it routes and its NIs, each up or down.
  std::vector<Nid> gateways() const;
  void set_gateway_status(const Nid& gw, GatewayStatus s);
  bool routing() const { return router_ != nullptr; }
  std::vector<std::pair<Nid, bool>> local_ni_states() const;
  Duration router_ping_interval() const { return opts_.router_ping_interval; }
  Duration router_ping_timeout() const { return opts_.router_ping_timeout; }
  // Whether `nid` is reached through a router (no local NI shares its network).
  bool routed(const Nid& nid) const;
  // The local NI a routed send to `dst` leaves from: the one on the network of the first
  // gateway of a route to dst's network (nullopt: no route). What the probe mesh pins a
  // routed path's probes to.
  std::optional<Nid> route_local(const Nid& dst) const;

  std::vector<NiInfo> nis() const;
  // Snapshots of the peer NIs. With `kernel_tcp`, each path also gets the kernel's TCP
  // figures (a system call per connection: for views, not for once-a-second sampling).
  std::vector<NiInfo> peers(bool kernel_tcp = false) const;
  std::vector<PeerLoad> peer_loads() const;
  // The peer node (its lowest NID) that `nid` belongs to; nullopt when unknown.
  std::optional<Nid> peer_of(const Nid& nid) const;
  // What an open connection to the peer NI `nid` speaks (its handshake: version, features,
  // the peer's release), from any local NI's path; nullopt while none is open. Cheap: no
  // snapshot of every peer.
  std::optional<WireSession> wire_of(const Nid& nid) const;
  // Whether `nid` may be told of large (IPv6) NIDs: it is one itself (only a release that
  // has them listens on one), or its open connection speaks wire version 2. A version-1
  // peer, or one not connected yet, is not (docs/wire_format.md, "Large NIDs").
  bool takes_large_nids(const Nid& nid) const;
  const std::vector<Nid>& local_nids() const { return local_nids_; }
  Clock& clock() { return clock_; }
  int64_t credits() const { return credits_.load(std::memory_order_relaxed); }
  int64_t peer_credits() const { return peer_credits_.load(std::memory_order_relaxed); }

  // TransportEvents.
  void on_connected(const ConnectionPtr& c) override;
  void on_frame(Connection& c, InFrame&& f) override;
  void on_closed(Connection& c, const Status& why) override;
  // A reply's caller's memory (NetRx::reply_memory), for a frame addressed here.
  std::optional<Buffer> bulk_sink(Connection& c, const FrameHeader& h) override;
  // The NI leaves selection as on a link-down event (LOCAL_NI_DOWN), until its link is
  // reported up.
  void on_local_ni_down(const Nid& local, const Status& why) override;
  uint16_t min_peer_level() const override {
    return min_peer_level_.load(std::memory_order_relaxed);
  }
  // A router grants each connection its peer_credits now as the peer's receive window: what
  // waits in it for router credits and buffers is then bounded. Other nodes grant none (a
  // sender's window is its own peer_credits, as auto-tune sets it).
  uint32_t rx_window() const override {
    return router_ ? static_cast<uint32_t>(peer_credits()) : 0;
  }

  struct PeerNi;
  struct Peer;
  struct Path;
  struct ConnState;
  struct TxMsg;
  class PeerTable;
  struct Forward;  // a frame a router forwards (net_router.cc)
  // The state of one local NI and of one path (local NI, peer NI); the locks are
  // described in net_internal.h.
  struct LocalNi {
    LocalNi(Nid n, uint16_t p, TimePoint now, int64_t wall_ms)
        : nid(n), port(p), health(now, wall_ms) {}
    const Nid nid;
    const uint16_t port;
    Health health;
    std::atomic<bool> up{true};
    NetCounters counters;

    Mutex mu;  // the NI's send lock; guards the rest and its paths' state
    int64_t tx_credits GUARDED_BY(mu) = 0;     // NI credits left
    int64_t min_credits GUARDED_BY(mu) = 0;    // low-water mark
    std::deque<Path*> blocked GUARDED_BY(mu);  // paths waiting for an NI credit

   private:
    friend class PeerTable;
    std::vector<Path*> paths;  // PeerTable's (appended as paths appear; see there)
  };
  struct Path {
    Path(LocalNi* n, PeerNi* p) : ni(n), pni(p) {}
    LocalNi* const ni;
    PeerNi* const pni;
    std::atomic<uint64_t> last_used{0};  // round-robin: the path used longest ago goes first
    // What the path carried (peers -v): sends completed, frames received.
    std::atomic<uint64_t> send_count{0}, send_bytes{0}, recv_count{0}, recv_bytes{0};
    ConnectionPtr tx_conn GUARDED_BY(ni->mu);
    std::shared_ptr<ConnState> tx_state GUARDED_BY(ni->mu);
    std::vector<ConnectionPtr> conns GUARDED_BY(ni->mu);
    bool connecting GUARDED_BY(ni->mu) = false;
    bool blocked_on_ni GUARDED_BY(ni->mu) = false;
    std::deque<TxMsg*> queue GUARDED_BY(ni->mu);
    // lnet.conns_per_peer > 1 (TCP): the path's open bulk connections (Connection::bulk()),
    // which carry its messages of kBulkConnMinBytes or more -- each to the one with the
    // most of its window left; the rest go on tx_conn, never behind them. A bulk message
    // waits in bulk_queue for a window; with no bulk connection open it goes on tx_conn.
    std::vector<std::shared_ptr<ConnState>> bulk GUARDED_BY(ni->mu);
    std::deque<TxMsg*> bulk_queue GUARDED_BY(ni->mu);
    int bulk_connecting GUARDED_BY(ni->mu) = 0;
    TimePoint bulk_retry GUARDED_BY(ni->mu){};  // no bulk connect before (one failed)
    // Reconnect backoff: after a failed connect, none before reconnect_at; the interval
    // doubles per failure (min_reconnect .. max_reconnect), reset by a connection.
    TimePoint reconnect_at GUARDED_BY(ni->mu){};
    Duration reconnect_interval GUARDED_BY(ni->mu){0};
    std::string reconnect_why GUARDED_BY(ni->mu);  // the failed connect's error
    // ... and its kind (refused: CONNECT_ERROR; no route, no ARP answer: UNREACHABLE),
    // which a send failed for the backoff reports as the connect would have.
    HealthKind reconnect_kind GUARDED_BY(ni->mu) = HealthKind::kPeerNiConnectError;
    // Whether a connect has to wait for the backoff: none open or under way, the next not
    // due yet. The one rule for a send that would wait and for when one may go.
    bool backing_off(TimePoint now) const REQUIRES(ni->mu) {
      return !tx_conn && !connecting && now < reconnect_at;
    }
    // Copies, for a caller holding the NI's lock by another name (Net::expire).
    TimePoint next_connect() const REQUIRES(ni->mu) { return reconnect_at; }
    std::string last_connect_error() const REQUIRES(ni->mu) { return reconnect_why; }
    HealthKind last_connect_kind() const REQUIRES(ni->mu) { return reconnect_kind; }
    // The kernel's TCP counters of the path's closed connections, read as each closed.
    TcpTotals closed_tcp GUARDED_BY(ni->mu);
  };

 private:
  // Frames handed to connections under an NI's lock, sent once it is unlocked: nearly
  // always one, which stays inline (no allocation per send).
  class Out {
   public:
    void emplace_back(ConnectionPtr c, TxMsg* m) {
      if (n_++ == 0)
        first_ = {std::move(c), m};
      else
        rest_.emplace_back(std::move(c), m);
    }
    // Calls fn(connection, message) in the order they were handed over, then empties.
    template <class Fn>
    void take_each(Fn&& fn) {
      if (n_ == 0) return;
      fn(*first_.first, first_.second);
      for (auto& [c, m] : rest_) fn(*c, m);
      first_ = {};
      rest_.clear();
      n_ = 0;
    }

   private:
    size_t n_ = 0;
    std::pair<ConnectionPtr, TxMsg*> first_;
    std::vector<std::pair<ConnectionPtr, TxMsg*>> rest_;
  };
  using Failed = std::vector<std::pair<TxMsg*, Status>>;
  LocalNi* local_ni(const Nid& nid) const;
  // Picks the path for a message to `peer`'s node: never a local NI that is down; the
  // healthiest local NI, the healthiest peer NI, RDMA before sockets, the most credits,
  // then round-robin.
  Path* select(const PeerNi& dst);
  void submit(const Nid& dst, const Nid* via_local, const Nid* via_peer, bool strict,
              std::unique_ptr<OutFrame> f, TimePoint deadline, TxCompletion* done);
  // Queues `m` on `p`; what credits allow goes into `out`.
  void enqueue_locked(Path& p, TxMsg* m, Out* out) REQUIRES(p.ni->mu);
  // Sends what credits allow into `out` (handed over after unlocking).
  void drain_locked(Path& p, Out* out) REQUIRES(p.ni->mu);
  void drain_ni_locked(LocalNi& ni, Out* out) REQUIRES(ni.mu);
  void transmit(Out& out);
  void start_connect_locked(Path& p) REQUIRES(p.ni->mu);
  // Whether `m` goes on one of p's bulk connections; opens them up to conns_per_peer.
  bool to_bulk_locked(Path& p, const TxMsg& m) REQUIRES(p.ni->mu);
  // Opens p's bulk connections up to conns_per_peer (TCP; none while one failed lately).
  void open_bulk_locked(Path& p) REQUIRES(p.ni->mu);
  void on_bulk_connect_result(Path* p, Result<ConnectionPtr> r);
  // Hands `m` to connection `conn` (state `cs`) of `p`: its window and the NI's credits
  // taken, listed as unfinished, queued in `out`.
  void hand_over_locked(Path& p, const std::shared_ptr<ConnState>& cs, ConnectionPtr conn, TxMsg* m,
                        Out* out) REQUIRES(p.ni->mu);
  // Whether p's local NI has a credit; if not, p waits in its list of blocked paths.
  bool ni_credit_locked(Path& p) REQUIRES(p.ni->mu);
  // Every message waiting in p's queues, taken out of them.
  static std::vector<TxMsg*> take_queued_locked(Path& p) REQUIRES(p.ni->mu);
  // `c` (closing) no longer carries new messages of `p`.
  void detach_locked(Path& p, Connection* c) REQUIRES(p.ni->mu);
  // Sets the credit high water of p's connections: high_water_, or 1 while the path has
  // bulk connections (see the definition).
  void set_high_water_locked(Path& p) REQUIRES(p.ni->mu);
  // Whether `c` should carry the path's sends instead of `current` (null: none). Of two
  // connections of a path (both ends connected at once, e.g. both NIs came back up), both
  // ends send on the one the lower NID opened, so credits ride on the replies both ways.
  static bool better_tx(const Connection& c, const Connection* current);
  void on_connect_result(Path* p, Result<ConnectionPtr> r);
  // After a failed connect of `p` at `now`: its next attempt's time (backoff, jittered).
  void back_off_locked(Path& p, TimePoint now, const Status& why) REQUIRES(p.ni->mu);
  // For `p` without a connection: OK when `m` may go on it now, or wait there for its next
  // connect (it comes before m's deadline); else why it fails at once.
  Status backoff_locked(Path& p, const TxMsg& m) REQUIRES(p.ni->mu);
  // A frame on `c` failed its data checksum: counted, blamed on the peer NI, handed up.
  void on_corrupt(Connection& c, ConnState& cs, const Nid& from, const InFrame& f);
  void fail(TxMsg* m, const Status& s);
  void finish_failures(Failed& failed);

  // Routing (net_router.cc). The path to the gateway a frame for `dst` (on a network no
  // local NI is on) goes to, chosen among the routes to its network; null with `err` set
  // when there is none.
  Path* gateway_path(const Nid& dst, Status* err);
  // The gateway's state for the choice and the views; `why` (may be null) says why it is
  // not usable.
  GatewayView gateway_view(const RouteConfig& r, PeerNi& gw, TimePoint now, std::string* why);
  // Why a gateway whose last router ping found `st` may not carry route `r` ("": it may).
  std::string status_problem(const RouteConfig& r, const GatewayStatus& st, TimePoint now) const
      REQUIRES(routes_mu_);
  // A frame of this node's own to route through `p`'s gateway: an error when the open
  // connection to it does not speak routing (an older release).
  Status check_routes_to(Path& p);
  // A routed frame `f` on `c` for another node: forwarded (lnet.routing) or dropped.
  // `corrupt`: its data failed its checksum here (forwarded as it came, for the
  // destination to refuse).
  void forward(Connection& c, ConnState& cs, InFrame&& f, bool corrupt,
               std::optional<std::array<uint8_t, kDataCrcSize>> seal);
  // Sends each of `go` on to its next hop (a frame that fails at once lets its buffer go
  // to the next in turn: iterative, never recursive).
  void send_forwards(std::vector<std::unique_ptr<Forward>>& go);
  // Grants `c`'s peer a receive window of `window` (a WINDOW frame; kFeatureWindow).
  void grant_window(const ConnectionPtr& c, uint32_t window);
  // The peer's WINDOW frame: its grant moves this end's window on `c`.
  void on_window(Connection& c, ConnState& cs, uint64_t window);
  // A forwarded frame is done (written on, or failed): its buffer and credit let go.
  void forward_done(Forward* fw, const Status& s);
  // The state on_connected gave `c` (its Connection::upper), null once it closed: no
  // lookup, no lock, no reference taken -- `c` owns it, so it lives while `c` is held.
  ConnState* conn_state(const Connection& c) const;

  // Health changes (a failure, a success) on an NI or peer NI.
  void lower(Health& h, PeerNi* pni);
  void raise(Health& h);

  NetOptions opts_;
  std::atomic<int64_t> credits_, peer_credits_;  // run-time values (set_credits)
  std::atomic<uint32_t> high_water_;
  std::atomic<bool> checksum_;
  std::atomic<int64_t> conns_per_peer_;
  std::atomic<uint16_t> min_peer_level_{1};
  std::vector<Nid> local_nids_;
  Clock& clock_;
  NetRx* rx_ = nullptr;
  std::vector<std::unique_ptr<LocalNi>> nis_;
  std::unique_ptr<PeerTable> table_;
  FaultInjector faults_;

  Mutex recovery_mu_;
  std::vector<PeerNi*> recovering_ GUARDED_BY(recovery_mu_);  // peer NIs below full health
  mutable Mutex dead_mu_;
  // Packed peer NID -> why it is dead.
  std::unordered_map<Nid, std::string> dead_why_ GUARDED_BY(dead_mu_);

  // Routing.
  mutable Mutex routes_mu_;
  RouteTable routes_ GUARDED_BY(routes_mu_);
  // Round-robin among equal gateways: when each was last chosen (a counter).
  std::unordered_map<Nid, uint64_t> gateway_used_ GUARDED_BY(routes_mu_);
  std::unordered_map<Nid, GatewayStatus> gateway_status_ GUARDED_BY(routes_mu_);
  uint64_t gateway_turn_ GUARDED_BY(routes_mu_) = 0;
  struct RouterState;
  std::unique_ptr<RouterState> router_;  // set when lnet.routing
  std::atomic<uint64_t> received_routed_{0}, sent_routed_{0}, dropped_not_router_{0};

  std::unique_ptr<Transport> transport_;
  std::atomic<bool> shut_{false};
};

}  // namespace pfsnet
