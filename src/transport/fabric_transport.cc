// FabricTransport: see fabric_transport.h. Layout of this file: libfabric helpers; the
// local NI's fabric objects (FabNi); a connection (FabConn: send path, receive path,
// handshake, close); the transport (I/O loop, connection manager events, listen/connect,
// stop).
#include "transport/fabric_transport.h"

#include <arpa/inet.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>

#include "base/log.h"
#include "base/mutex.h"
#include "transport/fabric_health.h"
#include "transport/reg_cache.h"
#include "transport/reg_pool.h"
#include "wire/fabric_wire.h"
#include "wire/handshake.h"

namespace pfsnet {
namespace {

constexpr uint32_t kFiVersion = FI_VERSION(1, 17);
constexpr size_t kCqBatch = 16;
constexpr size_t kMaxCmData = 256;  // private data of a connection manager event
// Closed connections stay this long before they are freed: a provider may still report a
// flushed operation of theirs.
constexpr auto kGraveyardTime = std::chrono::milliseconds(500);
// How long a local close waits for the outcome of sends already posted.
constexpr auto kCloseWait = std::chrono::seconds(1);
// Idle RMA sink memory an NI keeps registered for reuse (RegPool's idle cap): enough for
// 16 reads of 2 MiB in flight.
constexpr size_t kSinkIdleCap = 64 << 20;
// Reply sinks a connection offers with its requests (o2iblnd's GET): at most this much
// memory at once (beyond it a request offers none and its reply's bulk is read from the
// server instead), and a sink whose reply never came back on its connection (it came on
// another path) is retired after kOfferTime, above any RPC's timeout.
constexpr size_t kMaxOfferBytes = 64 << 20;
constexpr auto kOfferTime = std::chrono::seconds(120);
// Registrations of application memory an NI keeps (RegCache's capacity).
constexpr size_t kRegCacheEntries = 256;
// Sinks of the peer's requests remembered per connection (the oldest xid goes first).
constexpr size_t kMaxPeerSinks = 1024;
// RMA writes into the peer's sinks posted at once per connection. The provider works its
// queue in order, so a reply's message posted after its write waits behind those posted
// before it: two keep the link busy while the next is posted, and a reply arrives one
// write after its own, not after every queued one.
constexpr size_t kMaxWritesPosted = 2;
// I/O passes between two reads of the event queues while the thread is busy.
constexpr uint64_t kEqEvery = 32;

std::string fi_error(ssize_t rc) { return fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)); }

struct InfoFree {
  void operator()(fi_info* i) const {
    if (i) fi_freeinfo(i);
  }
};
using InfoPtr = std::unique_ptr<fi_info, InfoFree>;

void close_fid(fid* f) {
  if (f) fi_close(f);
}

// What pfsnet asks of a provider: MSG endpoints with sends and RMA; the memory
// registration modes it can honour (verbs needs local registration, virtual addresses and
// provider keys); any thread may post. `domain` ("" = any) names the device or interface.
InfoPtr make_hints(const std::string& provider, const std::string& domain) {
  InfoPtr h(fi_allocinfo());
  h->ep_attr->type = FI_EP_MSG;
  h->caps = FI_MSG | FI_RMA;
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->addr_format = FI_SOCKADDR_IN;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  h->domain_attr->threading = FI_THREAD_SAFE;
  h->fabric_attr->prov_name = strdup(provider.c_str());
  if (!domain.empty()) h->domain_attr->name = strdup(domain.c_str());
  return h;
}

// fi_getinfo for `node`:`service`; FI_SOURCE when it is a local address to listen on.
Result<InfoPtr> get_info(const FabricOptions& fo, const std::string& node, uint16_t port,
                         bool source, const fi_info* like = nullptr, const Nid* src = nullptr) {
  InfoPtr hints = make_hints(fo.provider, like ? std::string() : fo.domain);
  if (like) {
    hints->domain_attr->name = strdup(like->domain_attr->name);
    hints->fabric_attr->name = strdup(like->fabric_attr->name);
  }
  if (src) {
    auto* a = static_cast<sockaddr_in*>(calloc(1, sizeof(sockaddr_in)));
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(src->addr);
    hints->src_addr = a;
    hints->src_addrlen = sizeof(sockaddr_in);
  }
  std::string svc = std::to_string(port);
  fi_info* info = nullptr;
  int rc =
      fi_getinfo(kFiVersion, node.c_str(), svc.c_str(), source ? FI_SOURCE : 0, hints.get(), &info);
  if (rc != 0 || !info)
    return Status(Code::kUnreachable,
                  "libfabric provider '" + fo.provider + "'" +
                      (fo.domain.empty() ? "" : " (domain '" + fo.domain + "')") +
                      " offers nothing for " + node + ": fi_getinfo: " + fi_error(rc));
  return InfoPtr(info);
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

}  // namespace

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
        sink_registrations{0};
  } counters_;

  // ---- used by FabConn (in an I/O pass unless said) ----
  const std::vector<Nid>& node_nids() const { return node_nids_; }
  void forget(FabConn* c);

  TransportOptions opts_;
  FabricOptions fopts_;
  Clock& clock_;
  TransportEvents& events_;

 private:
  void loop();
  // One I/O pass: posted work, the event and completion queues of every NI, and every
  // 10 ms the deadlines. The caller holds io_mu_.
  size_t run_once();
  size_t poll_cq(FabNi& ni);
  size_t poll_eq(FabNi& ni);
  size_t run_posted();
  void sleep_once();
  // Whether any connection has an RMA under way (FabricOptions::rma_poll). Takes io_mu_.
  bool rma_under_way();
  void check_deadlines();
  // Runs `fn` on the I/O thread and waits for it (bounded).
  Status run_on_io(std::function<Status()> fn);
  Result<FabNi*> ni_for(const Nid& local, uint16_t listen_port);
  void accept(FabNi& ni, fi_eq_cm_entry* entry, size_t data_len);
  std::shared_ptr<FabConn> conn_of(fid_t f);

  std::vector<Nid> node_nids_;
  // Held by whichever thread runs an I/O pass: the I/O thread, or a waiter in progress().
  // What the comments below call "the I/O thread" is that holder.
  Mutex io_mu_;
  std::vector<std::unique_ptr<FabNi>> nis_;                       // I/O thread
  std::unordered_map<FabConn*, std::shared_ptr<FabConn>> conns_;  // I/O thread
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::shared_ptr<FabConn>>>
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

namespace {

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

  FabConn(FabricTransport::Impl& t, FabNi& ni, bool outgoing, uint64_t id) : t_(t), ni_(ni) {
    local_ = ni.nid;
    outgoing_ = outgoing;
    id_ = id;
    msg_size_ = t.fopts_.msg_size;
    rx_depth_ = t.fopts_.rx_depth;
    tx_bufs_ = rx_depth_ + 4;
  }
  ~FabConn() override {
    close_fid(rx_mr_ ? &rx_mr_->fid : nullptr);
    close_fid(tx_mr_ ? &tx_mr_->fid : nullptr);
    for (Op* op : reads_) delete op;
    for (Op* op : writes_) delete op;
  }

  // ---- Connection ----
  void send(std::unique_ptr<OutFrame> f) override {
    std::vector<Done> done;
    {
      MutexLock lk(tx_mu_);
      if (tx_closed_) {
        done.push_back({std::move(f), closed_status_locked(), {}});
      } else {
        txq_.push_back(TxItem{std::move(f)});
        plan_sink_write_locked(txq_.back());
        pump_locked(&done);
      }
    }
    finish(done);
  }
  void close(const Status& why) override {
    auto self = shared_from_this();
    t_.post([self, why] { self->begin_close(why); });
  }
  void post(std::function<void()> fn) override { t_.post(std::move(fn)); }
  bool is_open() const override { return state_.load() == kOpen; }

