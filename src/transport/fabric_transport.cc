// FabricTransport: see fabric_transport.h. This file: the provider's info (hints,
// fi_getinfo), the transport (I/O loop and progress, connection manager events,
// listen/connect/accept, deadlines, stop) and the public face. A connection (FabConn) is in
// fabric_conn.cc, fabric_msg.cc and fabric_rma.cc; what they share in fabric_internal.h.
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
#include "base/thread_name.h"
#include "transport/fabric_health.h"
#include "transport/fabric_internal.h"
#include "transport/reg_cache.h"
#include "transport/reg_pool.h"
#include "wire/fabric_wire.h"
#include "wire/handshake.h"

namespace pfsnet {

using namespace fabric_detail;

namespace {

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
// Sends ordered after RMA writes (FI_ORDER_SAW, FabricOptions::ordered_replies) are asked
// for first, and done without where the provider cannot.
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
    a->sin_addr.s_addr = htonl(src->ipv4());
    hints->src_addr = a;
    hints->src_addrlen = sizeof(sockaddr_in);
  }
  std::string svc = std::to_string(port);
  fi_info* info = nullptr;
  int rc = -FI_ENODATA;
  if (fo.ordered_replies) {
    hints->tx_attr->msg_order = FI_ORDER_SAW;
    hints->rx_attr->msg_order = FI_ORDER_SAW;
    rc = fi_getinfo(kFiVersion, node.c_str(), svc.c_str(), source ? FI_SOURCE : 0, hints.get(),
                    &info);
    hints->tx_attr->msg_order = hints->rx_attr->msg_order = 0;
  }
  if (rc != 0 || !info)
    rc = fi_getinfo(kFiVersion, node.c_str(), svc.c_str(), source ? FI_SOURCE : 0, hints.get(),
                    &info);
  if (rc != 0 || !info)
    return Status(Code::kUnreachable,
                  "libfabric provider '" + fo.provider + "'" +
                      (fo.domain.empty() ? "" : " (domain '" + fo.domain + "')") +
                      " offers nothing for " + node + ": fi_getinfo: " + fi_error(rc));
  return InfoPtr(info);
}

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
  thread_ = std::thread([this] {
    name_this_thread("pfs-fabric");
    loop();
  });
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

// The fabric transport's NIs are IPv4 (its HELLO speaks version 1, whose NIDs are 64-bit).
static Status ipv4_only(const Nid& n) {
  if (!n.is_large()) return Status::Ok();
  return Status(Code::kInvalidArgument,
                n.to_string() + ": the fabric transport takes IPv4 NIDs only (IPv6 is @tcp's)");
}

Status FabricTransport::listen(const Nid& local, uint16_t port) {
  if (Status st = ipv4_only(local); !st.ok()) return st;
  return impl_->listen(local, port);
}
void FabricTransport::connect(const Nid& local, const Nid& remote, uint16_t port,
                              ConnectCallback cb) {
  for (const Nid* n : {&local, &remote})
    if (Status st = ipv4_only(*n); !st.ok()) return cb(st);
  impl_->connect(local, remote, port, std::move(cb));
}
void FabricTransport::post(std::function<void()> fn) { impl_->post(std::move(fn)); }
bool FabricTransport::progress() { return impl_->progress(); }
FabricTransport::Counters FabricTransport::counters() const {
  auto& c = impl_->counters_;
  return {c.rma_reads.load(),     c.sink_writes.load(),        c.sinks_offered.load(),
          c.registrations.load(), c.sink_registrations.load(), c.sink_replies_ordered.load()};
}

void FabricTransport::inject_fault(FabricSite site, int err) { impl_->inject_fault(site, err); }
void FabricTransport::stop() { impl_->stop(); }

}  // namespace pfsnet
