// The inside of FabricTransport, shared by its files (libfabric's prov/tcp split them so:
// xnet_cm / xnet_ep / xnet_msg / xnet_rma / xnet_progress):
// - fabric_transport.cc: the provider's info, the transport (I/O loop, event and
//   completion queues, listen/connect/accept, deadlines, stop) and the public face;
// - fabric_conn.cc: a connection's set-up, handshake and close;
// - fabric_msg.cc: its messages -- the send queue and credits, receiving, ordering;
// - fabric_rma.cc: its RMA -- reads of the peer's frames, reply sinks offered and written.
// Not installed. Threads: as FabricTransport (fabric_transport.h).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>

#include "base/mutex.h"
#include "transport/fabric_transport.h"
#include "transport/reg_cache.h"
#include "transport/reg_pool.h"
#include "wire/fabric_wire.h"
#include "wire/handshake.h"

namespace pfsnet {
namespace fabric_detail {

inline constexpr uint32_t kFiVersion = FI_VERSION(1, 17);
inline constexpr size_t kCqBatch = 16;
inline constexpr size_t kMaxCmData = 256;  // private data of a connection manager event
// Closed connections stay this long before they are freed: a provider may still report a
// flushed operation of theirs.
inline constexpr auto kGraveyardTime = std::chrono::milliseconds(500);
// How long a local close waits for the outcome of sends already posted.
inline constexpr auto kCloseWait = std::chrono::seconds(1);
// Idle RMA sink memory an NI keeps registered for reuse (RegPool's idle cap): enough for
// 16 reads of 2 MiB in flight.
inline constexpr size_t kSinkIdleCap = 64 << 20;
// Reply sinks a connection offers with its requests (o2iblnd's GET): at most this much
// memory at once (beyond it a request offers none and its reply's bulk is read from the
// server instead), and a sink whose reply never came back on its connection (it came on
// another path) is retired after kOfferTime, above any RPC's timeout.
inline constexpr size_t kMaxOfferBytes = 64 << 20;
inline constexpr auto kOfferTime = std::chrono::seconds(120);
// Registrations of application memory an NI keeps (RegCache's capacity).
inline constexpr size_t kRegCacheEntries = 256;
// Sinks of the peer's requests remembered per connection (the oldest xid goes first).
inline constexpr size_t kMaxPeerSinks = 1024;
// RMA writes into the peer's sinks posted at once per connection. Where sends follow
// writes in order, each is posted with its reply's message right behind it. Elsewhere the
// message waits for its write's completion, and the provider works its queue in order, so
// it waits behind those posted before it: two keep the link busy while the next is
// posted, and a reply arrives one write after its own, not after every queued one.
inline constexpr size_t kMaxWritesPosted = 2;
// I/O passes between two reads of the event queues while the thread is busy.
inline constexpr uint64_t kEqEvery = 32;

inline std::string fi_error(ssize_t rc) { return fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)); }

struct InfoFree {
  void operator()(fi_info* i) const {
    if (i) fi_freeinfo(i);
  }
};
using InfoPtr = std::unique_ptr<fi_info, InfoFree>;

inline void close_fid(fid* f) {
  if (f) fi_close(f);
}

enum class OpKind : uint8_t { kRecv, kSend, kRead, kWrite };

class FabConn;

// A posted operation; its address is the operation's context.
struct Op {
  fi_context2 ctx;  // first: providers that need FI_CONTEXT use it
  OpKind kind;
  FabConn* conn = nullptr;
  uint32_t index = 0;  // recv/send: buffer index
  uint64_t seq = 0;    // read: the frame it fills; write: the TxItem's write_id
  BulkData keep;       // write: its source, alive until the write completes
  // Read: its sink's registration when the sink is not pooled; write: its source's (both
  // only where the provider needs local registration). Closed with the Op.
  RegCache::Ref reg;
};

// A fabric and its domain, closed when the last holder goes: the NI, or its sink pool
// (whose registrations must be closed first, and whose sinks may outlive the NI).
struct FabDomain {
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  // Keys asked for registrations in this domain (used where the provider does not pick
  // them, FI_MR_PROV_KEY unset). Any thread.
  uint64_t next_key() { return keys.fetch_add(1); }
  std::atomic<uint64_t> keys{1};
  ~FabDomain() {
    close_fid(domain ? &domain->fid : nullptr);
    close_fid(fabric ? &fabric->fid : nullptr);
  }
};