  // ---- set-up (I/O thread) ----
  int state() const { return state_.load(); }
  // Of connecting, the handshake, or a local close's wait.
  TimePoint deadline() const { return deadline_; }
  void set_deadline(TimePoint t) { deadline_ = t; }
  void set_connect_cb(ConnectCallback cb) { cb_ = std::move(cb); }

  // Opens the endpoint for `info`, registers and posts the receive buffers.
  Status open_endpoint(fi_info* info) {
    int rc = fi_endpoint(ni_.domain, info, &ep_, this);
    if (rc == 0) rc = fi_ep_bind(ep_, &ni_.eq->fid, 0);
    if (rc == 0) rc = fi_ep_bind(ep_, &ni_.cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc == 0) rc = fi_enable(ep_);
    if (rc != 0) return Status(Code::kInternal, "fabric endpoint: " + fi_error(rc));
    rx_mem_ = std::make_unique<uint8_t[]>(size_t(rx_depth_) * msg_size_);
    tx_mem_ = std::make_unique<uint8_t[]>(size_t(tx_bufs_) * msg_size_);
    if (ni_.mr_mode & FI_MR_LOCAL) {
      rc = fi_mr_reg(ni_.domain, rx_mem_.get(), size_t(rx_depth_) * msg_size_, FI_RECV, 0,
                     ni_.dom->next_key(), 0, &rx_mr_, nullptr);
      if (rc == 0)
        rc = fi_mr_reg(ni_.domain, tx_mem_.get(), size_t(tx_bufs_) * msg_size_, FI_SEND, 0,
                       ni_.dom->next_key(), 0, &tx_mr_, nullptr);
      if (rc != 0) return Status(Code::kInternal, "registering message buffers: " + fi_error(rc));
    }
    rx_ops_.resize(rx_depth_);
    tx_ops_.resize(tx_bufs_);
    MutexLock lk(tx_mu_);
    tx_inflight_.resize(tx_bufs_);
    for (uint32_t i = 0; i < tx_bufs_; ++i) {
      tx_ops_[i].kind = OpKind::kSend;
      tx_ops_[i].conn = this;
      tx_ops_[i].index = i;
      tx_free_.push_back(tx_bufs_ - 1 - i);
    }
    for (uint32_t i = 0; i < rx_depth_; ++i) {
      rx_ops_[i].kind = OpKind::kRecv;
      rx_ops_[i].conn = this;
      rx_ops_[i].index = i;
      rc = static_cast<int>(post_recv(i));
      if (rc != 0) return Status(Code::kInternal, "posting receives: " + fi_error(rc));
    }
    return Status::Ok();
  }
  fid_ep* ep() const { return ep_; }

  // The peer's parameters (connection manager data): its credits and message size.
  void set_peer_params(const ConnParams& p) {
    MutexLock lk(tx_mu_);
    credits_ = p.rx_depth;
    send_limit_ = std::min(msg_size_, p.msg_size);
  }

  // FI_CONNECTED: the handshake starts (the client speaks first).
  void on_connected_event() {
    state_.store(kHandshake);
    if (!outgoing_) return;
    hs_mine_ = client_hello(announced_nids(local_, t_.node_nids()));
    send_hs(FrameKind::kHello, encode_hello(hs_mine_));
    hs_step_ = 1;
  }

  // ---- completions (I/O thread) ----
  void on_recv(uint32_t i, size_t len) {
    if (state_.load() == kClosed) return;
    uint16_t returned = 0;
    Status s = handle_message(std::span<const uint8_t>(rx_buf(i), len), &returned);
    if (state_.load() == kClosed) return;
    if (ssize_t rc = post_recv(i); rc != 0) {
      do_close(Status(Code::kClosed, "reposting a receive: " + fi_error(rc)));
      return;
    }
    if (!s.ok()) {
      PFS_LOG_WARN("closing fabric connection {}: {}", describe(), s.message());
      do_close(s);
      return;
    }
    std::vector<Done> done;
    {
      MutexLock lk(tx_mu_);
      credits_ += returned;
      ++owed_;  // the buffer is posted again: told on the next message (or a NOOP)
      pump_locked(&done);
    }
    finish(done);
    deliver_ready();
  }

  void on_send_done(uint32_t i) {
    std::vector<Done> done;
    bool close_now = false;
    {
      MutexLock lk(tx_mu_);
      Inflight& in = tx_inflight_[i];
      if (in.frame)
        done.push_back({std::move(in.frame), Status::Ok(), {in.start, t_.clock_.now()}});
      close_now = in.close_after;
      in.close_after = false;
      tx_free_.push_back(i);
      pump_locked(&done);
    }
    finish(done);
    if (close_now) do_close(fail_connect_);
    maybe_closed();
  }

  void on_read_done(Op* op, bool ok) {
    reads_.erase(std::find(reads_.begin(), reads_.end(), op));
    uint64_t seq = op->seq;
    delete op;
    if (state_.load() == kClosed) return;
    PendingRx& p = rxq_[seq - rx_front_seq_];
    p.failed |= !ok;
    if (--p.waits > 0) return;
    p.frame.times.complete = t_.clock_.now();
    queue_control(FabricMsg::kRmaDone, p.cookie, p.failed ? kRmaFailed : 0);
    if (p.failed) {
      do_close(Status(Code::kClosed, "reading a frame's data from " + describe() + " failed",
                      HealthKind::kPeerNiConnectError));
      return;
    }
    deliver_ready();
  }

  // An RMA write of a reply's bulk into the peer's sink completed (or failed: the
  // connection then closes); the reply's message may go.
  void on_write_done(Op* op, bool ok) {
    std::vector<Done> done;
    {
      MutexLock lk(tx_mu_);
      writes_.erase(std::find(writes_.begin(), writes_.end(), op));
      for (auto& it : txq_)
        if (it.write == TxItem::Write::kPosted && it.write_id == op->seq) {
          it.write = ok ? TxItem::Write::kDone : TxItem::Write::kNone;
          break;
        }
      if (ok) pump_locked(&done);
    }
    delete op;
    finish(done);
  }

  void on_op_error(Op* op, int err, const std::string& what) {
    OpKind kind = op->kind;
    if (kind == OpKind::kRead) {
      on_read_done(op, false);
      return;
    }
    if (kind == OpKind::kWrite) on_write_done(op, false);  // deletes op
    if (state_.load() == kClosed || err == FI_ECANCELED) return;
    fail(FabricSite::kCompletion, err,
         "fabric " +
             std::string(kind == OpKind::kSend    ? "send"
                         : kind == OpKind::kWrite ? "RMA write"
                                                  : "receive") +
             " on " + describe() + " failed: " + what);
  }

  // A fabric error (LNet health's table, fabric_health.h): the connection closes with the
  // health kind it implies; a local device gone first takes the NI out of selection, so
  // what the close fails is resent elsewhere.
  void fail(FabricSite site, int err, const std::string& what) {
    HealthKind kind = fabric_health_kind(site, err);
    Status why(site == FabricSite::kConnect ? Code::kUnreachable : Code::kClosed, what, kind);
    if (kind == HealthKind::kLocalNiDown) t_.events_.on_local_ni_down(local_, why);
    do_close(why);
  }

  // A local close of an open connection: nothing more is sent (what is queued fails now);
  // what was posted waits for its outcome, at most kCloseWait.
  void begin_close(const Status& why) {
    int expect = kOpen;
    if (!state_.compare_exchange_strong(expect, kClosing)) {
      if (expect != kClosing) do_close(why);
      return;
    }
    closing_why_ = why;
    deadline_ = t_.clock_.now() + kCloseWait;
    std::vector<Done> done;
    {
      MutexLock lk(tx_mu_);
      stop_sending_locked(why, &done);
    }
    finish(done);
    maybe_closed();
  }

  // No new frames (the first reason given stays); the queued ones fail.
  void stop_sending_locked(const Status& why, std::vector<Done>* done) REQUIRES(tx_mu_) {
    if (!tx_closed_) {
      tx_closed_ = true;
      close_reason_ = why.message();
      close_kind_ = why.health_kind();
    }
    Status s = closed_status_locked();
    for (auto& it : txq_)
      if (it.frame) done->push_back({std::move(it.frame), s, {}});
    txq_.clear();
  }

  // Closing, and nothing posted is waiting for its outcome: closed.
  void maybe_closed() {
    if (state_.load() != kClosing) return;
    {
      MutexLock lk(tx_mu_);
      for (auto& in : tx_inflight_)
        if (in.frame) return;
      if (!rma_sends_.empty()) return;
    }
    do_close(closing_why_);
  }

  // Closes: fails every frame not yet sent or acknowledged, tells the net (once, if it
  // was open) or the connect callback (if it never opened).
  void do_close(const Status& why) {
    int prev = state_.exchange(kClosed);
    if (prev == kClosed) return;
    std::vector<Done> done;
    {
      MutexLock lk(tx_mu_);
      ep_gone_ = true;
      stop_sending_locked(why, &done);
      Status s = closed_status_locked();
      for (auto& in : tx_inflight_)
        if (in.frame) done.push_back({std::move(in.frame), s, {}});
      for (auto& [cookie, r] : rma_sends_) {
        done.push_back({std::move(r.frame), s, {}});
      }
      rma_sends_.clear();
    }
    if (ep_) {
      fi_shutdown(ep_, 0);
      fi_close(&ep_->fid);
      ep_ = nullptr;
    }
    {
      // The endpoint is gone: no write can reach the offered sinks any more.
      MutexLock lk(tx_mu_);
      offered_.clear();
      offered_bytes_ = 0;
      peer_sinks_.clear();
    }
    finish(done);
    if (prev == kOpen || prev == kClosing) {
      PFS_LOG_INFO("connection {} closed: {}", describe(), why.message());
      t_.events_.on_closed(*this, why);
    } else if (outgoing_ && cb_) {
      std::string target = peer_nids_.empty() ? "?" : peer_nids_[0].to_string();
      PFS_LOG_WARN_LIMITED("connect " + local_.to_string() + " -> " + target + " failed",
                           "connect {} -> {} failed: {}", local_.to_string(), target,
                           why.to_string());
      auto cb = std::move(cb_);
      cb_ = nullptr;
      cb(why);
    }
    t_.forget(this);
  }

 private:
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

  void queue_control(FabricMsg type, uint64_t cookie, uint8_t flags) {
    std::vector<Done> done;
    {
      MutexLock lk(tx_mu_);
      if (ep_gone_) return;
      txq_.push_back(TxItem{nullptr, type, cookie, flags});
      pump_locked(&done);
    }
    finish(done);
  }

  // Handshake frames go like any other, before the connection opens.
  void send_hs(FrameKind kind, Buffer payload, bool close_after = false) {
    auto f = std::make_unique<OutFrame>();
    f->hdr.kind = kind;
    f->hdr.src_nid = local_.pack();
    f->hdr.dst_nid = peer_nids_.empty() ? 0 : peer_nids_[0].pack();
    f->payload = std::move(payload);
    f->credits_set = true;
    std::vector<Done> done;
    {
      MutexLock lk(tx_mu_);
      TxItem it{std::move(f)};
      it.close_after = close_after;
      txq_.push_back(std::move(it));
      pump_locked(&done);
    }
    finish(done);
  }

  // Sends what the queue holds while send buffers and credits last, then returns owed
  // credits on a NOOP once half the window is owed and nothing else can carry them (the
  // queue is empty or waits for credits). The last credit is kept for that NOOP
  // (o2iblnd's rule: two ends out of credits, each owing the other, would otherwise wait
  // for ever).
  void pump_locked(std::vector<Done>* done) REQUIRES(tx_mu_) {
    while (!txq_.empty() && !tx_free_.empty() && !ep_gone_ && credits_ >= 2) {
      TxItem& it = txq_.front();
      if (it.write == TxItem::Write::kToPost || it.write == TxItem::Write::kPosted) break;
      std::optional<Status> r = post_item(it, tx_free_.back());
      if (!r) break;  // the provider's queue is full: on the next completion
      tx_free_.pop_back();
      if (!r->ok() && it.frame) done->push_back({std::move(it.frame), *r, {}});
      txq_.pop_front();
    }
    // Then writes into the peer's sinks, in queue order (kMaxWritesPosted at once); they
    // take no credit, and the messages just posted do not wait behind them.
    for (auto k = txq_.begin();
         writes_to_post_ > 0 && writes_.size() < kMaxWritesPosted && !ep_gone_ && k != txq_.end();
         ++k)
      if (k->write == TxItem::Write::kToPost && !post_write_locked(*k)) return;
    if (owed_ >= std::max<uint32_t>(1, rx_depth_ / 2) && credits_ >= 1 && !tx_free_.empty() &&
        !ep_gone_) {
      TxItem noop{nullptr, FabricMsg::kNoop};
      if (post_item(noop, tx_free_.back())) tx_free_.pop_back();
    }
  }

  // A reply queued: when its request offered a sink (and the bulk would not fit a message),
  // the bulk is to be written there. Any reply ends the use of its request's sink here.
  void plan_sink_write_locked(TxItem& it) REQUIRES(tx_mu_) {
    const OutFrame& f = *it.frame;
    if (f.hdr.kind != FrameKind::kReply || peer_sinks_.empty()) return;
    auto ps = peer_sinks_.find(f.hdr.xid);
    if (ps == peer_sinks_.end()) return;
    RmaDesc d = ps->second;
    peer_sinks_.erase(ps);
    size_t n = f.bulk_size();
    if (n == 0 || n > d.len ||
        kFabricHeaderSize + kHeaderSize + f.payload.size() + n <= send_limit_)
      return;
    it.write = TxItem::Write::kToPost;
    it.sink = d;
    it.write_id = next_write_++;
    ++writes_to_post_;
  }