// One local NI on the fabric: its fabric, domain, queues, listener and RMA sinks.
struct FabNi {
  Nid nid;
  InfoPtr info;
  std::shared_ptr<FabDomain> dom;
  fid_fabric* fabric = nullptr;  // dom's
  fid_domain* domain = nullptr;  // dom's
  fid_eq* eq = nullptr;
  fid_cq* cq = nullptr;
  fid_pep* pep = nullptr;
  uint64_t mr_mode = 0;
  std::shared_ptr<RegPool> sinks;  // what RMA reads land in
  // Memory registered for one operation: application memory sent by RMA (cached while
  // it lives), sinks too large for the pool.
  std::unique_ptr<RegCache> regs;
  ~FabNi() {
    close_fid(pep ? &pep->fid : nullptr);
    close_fid(cq ? &cq->fid : nullptr);
    close_fid(eq ? &eq->fid : nullptr);
    if (sinks) sinks->close();
  }
};

}  // namespace fabric_detail

class FabricTransport::Impl {
 public:
  Impl(TransportOptions opts, FabricOptions fopts, std::vector<Nid> node_nids, Clock& clock,
       TransportEvents& events);
  ~Impl() { stop(); }

  Status listen(const Nid& local, uint16_t port);
  void connect(const Nid& local, const Nid& remote, uint16_t port, ConnectCallback cb);
  void post(std::function<void()> fn);
  bool progress();
  void stop();
  void inject_fault(FabricSite site, int err) {
    (site == FabricSite::kConnect ? inject_connect_ : inject_completion_).store(err);
  }
  // The injected error for `site`, once (0: none). Any thread.
  int take_injected(FabricSite site) {
    auto& a = site == FabricSite::kConnect ? inject_connect_ : inject_completion_;
    return a.load(std::memory_order_relaxed) ? a.exchange(0) : 0;
  }

  // Any thread.
  struct AtomicCounters {
    std::atomic<uint64_t> rma_reads{0}, sink_writes{0}, sinks_offered{0}, registrations{0},
        sink_replies_ordered{0}, sink_registrations{0};
  } counters_;

  // ---- used by fabric_detail::FabConn (in an I/O pass unless said) ----
  const std::vector<Nid>& node_nids() const { return node_nids_; }
  void forget(fabric_detail::FabConn* c);

  TransportOptions opts_;
  FabricOptions fopts_;
  Clock& clock_;
  TransportEvents& events_;

 private:
  void loop();
  // One I/O pass: posted work, the event and completion queues of every NI, and every
  // 10 ms the deadlines. The caller holds io_mu_.
  size_t run_once();
  size_t poll_cq(fabric_detail::FabNi& ni);
  size_t poll_eq(fabric_detail::FabNi& ni);
  size_t run_posted();
  void sleep_once();
  // Whether any connection has an RMA under way (FabricOptions::rma_poll). Takes io_mu_.
  bool rma_under_way();
  void check_deadlines();
  // Runs `fn` on the I/O thread and waits for it (bounded).
  Status run_on_io(std::function<Status()> fn);
  Result<fabric_detail::FabNi*> ni_for(const Nid& local, uint16_t listen_port);
  void accept(fabric_detail::FabNi& ni, fi_eq_cm_entry* entry, size_t data_len);
  std::shared_ptr<fabric_detail::FabConn> conn_of(fid_t f);

  std::vector<Nid> node_nids_;
  // Held by whichever thread runs an I/O pass: the I/O thread, or a waiter in progress().
  // What the comments below call "the I/O thread" is that holder.
  Mutex io_mu_;
  std::vector<std::unique_ptr<fabric_detail::FabNi>> nis_;  // I/O thread
  std::unordered_map<fabric_detail::FabConn*, std::shared_ptr<fabric_detail::FabConn>>
      conns_;  // I/O thread
  std::deque<
      std::pair<std::chrono::steady_clock::time_point, std::shared_ptr<fabric_detail::FabConn>>>
      graveyard_;                                       // I/O thread
  std::chrono::steady_clock::time_point last_check_{};  // I/O thread
  uint64_t passes_ = 0;                                 // I/O thread
  std::atomic<bool> eq_due_{true};                      // read the event queues on the next pass
  TimePoint last_offer_check_{};                        // I/O thread
  int epfd_ = -1, evfd_ = -1;
  Mutex mu_;
  std::deque<std::function<void()>> posted_ GUARDED_BY(mu_);
  std::atomic<bool> sleeping_{false};
  std::atomic<int> inject_connect_{0}, inject_completion_{0};
  std::atomic<bool> quit_{false}, stopped_{false};
  std::thread thread_;
};