  // Posts the RMA write of `it`'s bulk into the peer's sink. False: the provider's queue
  // is full (on the next completion). A write that cannot be posted otherwise leaves the
  // bulk to go the usual way (the peer reads it).
  bool post_write_locked(TxItem& it) REQUIRES(tx_mu_) {
    const OutFrame& f = *it.frame;
    auto* op = new Op;
    op->kind = OpKind::kWrite;
    op->conn = this;
    op->seq = it.write_id;
    op->keep = f.bulk;
    void* desc = nullptr;
    ssize_t rc = 0;
    if (ni_.mr_mode & FI_MR_LOCAL) {
      op->reg = ni_.regs->get(f.bulk);
      if (op->reg)
        desc = fi_mr_desc(static_cast<fid_mr*>(op->reg->handle));
      else
        rc = -FI_ENOMEM;
    }
    if (rc == 0)
      rc = fi_write(ep_, f.bulk->data(), f.bulk_size(), desc, 0, it.sink.addr, it.sink.key,
                    &op->ctx);
    if (rc != 0) {
      delete op;
      if (rc == -FI_EAGAIN) return false;
      PFS_LOG_WARN("RMA write on {}: {}; the peer reads the bulk instead", describe(),
                   fi_error(rc));
      it.write = TxItem::Write::kNone;
      --writes_to_post_;
      return true;
    }
    writes_.push_back(op);
    it.write = TxItem::Write::kPosted;
    --writes_to_post_;
    t_.counters_.sink_writes.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // A request that expects reply bulk too large for a message offers a registered sink
  // for it (the same one again when it is sent again); nullopt: none (no room, no pool).
  std::optional<RmaDesc> offer_sink_locked(const OutFrame& f) REQUIRES(tx_mu_) {
    if (f.hdr.kind != FrameKind::kRequest || f.reply_sink == 0) return std::nullopt;
    size_t n = std::min<size_t>(f.reply_sink, t_.opts_.limits.max_bulk);
    if (kFabricHeaderSize + kHeaderSize + n <= send_limit_) return std::nullopt;
    auto o = offered_.find(f.hdr.xid);
    if (o == offered_.end()) {
      if (offered_bytes_ + n > kMaxOfferBytes) return std::nullopt;
      auto sink = ni_.sinks->take(n);
      if (!sink || !sink->handle) return std::nullopt;
      o = offered_
              .emplace(f.hdr.xid, Offer{std::move(sink->buf), static_cast<fid_mr*>(sink->handle), n,
                                        t_.clock_.now()})
              .first;
      offered_bytes_ += n;
      t_.counters_.sinks_offered.fetch_add(1, std::memory_order_relaxed);
    }
    RmaDesc d;
    d.addr =
        (ni_.mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(o->second.sink.data()) : 0;
    d.key = fi_mr_key(o->second.mr);
    d.len = o->second.sink.size();
    return d;
  }

  // Encodes `it` into send buffer `i` and posts it. nullopt: the provider's queue is full,
  // try again later (nothing was taken).
  std::optional<Status> post_item(TxItem& it, uint32_t i) REQUIRES(tx_mu_) {
    uint8_t* b = tx_buf(i);
    FabricHeader fh;
    fh.type = it.type;
    fh.flags = it.flags;
    fh.cookie = it.cookie;
    size_t len = kFabricHeaderSize;
    RmaSend rma;
    uint32_t net_credits = 0;
    bool took_net_credits = false;
    if (it.frame) {
      OutFrame& f = *it.frame;
      FrameHeader hdr = f.hdr;
      hdr.payload_len = static_cast<uint32_t>(f.payload.size());
      hdr.bulk_len = static_cast<uint32_t>(f.bulk_size());
      if (!f.credits_set) {
        net_credits = take_credits_to_return();
        took_net_credits = true;
        hdr.credits = net_credits;
      }
      // The bulk here, unless it went into the peer's sink already.
      bool in_sink = it.write == TxItem::Write::kDone;
      size_t bulk = in_sink ? 0 : f.bulk_size();
      std::optional<RmaDesc> offer = offer_sink_locked(f);
      size_t tail = offer ? kRmaDescSize : 0;
      if (in_sink) fh.flags |= kBulkInSink;
      if (offer) fh.flags |= kSinkOffered;
      size_t whole = kFabricHeaderSize + kHeaderSize + f.payload.size() + bulk + tail;
      EncodedHeader eh;
      encode_header(hdr, &eh);
      std::memcpy(b + len, eh.data(), kHeaderSize);
      len += kHeaderSize;
      if (whole <= send_limit_) {
        fh.type = FabricMsg::kFrame;
        if (!f.payload.empty()) std::memcpy(b + len, f.payload.data(), f.payload.size());
        len += f.payload.size();
        if (bulk) std::memcpy(b + len, f.bulk->data(), bulk);
        len += bulk;
      } else {
        fh.type = FabricMsg::kFrameRma;
        fh.cookie = next_cookie_++;
        bool payload_rma =
            len + f.payload.size() + 2 * kRmaDescSize + tail > send_limit_ && !f.payload.empty();
        const void* part[2] = {payload_rma ? f.payload.data() : nullptr,
                               bulk ? f.bulk->data() : nullptr};
        size_t part_len[2] = {payload_rma ? f.payload.size() : 0, bulk};
        if (!payload_rma) {
          if (!f.payload.empty()) std::memcpy(b + len, f.payload.data(), f.payload.size());
          len += f.payload.size();
        }
        for (int k = 0; k < 2; ++k) {
          if (!part[k]) continue;
          // The bulk (shared, immutable) through the NI's cache; the payload (this frame's
          // own) on its own.
          rma.reg[k] = k == 1 ? ni_.regs->get(f.bulk)
                              : ni_.regs->register_once(f.payload.data(), f.payload.size());
          if (!rma.reg[k]) {
            if (took_net_credits) add_credits_to_return(net_credits);
            return Status(Code::kInternal, "registering a frame for RMA failed");
          }
          RmaDesc d;
          d.addr = (ni_.mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(part[k]) : 0;
          d.key = fi_mr_key(static_cast<fid_mr*>(rma.reg[k]->handle));
          d.len = part_len[k];
          encode_rma_desc(d, b + len);
          len += kRmaDescSize;
          fh.flags |= k == 0 ? kRmaPayload : kRmaBulk;
        }
      }
      if (offer) {
        encode_rma_desc(*offer, b + len);
        len += kRmaDescSize;
      }
    }
    fh.credits = static_cast<uint16_t>(std::min<uint32_t>(owed_, 0xffff));
    fh.body_len = static_cast<uint32_t>(len - kFabricHeaderSize);
    encode_fabric_header(fh, b);
    TimePoint start = t_.clock_.now();
    // An injected completion error (inject_fault) takes the place of this send.
    int injected =
        it.frame && state_.load() == kOpen ? t_.take_injected(FabricSite::kCompletion) : 0;
    ssize_t rc = injected ? 0 : fi_send(ep_, b, len, tx_desc(), 0, &tx_ops_[i].ctx);
    if (rc != 0) {
      if (took_net_credits) add_credits_to_return(net_credits);
      if (rc == -FI_EAGAIN) return std::nullopt;
      return Status(Code::kClosed, "fabric send on " + describe() + ": " + fi_error(rc));
    }
    owed_ -= fh.credits;
    --credits_;
    Inflight& in = tx_inflight_[i];
    in.start = start;
    in.close_after = it.close_after;
    if (fh.type == FabricMsg::kFrameRma) {
      rma.frame = std::move(it.frame);
      rma.start = start;
      rma_sends_.emplace(fh.cookie, std::move(rma));
    } else {
      in.frame = std::move(it.frame);
    }
    if (injected)
      t_.post([self = shared_from_this(), i, injected] {
        self->on_op_error(&self->tx_ops_[i], injected, "injected " + fi_error(injected));
      });
    return Status::Ok();
  }

  // One received message (I/O thread); `returned`: the credits it brought back.
  Status handle_message(std::span<const uint8_t> msg, uint16_t* returned) {
    auto fh = decode_fabric_header(msg);
    if (!fh.ok()) return fh.status();
    *returned = fh->credits;
    std::span<const uint8_t> body = msg.subspan(kFabricHeaderSize);
    switch (fh->type) {
      case FabricMsg::kNoop:
        return Status::Ok();
      case FabricMsg::kRmaDone: {
        std::vector<Done> done;
        {
          MutexLock lk(tx_mu_);
          auto it = rma_sends_.find(fh->cookie);
          if (it == rma_sends_.end())
            return Status(Code::kProtocol, "RMA done for an unknown frame");
          Status s = (fh->flags & kRmaFailed)
                         ? Status(Code::kClosed, "the peer could not read the frame's data",
                                  HealthKind::kPeerNiConnectError)
                         : Status::Ok();
          done.push_back({std::move(it->second.frame), s, {it->second.start, t_.clock_.now()}});
          rma_sends_.erase(it);
        }
        finish(done);
        maybe_closed();
        return Status::Ok();
      }
      case FabricMsg::kFrame:
      case FabricMsg::kFrameRma:
        break;
    }
    auto m = decode_frame_msg(*fh, body, t_.opts_.limits);
    if (!m.ok()) return m.status();
    InFrame f;
    f.hdr = m->hdr;
    f.times.first_byte = t_.clock_.now();
    if (m->sink || m->hdr.kind == FrameKind::kReply) {
      if (state_.load() < kOpen) return Status(Code::kProtocol, "RPC frames before the handshake");
      Status s = take_sinks(*m, &f.bulk);
      if (!s.ok()) return s;
    }
    if (fh->type == FabricMsg::kFrame) {
      f.payload = Buffer::copy_of(m->payload);
      if (!m->bulk_in_sink) f.bulk = Buffer::copy_of(m->bulk);
      f.times.complete = f.times.first_byte;
      return handle_frame(std::move(f));
    }
    // kFrameRma: what is inline is copied now; the rest is read from the sender.
    if (state_.load() == kClosing) return Status::Ok();  // not taken: it fails at the sender
    if (state_.load() != kOpen) return Status(Code::kProtocol, "an RMA frame before the handshake");
    PendingRx p;
    p.cookie = fh->cookie;
    p.frame = std::move(f);
    if (!m->payload_rma) p.frame.payload = Buffer::copy_of(m->payload);
    uint64_t seq = rx_front_seq_ + rxq_.size();
    struct Read {
      RmaDesc d;
      uint8_t* dst;
      fid_mr* sink_mr;  // the sink's own registration (from the pool), or null
    };
    std::vector<Read> reads;
    for (int k = 0; k < 2; ++k) {
      const std::optional<RmaDesc>& d = k == 0 ? m->payload_rma : m->bulk_rma;
      if (!d) continue;
      // The sink: registered memory from the NI's pool; a plain buffer (registered for
      // this read alone) when it is larger than the pool's chunks.
      Buffer& into = k == 0 ? p.frame.payload : p.frame.bulk;
      fid_mr* sink_mr = nullptr;
      if (auto sink = ni_.sinks->take(d->len)) {
        into = std::move(sink->buf);
        sink_mr = static_cast<fid_mr*>(sink->handle);
      } else {
        into = Buffer(d->len);
      }
      reads.push_back(Read{*d, into.data(), sink_mr});
    }
    p.waits = static_cast<int>(reads.size());
    rxq_.push_back(std::move(p));
    for (auto& [d, dst, sink_mr] : reads) {
      auto* op = new Op;
      op->kind = OpKind::kRead;
      op->conn = this;
      op->seq = seq;
      void* desc = nullptr;
      if (sink_mr) {
        desc = fi_mr_desc(sink_mr);
      } else if (ni_.mr_mode & FI_MR_LOCAL) {
        op->reg = ni_.regs->register_once(dst, d.len);
        if (!op->reg) {
          delete op;
          return Status(Code::kInternal, "registering a receive buffer failed");
        }
        desc = fi_mr_desc(static_cast<fid_mr*>(op->reg->handle));
      }
      reads_.push_back(op);
      t_.counters_.rma_reads.fetch_add(1, std::memory_order_relaxed);
      ssize_t rc = fi_read(ep_, dst, d.len, desc, 0, d.addr, d.key, &op->ctx);
      if (rc != 0) {
        reads_.pop_back();
        delete op;
        return Status(Code::kClosed, "fabric read on " + describe() + ": " + fi_error(rc));
      }
    }
    return Status::Ok();
  }

  // The sinks of a frame: a request's offer is remembered for its reply (the oldest
  // forgotten beyond kMaxPeerSinks); a reply ends the offer of its request here, and
  // when the bulk was written into it, the sink becomes the frame's `bulk`.
  Status take_sinks(const FrameMsg& m, Buffer* bulk) {
    MutexLock lk(tx_mu_);
    if (m.sink) {
      peer_sinks_[m.hdr.xid] = *m.sink;
      if (peer_sinks_.size() > kMaxPeerSinks) peer_sinks_.erase(peer_sinks_.begin());
      return Status::Ok();
    }
    auto o = offered_.find(m.hdr.xid);
    if (m.bulk_in_sink && (o == offered_.end() || o->second.sink.size() < m.hdr.bulk_len))
      return Status(Code::kProtocol, "reply bulk in a sink that was not offered");
    if (o == offered_.end()) return Status::Ok();
    if (m.bulk_in_sink) {
      *bulk = std::move(o->second.sink);
      bulk->shrink_to(m.hdr.bulk_len);
    }
    offered_bytes_ -= o->second.bytes;
    offered_.erase(o);
    return Status::Ok();
  }

 public:
  // Whether an RMA this end takes part in is under way: a read or write it posted, or its
  // memory the peer may be reading (a frame sent by RMA) or writing (an offered sink).
  // I/O thread.
  bool rma_under_way() {
    MutexLock lk(tx_mu_);
    return !reads_.empty() || !writes_.empty() || !rma_sends_.empty() || !offered_.empty();
  }

  // Offered sinks whose reply never came back here (it took another path) are retired:
  // the peer might still hold their key. I/O thread.
  void expire_offers(TimePoint now) {
    MutexLock lk(tx_mu_);
    for (auto o = offered_.begin(); o != offered_.end();) {
      if (now - o->second.at < kOfferTime) {
        ++o;
        continue;
      }
      ni_.sinks->retire(o->second.sink.data());
      offered_bytes_ -= o->second.bytes;
      o = offered_.erase(o);
    }
  }

 private:
  // A whole frame: a handshake step, or in order for the net (dropped while closing).
  Status handle_frame(InFrame&& f) {
    if (state_.load() == kHandshake) return handshake_step(std::move(f));
    if (state_.load() == kClosing) return Status::Ok();
    if (state_.load() != kOpen) return Status(Code::kProtocol, "a frame before the connection");
    PendingRx p;
    p.frame = std::move(f);
    rxq_.push_back(std::move(p));
    return Status::Ok();
  }

  void deliver_ready() {
    while (!rxq_.empty() && rxq_.front().waits == 0 && state_.load() == kOpen) {
      InFrame f = std::move(rxq_.front().frame);
      rxq_.pop_front();
      ++rx_front_seq_;
      t_.events_.on_frame(*this, std::move(f));
    }
  }

  // The handshake of wire/handshake.h, one frame at a time.
  Status handshake_step(InFrame&& f) {
    if (f.hdr.kind == FrameKind::kReject) {
      std::string why(f.payload.view());
      PFS_LOG_ERROR("connection {} refused by the peer: {}", describe(), why);
      do_close(Status(Code::kRejected, "refused by " + describe() + ": " + why,
                      HealthKind::kPeerNiConnectionRejected));
      return Status::Ok();
    }
    if (outgoing_ && hs_step_ == 1) {
      if (f.hdr.kind != FrameKind::kHello) return Status(Code::kProtocol, "expected HELLO");
      auto sh = decode_hello(f.payload.span());
      if (!sh.ok()) return sh.status();
      if (!server_proof_ok(t_.opts_.cluster_key, hs_mine_, *sh)) {
        PFS_LOG_ERROR("refusing connection to {}: it does not hold our cluster key", describe());
        fail_connect_ = Status(Code::kRejected,
                               describe() + " does not hold the cluster key (wrong cluster key)",
                               HealthKind::kPeerNiConnectionRejected);
        send_hs(FrameKind::kReject, Buffer::copy_of(std::string_view("wrong cluster key")), true);
        hs_step_ = 3;
        return Status::Ok();
      }
      Mac mine = client_proof(t_.opts_.cluster_key, hs_mine_, *sh);
      hs_peer_ = std::move(*sh);
      send_hs(FrameKind::kAuth, Buffer::copy_of(std::span<const uint8_t>(mine)));
      hs_step_ = 2;
      return Status::Ok();
    }
    if (outgoing_ && hs_step_ == 2) {
      if (f.hdr.kind != FrameKind::kAuth) return Status(Code::kProtocol, "expected AUTH");
      established(hs_peer_.nids);
      return Status::Ok();
    }
    if (!outgoing_ && hs_step_ == 0) {
      if (f.hdr.kind != FrameKind::kHello) return Status(Code::kProtocol, "expected HELLO");
      auto ch = decode_hello(f.payload.span());
      if (!ch.ok()) return ch.status();
      hs_peer_ = *ch;
      set_peer_nids({ch->nids.front()});
      hs_mine_ = server_hello(t_.opts_.cluster_key, *ch, announced_nids(local_, t_.node_nids()));
      send_hs(FrameKind::kHello, encode_hello(hs_mine_));
      hs_step_ = 1;
      return Status::Ok();
    }
    if (!outgoing_ && hs_step_ == 1) {
      if (f.hdr.kind != FrameKind::kAuth || f.payload.size() != sizeof(Mac))
        return Status(Code::kProtocol, "expected AUTH");
      Mac theirs;
      std::memcpy(theirs.data(), f.payload.data(), theirs.size());
      if (!client_proof_ok(t_.opts_.cluster_key, hs_peer_, hs_mine_, theirs)) {
        PFS_LOG_ERROR_LIMITED(
            "refusing connection from " + hs_peer_.nids.front().to_string() + ": wrong cluster key",
            "refusing connection from {}: wrong cluster key", hs_peer_.nids.front().to_string());
        fail_connect_ = Status(Code::kRejected, "wrong cluster key");
        send_hs(FrameKind::kReject, Buffer::copy_of(std::string_view("wrong cluster key")), true);
        hs_step_ = 3;
        return Status::Ok();
      }
      send_hs(FrameKind::kAuth, Buffer());
      established(hs_peer_.nids);
      return Status::Ok();
    }
    return Status(Code::kProtocol, "a frame after the handshake failed");
  }

  void established(std::vector<Nid> peer_nids) {
    set_peer_nids(std::move(peer_nids));
    state_.store(kOpen);
    auto self = shared_from_this();
    t_.events_.on_connected(self);
    if (cb_) {
      auto cb = std::move(cb_);
      cb_ = nullptr;
      cb(ConnectionPtr(self));
    }
  }

 public:
  void set_peer_nids(std::vector<Nid> n) { peer_nids_ = std::move(n); }
  // A client that refused the server's proof closes once its REJECT is sent; the
  // connect callback gets this.
  Status fail_connect_;

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
  int hs_step_ = 0;
  Hello hs_mine_, hs_peer_;  // this end's HELLO and the peer's
  TimePoint deadline_{};
  ConnectCallback cb_;
  Status closing_why_;
};

}  // namespace

// ---- the transport ----

FabricTransport::Impl::Impl(TransportOptions opts, FabricOptions fopts, std::vector<Nid> node_nids,
                            Clock& clock, TransportEvents& events)
    : opts_(std::move(opts)),
      fopts_(std::move(fopts)),
      clock_(clock),
      events_(events),
      node_nids_(std::move(node_nids)) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  evfd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = evfd_;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, evfd_, &ev);
  thread_ = std::thread([this] { loop(); });
}

void FabricTransport::Impl::post(std::function<void()> fn) {
  {
    MutexLock lk(mu_);
    posted_.push_back(std::move(fn));
  }
  if (sleeping_.load()) {
    uint64_t one = 1;
    ssize_t n = write(evfd_, &one, sizeof one);
    (void)n;
  }
}

Status FabricTransport::Impl::run_on_io(std::function<Status()> fn) {
  auto done = std::make_shared<std::promise<Status>>();
  auto fut = done->get_future();
  post([fn = std::move(fn), done] { done->set_value(fn()); });
  if (fut.wait_for(std::chrono::seconds(10)) != std::future_status::ready)
    return Status(Code::kTimeout, "the fabric I/O thread did not answer in 10 s");
  return fut.get();
}

namespace {
// Set while this thread runs an I/O pass of any fabric transport: a callback that waits
// for a reply must not start another pass (it would run callbacks inside callbacks).
thread_local bool tls_in_pass = false;
}  // namespace

size_t FabricTransport::Impl::run_once() {
  tls_in_pass = true;
  size_t n = run_posted();
  // The event queues carry only connection events, and reading one costs the tcp provider
  // a progress pass of its own (a quarter of a busy thread's time in a bulk stream): they
  // are read every kEqEvery passes and on the first pass after a sleep.
  bool eq = ++passes_ % kEqEvery == 0 || eq_due_.exchange(false, std::memory_order_relaxed);
  for (auto& ni : nis_) n += (eq ? poll_eq(*ni) : 0) + poll_cq(*ni);
  auto now = std::chrono::steady_clock::now();
  if (now - last_check_ >= std::chrono::milliseconds(10)) {
    check_deadlines();
    last_check_ = now;
  }
  tls_in_pass = false;
  return n;
}