namespace fabric_detail {

// A frame, or a control message, waiting for a send buffer and a credit.
struct TxItem {
  std::unique_ptr<OutFrame> frame;  // null: a control message
  FabricMsg type = FabricMsg::kFrame;
  uint64_t cookie = 0;
  uint8_t flags = 0;
  bool close_after = false;  // a REJECT: the connection closes once it is sent
  // A reply whose bulk goes into the sink its request offered: the RMA write is posted
  // when the reply is queued, the message once the write is done.
  enum class Write : uint8_t { kNone, kToPost, kPosted, kDone };
  Write write = Write::kNone;
  RmaDesc sink;
  uint64_t write_id = 0;
};

// A kFrameRma sent and not yet read by the peer: kept (with its registrations) until its
// kRmaDone.
struct RmaSend {
  std::unique_ptr<OutFrame> frame;
  RegCache::Ref reg[2];  // payload (registered for this frame), bulk (from the NI's cache)
  TimePoint start;
};

// A received frame waiting for its RMA reads or for the frames before it.
struct PendingRx {
  InFrame frame;
  int waits = 0;
  bool failed = false;
  uint64_t cookie = 0;
};

class FabConn final : public Connection, public std::enable_shared_from_this<FabConn> {
  struct Done {
    std::unique_ptr<OutFrame> frame;
    Status status;
    TxTimes times;
  };
  struct Inflight {
    std::unique_ptr<OutFrame> frame;  // an inline frame, completed with its send
    TimePoint start;
    bool close_after = false;
  };

 public:
  // kClosing: closed locally, waiting (bounded) for the outcome of what was already posted,
  // so a frame the peer took is never reported failed.
  enum State { kConnecting = 0, kHandshake = 1, kOpen = 2, kClosing = 3, kClosed = 4 };

  FabConn(FabricTransport::Impl& t, FabNi& ni, bool outgoing, uint64_t id);
  ~FabConn() override;

  // ---- Connection ----
  void send(std::unique_ptr<OutFrame> f) override;
  void close(const Status& why) override {
    auto self = shared_from_this();
    t_.post([self, why] { self->begin_close(why); });
  }
  void post(std::function<void()> fn) override { t_.post(std::move(fn)); }
  bool is_open() const override { return state_.load() == kOpen; }

  // ---- set-up, handshake and close (fabric_conn.cc; I/O thread) ----
  int state() const { return state_.load(); }
  // Of connecting, the handshake, or a local close's wait.
  TimePoint deadline() const { return deadline_; }
  void set_deadline(TimePoint t) { deadline_ = t; }
  void set_connect_cb(ConnectCallback cb) { cb_ = std::move(cb); }
  // Opens the endpoint for `info`, registers and posts the receive buffers.
  Status open_endpoint(fi_info* info);
  fid_ep* ep() const { return ep_; }
  // The peer's parameters (connection manager data): its credits and message size.
  void set_peer_params(const ConnParams& p);
  void set_peer_nids(std::vector<Nid> n) { peer_nids_ = std::move(n); }
  // FI_CONNECTED: the handshake starts (the client speaks first).
  void on_connected_event();
  // A fabric error (LNet health's table, fabric_health.h): the connection closes with the
  // health kind it implies; a local device gone first takes the NI out of selection, so
  // what the close fails is resent elsewhere.
  void fail(FabricSite site, int err, const std::string& what);
  // A local close of an open connection: nothing more is sent (what is queued fails now);
  // what was posted waits for its outcome, at most kCloseWait.
  void begin_close(const Status& why);
  // Closing, and nothing posted is waiting for its outcome: closed.
  void maybe_closed();
  // Closes: fails every frame not yet sent or acknowledged, tells the net (once, if it
  // was open) or the connect callback (if it never opened).
  void do_close(const Status& why);
  // A client that refused the server's proof closes once its REJECT is sent; the
  // connect callback gets this.
  Status fail_connect_;