bool FabricTransport::Impl::progress() {
  if (tls_in_pass || stopped_.load()) return false;
  if (!io_mu_.try_lock()) return false;
  size_t n = stopped_.load() ? 0 : run_once();
  io_mu_.unlock();
  return n > 0;
}

bool FabricTransport::Impl::rma_under_way() {
  MutexLock lk(io_mu_);
  for (auto& [p, c] : conns_)
    if (c->rma_under_way()) return true;
  return false;
}

void FabricTransport::Impl::loop() {
  auto last_work = std::chrono::steady_clock::now();
  // Whether an RMA was under way when the thread last ran out of work (-1: not asked since).
  int rma = -1;
  while (!quit_.load()) {
    size_t n;
    {
      MutexLock lk(io_mu_);
      n = run_once();
    }
    auto now = std::chrono::steady_clock::now();
    if (n > 0) {
      last_work = now;
      rma = -1;
      continue;
    }
    auto idle = now - last_work;
    if (idle < opts_.busy_poll) continue;
    if (opts_.busy_poll.count() > 0 && idle < fopts_.rma_poll) {
      if (rma < 0) rma = rma_under_way() ? 1 : 0;
      if (rma) continue;
    }
    sleep_once();
  }
}

size_t FabricTransport::Impl::run_posted() {
  std::deque<std::function<void()>> q;
  {
    MutexLock lk(mu_);
    q.swap(posted_);
  }
  for (auto& fn : q) fn();
  return q.size();
}

void FabricTransport::Impl::sleep_once() {
  sleeping_.store(true);
  bool may_wait;
  {
    MutexLock lk(mu_);
    may_wait = posted_.empty();
  }
  {
    MutexLock lk(io_mu_);
    for (auto& ni : nis_) {
      if (!may_wait) break;
      fid* fids[2] = {&ni->cq->fid, &ni->eq->fid};
      may_wait = fi_trywait(ni->fabric, fids, 2) == FI_SUCCESS;
    }
  }
  if (may_wait) {
    epoll_event evs[8];
    epoll_wait(epfd_, evs, 8, 10);  // 10 ms: deadlines are checked that often
  }
  sleeping_.store(false);
  eq_due_.store(true, std::memory_order_relaxed);
  uint64_t v;
  while (read(evfd_, &v, sizeof v) > 0) {
  }
}

size_t FabricTransport::Impl::poll_cq(FabNi& ni) {
  fi_cq_msg_entry e[kCqBatch];
  ssize_t n = fi_cq_read(ni.cq, e, kCqBatch);
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    if (fi_cq_readerr(ni.cq, &err, 0) < 0) return 0;
    auto* op = static_cast<Op*>(err.op_context);
    if (!op) return 1;
    char buf[256];
    const char* what = fi_cq_strerror(ni.cq, err.prov_errno, err.err_data, buf, sizeof buf);
    op->conn->on_op_error(op, err.err, what ? what : fi_error(err.err));
    return 1;
  }
  if (n <= 0) return 0;
  for (ssize_t k = 0; k < n; ++k) {
    auto* op = static_cast<Op*>(e[k].op_context);
    switch (op->kind) {
      case OpKind::kRecv:
        op->conn->on_recv(op->index, e[k].len);
        break;
      case OpKind::kSend:
        op->conn->on_send_done(op->index);
        break;
      case OpKind::kRead:
        op->conn->on_read_done(op, true);
        break;
      case OpKind::kWrite:
        op->conn->on_write_done(op, true);
        break;
    }
  }
  return static_cast<size_t>(n);
}

std::shared_ptr<FabConn> FabricTransport::Impl::conn_of(fid_t f) {
  if (!f) return nullptr;
  auto it = conns_.find(static_cast<FabConn*>(f->context));
  return it == conns_.end() ? nullptr : it->second;
}

size_t FabricTransport::Impl::poll_eq(FabNi& ni) {
  alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + kMaxCmData];
  uint32_t event = 0;
  ssize_t rd = fi_eq_read(ni.eq, &event, buf, sizeof buf, 0);
  if (rd == -FI_EAGAIN) return 0;
  if (rd == -FI_EAVAIL) {
    fi_eq_err_entry err{};
    if (fi_eq_readerr(ni.eq, &err, 0) < 0) return 0;
    if (auto c = conn_of(err.fid))
      c->fail(c->state() < FabConn::kOpen ? FabricSite::kConnect : FabricSite::kCompletion, err.err,
              "connect: " + fi_error(err.err));
    if (err.fid == &ni.pep->fid)
      PFS_LOG_WARN("fabric listener on {}: {}", ni.nid.to_string(), fi_error(err.err));
    return 1;
  }
  if (rd < 0) return 0;
  auto* entry = reinterpret_cast<fi_eq_cm_entry*>(buf);
  size_t data_len = size_t(rd) > sizeof(fi_eq_cm_entry) ? size_t(rd) - sizeof(fi_eq_cm_entry) : 0;
  switch (event) {
    case FI_CONNREQ:
      accept(ni, entry, data_len);
      break;
    case FI_CONNECTED:
      if (auto c = conn_of(entry->fid)) {
        if (c->outgoing()) {
          auto p = decode_conn_params({entry->data, data_len});
          if (!p.ok()) {
            c->do_close(
                Status(Code::kProtocol, p.status().message(), HealthKind::kPeerNiConnectError));
            break;
          }
          c->set_peer_params(*p);
        }
        c->on_connected_event();
      }
      break;
    case FI_SHUTDOWN:
      if (auto c = conn_of(entry->fid)) {
        // What the peer sent before it closed is in the completion queue: taken first.
        for (int i = 0; i < 1000 && poll_cq(ni) > 0; ++i) {
        }
        c->do_close(Status(Code::kClosed, "closed by peer"));
      }
      break;
    default:
      break;
  }
  return 1;
}

void FabricTransport::Impl::accept(FabNi& ni, fi_eq_cm_entry* entry, size_t data_len) {
  InfoPtr info(entry->info);
  auto p = decode_conn_params({entry->data, data_len});
  if (!p.ok()) {
    PFS_LOG_WARN("refusing a fabric connection on {}: {}", ni.nid.to_string(),
                 p.status().message());
    fi_reject(ni.pep, info->handle, nullptr, 0);
    return;
  }
  auto c = std::make_shared<FabConn>(*this, ni, false, new_connection_id());
  Status s = c->open_endpoint(info.get());
  if (!s.ok()) {
    PFS_LOG_WARN("refusing a fabric connection on {}: {}", ni.nid.to_string(), s.message());
    fi_reject(ni.pep, info->handle, nullptr, 0);
    return;
  }
  c->set_peer_params(*p);
  c->set_deadline(clock_.now() + opts_.handshake_timeout);
  conns_[c.get()] = c;
  auto mine = encode_conn_params({kFabricWireVersion, fopts_.rx_depth, fopts_.msg_size});
  if (int rc = fi_accept(c->ep(), mine.data(), mine.size()); rc != 0)
    c->do_close(Status(Code::kUnreachable, "fabric accept: " + fi_error(rc)));
}

void FabricTransport::Impl::check_deadlines() {
  TimePoint now = clock_.now();
  std::vector<std::shared_ptr<FabConn>> late;
  for (auto& [p, c] : conns_)
    if ((c->state() < FabConn::kOpen || c->state() == FabConn::kClosing) && c->deadline() <= now)
      late.push_back(c);
  for (auto& c : late)
    c->do_close(
        c->state() == FabConn::kClosing
            ? Status(Code::kClosed, "closed; no word of the last sends")
            : Status(Code::kUnreachable,
                     std::string(c->state() == FabConn::kConnecting ? "connect" : "handshake") +
                         " timed out",
                     HealthKind::kPeerNiUnreachable));
  if (now - last_offer_check_ >= std::chrono::seconds(1)) {
    last_offer_check_ = now;
    for (auto& [p, c] : conns_) c->expire_offers(now);
  }
  auto t = std::chrono::steady_clock::now();
  while (!graveyard_.empty() && t - graveyard_.front().first >= kGraveyardTime)
    graveyard_.pop_front();
}

void FabricTransport::Impl::forget(FabConn* c) {
  auto it = conns_.find(c);
  if (it == conns_.end()) return;
  graveyard_.emplace_back(std::chrono::steady_clock::now(), std::move(it->second));
  conns_.erase(it);
}