  // ---- completions (fabric_msg.cc, fabric_rma.cc; I/O thread) ----
  // Receive buffer `i` holds a message of `len` bytes.
  void on_recv(uint32_t i, size_t len);
  // Send buffer `i` is free again: its inline frame is done.
  void on_send_done(uint32_t i);
  // An RMA read of a received frame's data completed (or failed: the connection closes).
  void on_read_done(Op* op, bool ok);
  // An RMA write of a reply's bulk into the peer's sink completed (or failed: the
  // connection then closes); the reply's message may go.
  void on_write_done(Op* op, bool ok);
  // A completion with an error: the read or write is done with; a send or receive
  // closes the connection (fail).
  void on_op_error(Op* op, int err, const std::string& what);

  // ---- RMA state (fabric_rma.cc; I/O thread) ----
  // Whether an RMA this end takes part in is under way: a read or write it posted, or its
  // memory the peer may be reading (a frame sent by RMA) or writing (an offered sink).
  bool rma_under_way() {
    MutexLock lk(tx_mu_);
    return !reads_.empty() || !writes_.empty() || !rma_sends_.empty() || !offered_.empty();
  }
  // Offered sinks whose reply never came back here (it took another path) are retired:
  // the peer might still hold their key.
  void expire_offers(TimePoint now);

 private:
  // ---- set-up, handshake and close (fabric_conn.cc) ----
  // No new frames (the first reason given stays); the queued ones fail.
  void stop_sending_locked(const Status& why, std::vector<Done>* done) REQUIRES(tx_mu_);
  // Handshake frames go like any other, before the connection opens.
  void send_hs(HandshakeMachine::Out out, bool close_after = false);
  // The handshake (wire/handshake.h's machine), one frame at a time.
  Status handshake_step(InFrame&& f);
  void established(std::vector<Nid> peer_nids);

  // ---- messages (fabric_msg.cc) ----
  uint8_t* rx_buf(uint32_t i) { return rx_mem_.get() + size_t(i) * msg_size_; }
  uint8_t* tx_buf(uint32_t i) { return tx_mem_.get() + size_t(i) * msg_size_; }
  void* rx_desc() { return rx_mr_ ? fi_mr_desc(rx_mr_) : nullptr; }
  void* tx_desc() { return tx_mr_ ? fi_mr_desc(tx_mr_) : nullptr; }
  ssize_t post_recv(uint32_t i) {
    return fi_recv(ep_, rx_buf(i), msg_size_, rx_desc(), 0, &rx_ops_[i].ctx);
  }
  Status closed_status_locked() const REQUIRES(tx_mu_) {
    return Status(Code::kClosed, "connection " + describe() + " closed: " + close_reason_,
                  close_kind_);
  }
  static void finish(std::vector<Done>& done) {
    for (auto& d : done)
      if (d.frame && d.frame->done) d.frame->done->on_tx_done(d.status, d.times);
  }
  // A control message (NOOP, RMA done) queued behind the frames.
  void queue_control(FabricMsg type, uint64_t cookie, uint8_t flags);
  // Sends what the queue holds while send buffers and credits last, then returns owed
  // credits on a NOOP once half the window is owed and nothing else can carry them (the
  // queue is empty or waits for credits). The last credit is kept for that NOOP
  // (o2iblnd's rule: two ends out of credits, each owing the other, would otherwise wait
  // for ever).
  void pump_locked(std::vector<Done>* done) REQUIRES(tx_mu_);
  // Encodes `it` into send buffer `i` and posts it. nullopt: the provider's queue is full,
  // try again later (nothing was taken).
  std::optional<Status> post_item(TxItem& it, uint32_t i) REQUIRES(tx_mu_);
  // One received message; `returned`: the credits it brought back.
  Status handle_message(std::span<const uint8_t> msg, uint16_t* returned);
  // A whole frame: a handshake step, or in order for the net (dropped while closing).
  Status handle_frame(InFrame&& f);
  // Hands the frames at the head of the receive queue that are whole to the net.
  void deliver_ready();