Result<FabNi*> FabricTransport::Impl::ni_for(const Nid& local, uint16_t listen_port) {
  for (auto& ni : nis_)
    if (ni->nid == local) return ni.get();
  auto info = get_info(fopts_, local.address_string(), listen_port, true);
  if (!info.ok()) return info.status();
  auto ni = std::make_unique<FabNi>();
  ni->nid = local;
  ni->info = std::move(*info);
  fi_info* fi = ni->info.get();
  ni->mr_mode = fi->domain_attr->mr_mode;
  ni->dom = std::make_shared<FabDomain>();
  int rc = fi_fabric(fi->fabric_attr, &ni->dom->fabric, nullptr);
  if (rc == 0) rc = fi_domain(ni->dom->fabric, fi, &ni->dom->domain, nullptr);
  ni->fabric = ni->dom->fabric;
  ni->domain = ni->dom->domain;
  fi_eq_attr eqa{};
  eqa.size = 64;
  eqa.wait_obj = FI_WAIT_FD;
  if (rc == 0) rc = fi_eq_open(ni->fabric, &eqa, &ni->eq, nullptr);
  fi_cq_attr cqa{};
  cqa.size = 4096;
  cqa.format = FI_CQ_FORMAT_MSG;
  cqa.wait_obj = FI_WAIT_FD;
  if (rc == 0) rc = fi_cq_open(ni->domain, &cqa, &ni->cq, nullptr);
  int fds[2] = {-1, -1};
  if (rc == 0) rc = fi_control(&ni->cq->fid, FI_GETWAIT, &fds[0]);
  if (rc == 0) rc = fi_control(&ni->eq->fid, FI_GETWAIT, &fds[1]);
  if (rc != 0)
    return Status(Code::kUnreachable, "libfabric provider '" + fopts_.provider + "' on " +
                                          local.address_string() + ": " + fi_error(rc));
  for (int fd : fds) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  }
  // Registration hooks of the NI's sink pool and registration cache: `access` in its
  // domain, counted in `count`. They hold the domain: a registration is closed before it,
  // even when a sink or an RMA outlives the NI. (`count` is this transport's: reg runs only
  // in RegPool::take and RegCache::get, which only this transport calls.)
  auto reg = [dom = ni->dom](uint64_t access, std::atomic<uint64_t>* count) {
    return [dom, access, count](const uint8_t* p, size_t n) -> void* {
      fid_mr* mr = nullptr;
      int rc = fi_mr_reg(dom->domain, p, n, access, 0, dom->next_key(), 0, &mr, nullptr);
      count->fetch_add(1, std::memory_order_relaxed);
      return rc == 0 ? mr : nullptr;
    };
  };
  auto unreg = [dom = ni->dom](void* mr) { fi_close(&static_cast<fid_mr*>(mr)->fid); };
  // Sinks are registered whatever the provider's mode: the peer writes reply bulk into
  // them (remote access needs a key).
  RegPool::Hooks hooks{reg(FI_READ | FI_REMOTE_WRITE, &counters_.sink_registrations), unreg};
  ni->regs = std::make_unique<RegCache>(
      RegCache::Hooks{reg(FI_READ | FI_WRITE | FI_REMOTE_READ, &counters_.registrations), unreg},
      kRegCacheEntries);
  size_t max_sink =
      std::bit_ceil(size_t(std::max(opts_.limits.max_payload, opts_.limits.max_bulk)));
  ni->sinks = RegPool::make(std::move(hooks), max_sink, kSinkIdleCap);
  nis_.push_back(std::move(ni));
  return nis_.back().get();
}

Status FabricTransport::Impl::listen(const Nid& local, uint16_t port) {
  return run_on_io([this, local, port]() -> Status {
    auto ni = ni_for(local, port);
    if (!ni.ok()) return ni.status();
    FabNi& n = **ni;
    if (n.pep) return Status(Code::kInvalidArgument, "already listening on " + local.to_string());
    // The NI's info was resolved for this address and port (FI_SOURCE).
    int rc = fi_passive_ep(n.fabric, n.info.get(), &n.pep, &n);
    if (rc == 0) rc = fi_pep_bind(n.pep, &n.eq->fid, 0);
    if (rc == 0) rc = fi_listen(n.pep);
    if (rc != 0) {
      close_fid(n.pep ? &n.pep->fid : nullptr);
      n.pep = nullptr;
      return Status(Code::kUnreachable, "cannot listen on " + local.address_string() + ":" +
                                            std::to_string(port) + " (libfabric " +
                                            fopts_.provider + "): " + fi_error(rc));
    }
    return Status::Ok();
  });
}

void FabricTransport::Impl::connect(const Nid& local, const Nid& remote, uint16_t port,
                                    ConnectCallback cb) {
  post([this, local, remote, port, cb = std::move(cb)]() mutable {
    if (stopped_.load()) {
      cb(Status(Code::kCancelled, "transport stopped"));
      return;
    }
    auto ni = ni_for(local, 0);
    if (!ni.ok()) {
      cb(Status(Code::kUnreachable, ni.status().message(), HealthKind::kLocalNiDown));
      return;
    }
    auto info = get_info(fopts_, remote.address_string(), port, false, (*ni)->info.get(), &local);
    if (!info.ok()) {
      cb(Status(Code::kUnreachable, info.status().message(), HealthKind::kPeerNiAddrError));
      return;
    }
    auto c = std::make_shared<FabConn>(*this, **ni, true, new_connection_id());
    c->set_peer_nids({remote});
    c->set_connect_cb(std::move(cb));
    c->set_deadline(clock_.now() + opts_.connect_timeout + opts_.handshake_timeout);
    conns_[c.get()] = c;
    Status s = c->open_endpoint(info->get());
    if (!s.ok()) {
      c->do_close(Status(Code::kUnreachable, s.message(), HealthKind::kLocalNiDown));
      return;
    }
    if (int err = take_injected(FabricSite::kConnect)) {
      c->fail(FabricSite::kConnect, err,
              "connect to " + remote.to_string() + ": injected " + fi_error(err));
      return;
    }
    auto mine = encode_conn_params({kFabricWireVersion, fopts_.rx_depth, fopts_.msg_size});
    int rc = fi_connect(c->ep(), (*info)->dest_addr, mine.data(), mine.size());
    if (rc != 0)
      c->fail(FabricSite::kConnect, rc, "connect to " + remote.to_string() + ": " + fi_error(rc));
  });
}

void FabricTransport::Impl::stop() {
  if (stopped_.exchange(true)) return;
  if (thread_.joinable()) {
    Status closed = run_on_io([this] {
      std::vector<std::shared_ptr<FabConn>> all;
      for (auto& [p, c] : conns_) all.push_back(c);
      for (auto& c : all) c->do_close(Status(Code::kCancelled, "transport stopped"));
      return Status::Ok();
    });
    if (!closed.ok()) PFS_LOG_WARN("stopping the fabric transport: {}", closed.message());
    quit_.store(true);
    uint64_t one = 1;
    ssize_t n = write(evfd_, &one, sizeof one);
    (void)n;
    thread_.join();
  }
  MutexLock lk(io_mu_);  // a waiter's progress() may be in its last pass
  conns_.clear();
  graveyard_.clear();
  nis_.clear();
  if (epfd_ >= 0) ::close(epfd_);
  if (evfd_ >= 0) ::close(evfd_);
  epfd_ = evfd_ = -1;
}

// ---- the public face ----

fi_info* fabric_hints(const std::string& provider, const std::string& domain) {
  return make_hints(provider, domain).release();
}

FabricTransport::FabricTransport(TransportOptions opts, FabricOptions fopts,
                                 std::vector<Nid> node_nids, Clock& clock, TransportEvents& events)
    : impl_(std::make_unique<Impl>(std::move(opts), std::move(fopts), std::move(node_nids), clock,
                                   events)) {}
FabricTransport::~FabricTransport() { impl_->stop(); }

Status FabricTransport::probe(const FabricOptions& fopts, const Nid& local) {
  auto info = get_info(fopts, local.address_string(), 0, true);
  return info.ok() ? Status::Ok() : info.status();
}

Status FabricTransport::listen(const Nid& local, uint16_t port) {
  return impl_->listen(local, port);
}
void FabricTransport::connect(const Nid& local, const Nid& remote, uint16_t port,
                              ConnectCallback cb) {
  impl_->connect(local, remote, port, std::move(cb));
}
void FabricTransport::post(std::function<void()> fn) { impl_->post(std::move(fn)); }
bool FabricTransport::progress() { return impl_->progress(); }
FabricTransport::Counters FabricTransport::counters() const {
  auto& c = impl_->counters_;
  return {c.rma_reads.load(), c.sink_writes.load(), c.sinks_offered.load(), c.registrations.load(),
          c.sink_registrations.load()};
}

void FabricTransport::inject_fault(FabricSite site, int err) { impl_->inject_fault(site, err); }
void FabricTransport::stop() { impl_->stop(); }

}  // namespace pfsnet