  // ---- RMA (fabric_rma.cc) ----
  // A kFrameRma received: what is inline is in `f` already; the rest is read from the
  // sender into sinks from the NI's pool, and the frame waits in the receive queue.
  Status read_frame_data(const FrameMsg& m, uint64_t cookie, InFrame&& f);
  // A reply queued: when its request offered a sink (and the bulk would not fit a message),
  // the bulk is to be written there. Any reply ends the use of its request's sink here.
  // Where sends follow writes in order, the write is posted when the reply reaches the
  // head of the queue, and its message right behind it; elsewhere writes are posted ahead,
  // in queue order, and each message once its write completed.
  void plan_sink_write_locked(TxItem& it) REQUIRES(tx_mu_);
  // Posts the RMA write of `it`'s bulk into the peer's sink. False: the provider's queue
  // is full (on the next completion). A write that cannot be posted otherwise leaves the
  // bulk to go the usual way (the peer reads it).
  bool post_write_locked(TxItem& it) REQUIRES(tx_mu_);
  // A request that expects reply bulk too large for a message offers a registered sink
  // for it (the same one again when it is sent again); nullopt: none (no room, no pool).
  std::optional<RmaDesc> offer_sink_locked(const OutFrame& f) REQUIRES(tx_mu_);
  // The sinks of a frame: a request's offer is remembered for its reply (the oldest
  // forgotten beyond kMaxPeerSinks); a reply ends the offer of its request here, and
  // when the bulk was written into it, the sink becomes the frame's `bulk`.
  Status take_sinks(const FrameMsg& m, Buffer* bulk);

 private:
  FabricTransport::Impl& t_;
  FabNi& ni_;
  fid_ep* ep_ = nullptr;
  std::atomic<int> state_{kConnecting};
  uint32_t msg_size_, rx_depth_, tx_bufs_;
  std::unique_ptr<uint8_t[]> rx_mem_, tx_mem_;
  fid_mr* rx_mr_ = nullptr;
  fid_mr* tx_mr_ = nullptr;
  std::vector<Op> rx_ops_, tx_ops_;
  std::vector<Op*> reads_;  // I/O thread

  Mutex tx_mu_;
  std::deque<TxItem> txq_ GUARDED_BY(tx_mu_);
  std::vector<uint32_t> tx_free_ GUARDED_BY(tx_mu_);
  std::vector<Inflight> tx_inflight_ GUARDED_BY(tx_mu_);
  std::unordered_map<uint64_t, RmaSend> rma_sends_ GUARDED_BY(tx_mu_);
  // Reply sinks offered with this end's requests, by xid, until their reply comes back.
  struct Offer {
    Buffer sink;
    fid_mr* mr = nullptr;  // the pool's registration of it
    size_t bytes = 0;
    TimePoint at;
  };
  std::unordered_map<uint64_t, Offer> offered_ GUARDED_BY(tx_mu_);
  size_t offered_bytes_ GUARDED_BY(tx_mu_) = 0;
  std::map<uint64_t, RmaDesc> peer_sinks_ GUARDED_BY(tx_mu_);  // the peer's, by xid
  std::vector<Op*> writes_ GUARDED_BY(tx_mu_);                 // RMA writes posted
  // The provider delivers sends after RMA writes in order (FI_ORDER_SAW, and
  // FabricOptions::ordered_replies): a reply's message goes right behind its write.
  bool sends_follow_writes_ = false;  // set before the connection opens
  size_t writes_to_post_ GUARDED_BY(tx_mu_) = 0;
  uint64_t next_write_ GUARDED_BY(tx_mu_) = 1;
  uint64_t next_cookie_ GUARDED_BY(tx_mu_) = 1;
  uint32_t credits_ GUARDED_BY(tx_mu_) = 0;  // the peer's receive buffers free for us
  uint32_t owed_ GUARDED_BY(tx_mu_) = 0;     // our reposted buffers not yet told
  uint32_t send_limit_ GUARDED_BY(tx_mu_) = 0;
  bool tx_closed_ GUARDED_BY(tx_mu_) = false;  // no new frames (closing or closed)
  bool ep_gone_ GUARDED_BY(tx_mu_) = false;    // nothing more is posted (closed)
  std::string close_reason_ GUARDED_BY(tx_mu_);
  HealthKind close_kind_ GUARDED_BY(tx_mu_) = HealthKind::kNone;

  // I/O thread
  std::deque<PendingRx> rxq_;
  uint64_t rx_front_seq_ = 0;
  std::optional<HandshakeMachine> hs_;  // from FI_CONNECTED on
  TimePoint deadline_{};
  ConnectCallback cb_;
  Status closing_why_;
};

}  // namespace fabric_detail
}  // namespace pfsnet
