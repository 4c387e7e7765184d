#include "rpc/rpc_engine.h"

#include <algorithm>
#include <cassert>
#include <deque>

#include "base/log.h"
#include "rpc/msg_types.h"
#include "rpc/ping.h"

namespace pfsnet {
namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

// One RPC. References keep it alive: the result (reply or error) and the transmit
// completion of each attempt. A successful reply is delivered when both the reply and
// the transmit completion are in (so the request's write times are known); an error is
// delivered at once. A failed attempt is resent (same xid) while the budget allows; at
// most one attempt's transmit is outstanding at a time, except after a remote timeout,
// where the old attempt's write had completed already.
struct RpcEngine::Call final : TxCompletion {
  RpcEngine* eng = nullptr;
  uint64_t xid = 0;
  Nid dst;
  uint32_t type = 0;
  TimePoint deadline;          // the whole RPC's
  TimePoint attempt_deadline;  // this attempt's (guarded by eng->mu_)
  Duration attempt_timeout{0};
  uint8_t flags = 0;
  Buffer payload;  // kept for resends; each attempt sends a copy
  BulkData bulk;
  std::optional<std::pair<Nid, Nid>> pin;  // recovery pings: this path only, no resend
  Callback cb;
  // Sync waiter (null for async calls).
  std::mutex* wmu = nullptr;
  std::condition_variable* wcv = nullptr;
  bool* wdone = nullptr;
  std::atomic<bool>* wready = nullptr;  // set after *wout is filled, for spinning waiters
  RpcReply* wout = nullptr;

  RpcReply reply;
  std::atomic<int> refs{2};
  std::atomic<bool> resolved{false};
  bool delivered = false;
  std::atomic<bool> sent{false};
  // Guarded by eng->mu_.
  bool on_wire = false;
  bool queued = false;
  bool holds_slot = false;
  int attempts = 1;
  // The current attempt's write: times (copied into the reply when a successful reply
  // is delivered), path and connection. Written under eng->mu_ before `sent`.
  TxTimes tx_times;

  void on_tx_done(const Status& s, const TxTimes& t) override {
    if (s.ok()) {
      std::lock_guard lk(eng->mu_);
      tx_times = t;
      sent.store(true);
    } else if (!eng->try_resend(this, s, t)) {
      eng->resolve_error(this, eng->final_error(this, s));
    }
    eng->unref(this);
  }
};

struct RpcEngine::Target {
  int64_t in_flight = 0;
  std::deque<Call*> queue;
};

RpcOptions RpcOptions::from(const Config& cfg) {
  RpcOptions ro;
  ro.max_rpcs_in_flight = cfg.rpc.max_rpcs_in_flight;
  ro.default_timeout = std::chrono::seconds(cfg.lnet.transaction_timeout);
  ro.max_bulk = static_cast<uint32_t>(cfg.max_bulk());
  ro.retry_count = cfg.lnet.retry_count;
  return ro;
}

RpcEngine::RpcEngine(Net& net, RpcOptions opts, RpcStats* stats)
    : net_(net), opts_(opts), stats_(stats), clock_(net.clock()), workers_(opts.workers) {
  net_.set_rx(this);
  for (const MsgType& t : kMsgTypes) types_[t.id].name = std::string(t.name);
}

RpcEngine::~RpcEngine() {
  shutdown();
  // No callback may reach this engine once it is gone.
  net_.shutdown();
}

void RpcEngine::define_type(uint32_t type, std::string name) {
  assert(msg_type_name(type).empty() || msg_type_name(type) == name);
  types_[type].name = std::move(name);
}

void RpcEngine::handle(uint32_t type, std::string name, Handler h, HandlerMode mode) {
  define_type(type, std::move(name));
  TypeInfo& t = types_[type];
  assert(!t.handler);
  t.handler = std::move(h);
  t.mode = mode;
}

void RpcEngine::handle(uint32_t type, Handler h, HandlerMode mode) {
  assert(!msg_type_name(type).empty());
  handle(type, std::string(msg_type_name(type)), std::move(h), mode);
}

std::string RpcEngine::type_name(uint32_t type) const {
  auto it = types_.find(type);
  if (it != types_.end() && !it->second.name.empty()) return it->second.name;
  return "type-" + std::to_string(type);
}

uint32_t RpcEngine::type_by_name(std::string_view name) const {
  for (const auto& [type, info] : types_)
    if (info.name == name) return type;
  return 0;
}

size_t RpcEngine::pending() const {
  std::lock_guard lk(mu_);
  size_t n = pending_.size();
  for (auto& [k, t] : targets_) n += t->queue.size();
  return n;
}

std::pair<int64_t, size_t> RpcEngine::target_load(const Nid& dst) const {
  std::lock_guard lk(mu_);
  auto it = targets_.find(dst.pack());
  if (it == targets_.end()) return {0, 0};
  return {it->second->in_flight, it->second->queue.size()};
}

RpcEngine::Call* RpcEngine::new_call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                                     CallOptions o) {
  auto* c = new Call;
  c->eng = this;
  c->dst = dst;
  c->type = type;
  c->reply.times.submit = clock_.now();
  Duration total = o.timeout.count() > 0 ? o.timeout : opts_.default_timeout;
  c->deadline = c->reply.times.submit + total;
  c->pin = o.via;
  c->attempt_timeout =
      c->pin ? total
             : std::max<Duration>(std::chrono::milliseconds(1), total / (opts_.retry_count + 1));
  c->attempt_deadline = std::min(c->deadline, c->reply.times.submit + c->attempt_timeout);
  c->payload = std::move(payload);
  c->bulk = std::move(bulk);
  c->reply.bytes_sent = kHeaderSize + c->payload.size() + (c->bulk ? c->bulk->size() : 0);
  return c;
}

void RpcEngine::call_async(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                           Callback cb, CallOptions o) {
  Call* c = new_call(dst, type, std::move(payload), std::move(bulk), o);
  c->cb = std::move(cb);
  submit(c);
}

RpcReply RpcEngine::call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                         CallOptions o) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::atomic<bool> ready{false};
  RpcReply out;
  Call* c = new_call(dst, type, std::move(payload), std::move(bulk), o);
  c->wready = &ready;
  c->wmu = &m;
  c->wcv = &cv;
  c->wdone = &done;
  c->wout = &out;
  TimePoint deadline = c->deadline;
  submit(c);
  // Spin briefly before sleeping: a reply that comes within opts_.spin then costs no
  // thread wake-up (a third of a loopback round trip on a 2-core VM). Only one caller
  // spins at a time, so blocking callers never eat the cores.
  if (opts_.spin.count() > 0 && spinners_.fetch_add(1) == 0) {
    auto until = std::chrono::steady_clock::now() + opts_.spin;
    for (int i = 0; !ready.load(std::memory_order_acquire); ++i) {
      if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until) break;
      cpu_relax();
    }
    spinners_.fetch_sub(1);
  } else if (opts_.spin.count() > 0) {
    spinners_.fetch_sub(1);
  }
  {
    std::unique_lock lk(m);
    while (!done) {
      // Wait in real time for what the clock says is left; a manual clock is advanced by
      // the test, which then calls tick().
      Duration left = std::max(Duration(std::chrono::milliseconds(1)), deadline - clock_.now());
      if (cv.wait_for(lk, std::min<Duration>(left, std::chrono::milliseconds(200)),
                      [&] { return done; }))
        break;
      if (clock_.now() >= deadline) {
        lk.unlock();
        expire_call(c, Status(Code::kTimeout, "RPC " + type_name(type) + " to " + dst.to_string() +
                                                  " timed out (no reply)"));
        lk.lock();
      }
    }
  }
  return out;
}

void RpcEngine::expire_call(Call* c, const Status& s) {
  // `c` may already be resolved and freed: look for it by address before touching it.
  bool found = false;
  {
    std::lock_guard lk(mu_);
    for (auto& [xid, p] : pending_) found = found || p == c;
    for (auto& [k, t] : targets_)
      for (Call* q : t->queue) found = found || q == c;
    if (found) c->refs.fetch_add(1);
  }
  if (!found) return;
  resolve_error(c, final_error(c, s));
  unref(c);
}

void RpcEngine::submit(Call* c) {
  {
    std::lock_guard lk(mu_);
    if (!shut_) {
      auto& t = targets_[c->dst.pack()];
      if (!t) t = std::make_unique<Target>();
      if (t->in_flight < opts_.max_rpcs_in_flight) {
        ++t->in_flight;
        c->holds_slot = true;
        c->xid = next_xid_++;
        pending_[c->xid] = c;
        c->on_wire = true;
      } else {
        t->queue.push_back(c);
        c->queued = true;
        slot_waits_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
  }
  if (!c->on_wire) {  // shut down: never sent
    c->queued = true;
    resolve_error(c, Status(Code::kCancelled, "RPC engine is shut down"));
    return;
  }
  send_call(c);
}

void RpcEngine::send_call(Call* c) {
  auto f = std::make_unique<OutFrame>();
  f->hdr.kind = FrameKind::kRequest;
  f->hdr.msg_type = c->type;
  f->hdr.flags = c->flags;
  f->hdr.xid = c->xid;
  f->payload = Buffer::copy_of(c->payload.span());
  f->bulk = c->bulk;
  // The attempt's deadline runs from when it goes on the wire (not from a wait for a
  // max_rpcs_in_flight slot), within the RPC's own deadline.
  TimePoint deadline;
  {
    std::lock_guard lk(mu_);
    c->attempt_deadline = std::min(c->deadline, clock_.now() + c->attempt_timeout);
    deadline = c->attempt_deadline;
  }
  if (c->pin)
    net_.send_via(c->pin->first, c->pin->second, std::move(f), deadline, c, true);
  else
    net_.send(c->dst, std::move(f), deadline, c);
}

namespace {
bool retryable(const Status& s) {
  if (s.health_kind() != HealthKind::kNone) return true;
  return s.code() == Code::kClosed || s.code() == Code::kTimeout ||
         s.code() == Code::kUnreachable || s.code() == Code::kRejected;
}
}  // namespace

bool RpcEngine::try_resend(Call* c, const Status& s, const TxTimes& failed_path) {
  TimePoint now = clock_.now();
  [[maybe_unused]] int attempt = 0;
  {
    std::lock_guard lk(mu_);
    if (shut_ || c->resolved.load() || !c->on_wire || c->pin || !retryable(s) ||
        c->attempts > opts_.retry_count || now >= c->deadline)
      return false;
    attempt = ++c->attempts;
    c->sent.store(false);
    c->refs.fetch_add(1);  // the new attempt's transmit completion
  }
  net_.note_resend(failed_path);
  PFS_LOG_DEBUG("resending RPC {} to {} (xid {}, attempt {}): {}", type_name(c->type),
                c->dst.to_string(), c->xid, attempt, s.to_string());
  send_call(c);
  return true;
}

Status RpcEngine::final_error(Call* c, const Status& s) {
  int attempts;
  {
    std::lock_guard lk(mu_);
    attempts = c->attempts;
  }
  if (attempts <= 1) return s;
  return Status(s.code(),
                "RPC " + type_name(c->type) + " to " + c->dst.to_string() + " failed after " +
                    std::to_string(attempts) + " attempts; last: " + s.message(),
                s.health_kind());
}

void RpcEngine::resolve_error(Call* c, const Status& s) {
  if (c->resolved.exchange(true)) return;
  bool never_sent = false;
  {
    std::lock_guard lk(mu_);
    if (c->on_wire) {
      pending_.erase(c->xid);
      c->on_wire = false;
    }
    if (c->queued) {
      never_sent = true;
      c->queued = false;
      auto it = targets_.find(c->dst.pack());
      if (it != targets_.end()) {
        auto& q = it->second->queue;
        q.erase(std::remove(q.begin(), q.end(), c), q.end());
      }
    }
  }
  c->reply.status = s;
  finish_slot(c);
  deliver(c);
  if (never_sent) unref(c);  // no transmit completion will come
  unref(c);
}

void RpcEngine::finish_slot(Call* c) {
  Call* next = nullptr;
  {
    std::lock_guard lk(mu_);
    if (!c->holds_slot) return;
    c->holds_slot = false;
    Target& t = *targets_[c->dst.pack()];
    --t.in_flight;
    if (!t.queue.empty() && !shut_ && t.in_flight < opts_.max_rpcs_in_flight) {
      next = t.queue.front();
      t.queue.pop_front();
      next->queued = false;
      ++t.in_flight;
      next->holds_slot = true;
      next->xid = next_xid_++;
      pending_[next->xid] = next;
      next->on_wire = true;
    }
  }
  if (next) send_call(next);
}

std::vector<Nid> RpcEngine::waiting_targets() const {
  std::vector<Nid> v;
  std::lock_guard lk(mu_);
  for (const auto& [key, t] : targets_)
    if (!t->queue.empty())
      if (auto n = Nid::unpack(key); n.ok()) v.push_back(*n);
  return v;
}

RpcCounters RpcEngine::counters() const {
  RpcCounters c;
  c.completed = completed_.load(std::memory_order_relaxed);
  c.round_trip_ns = round_trip_ns_.load(std::memory_order_relaxed);
  c.bytes = bytes_.load(std::memory_order_relaxed);
  c.slot_waits = slot_waits_.load(std::memory_order_relaxed);
  return c;
}

int64_t RpcEngine::max_rpcs_in_flight() const {
  std::lock_guard lk(mu_);
  return opts_.max_rpcs_in_flight;
}

void RpcEngine::set_max_rpcs_in_flight(int64_t n) {
  std::vector<Call*> start;
  {
    std::lock_guard lk(mu_);
    opts_.max_rpcs_in_flight = std::max<int64_t>(1, n);
    if (shut_) return;
    for (auto& [k, t] : targets_)
      while (!t->queue.empty() && t->in_flight < opts_.max_rpcs_in_flight) {
        Call* c = t->queue.front();
        t->queue.pop_front();
        c->queued = false;
        ++t->in_flight;
        c->holds_slot = true;
        c->xid = next_xid_++;
        pending_[c->xid] = c;
        c->on_wire = true;
        start.push_back(c);
      }
  }
  for (Call* c : start) send_call(c);
}

void RpcEngine::deliver(Call* c) {
  if (c->delivered) return;
  c->delivered = true;
  if (c->wmu) {
    std::lock_guard lk(*c->wmu);
    *c->wout = std::move(c->reply);
    *c->wdone = true;
    c->wready->store(true, std::memory_order_release);
    c->wcv->notify_one();
  } else if (c->cb) {
    c->cb(std::move(c->reply));
  }
}

void RpcEngine::unref(Call* c) {
  if (c->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (!c->delivered) {
    RpcTimes& t = c->reply.times;
    t.write_start = c->tx_times.write_start;
    t.write_done = c->tx_times.write_done;
    RpcEngine* e = c->eng;
    if (t.reply_complete != TimePoint{} && c->reply.status.ok()) {
      e->completed_.fetch_add(1, std::memory_order_relaxed);
      e->round_trip_ns_.fetch_add(
          static_cast<uint64_t>(std::max<int64_t>(0, c->reply.round_trip().count())),
          std::memory_order_relaxed);
      e->bytes_.fetch_add(c->reply.bytes_sent + c->reply.bytes_received, std::memory_order_relaxed);
    }
    RpcStats* stats = e->stats_.load(std::memory_order_acquire);
    if (stats && t.reply_complete != TimePoint{}) {
      // GPFS raw statistics record, saved as the reply is completely received.
      RawStatRecord r;
      r.channel_wait_ns = (t.write_start - t.submit).count();
      r.send_ns = (t.write_done - t.write_start).count();
      r.receive_ns = (t.reply_complete - t.reply_first_byte).count();
      r.latency_ns = c->reply.latency().count();
      r.node = c->dst.pack();
      r.bytes_sent = static_cast<uint32_t>(c->reply.bytes_sent);
      r.bytes_received = static_cast<uint32_t>(c->reply.bytes_received);
      r.sent_verbs = r.received_verbs = false;  // the TCP LND only, so far
      stats->record(r);
    }
    deliver(c);
  }
  delete c;
}

void RpcEngine::on_message(const Nid& from, InFrame&& f, RxCredit credit) {
  if (f.hdr.kind == FrameKind::kReply) {
    on_reply(std::move(f), std::move(credit));
  } else {
    serve(from, std::move(f), std::move(credit));
  }
}

void RpcEngine::on_reply(InFrame&& f, RxCredit credit) {
  Call* c = nullptr;
  {
    std::lock_guard lk(mu_);
    auto it = pending_.find(f.hdr.xid);
    if (it != pending_.end()) {
      c = it->second;
      pending_.erase(it);
      c->on_wire = false;
    }
  }
  if (!c || c->resolved.exchange(true)) {
    late_replies_.fetch_add(1);
    return;  // timed out or cancelled already; the credit returns as `credit` goes
  }
  RpcReply& r = c->reply;
  if (f.hdr.status != 0) {
    Code code = f.hdr.status <= static_cast<uint16_t>(Code::kPeerDead)
                    ? static_cast<Code>(f.hdr.status)
                    : Code::kProtocol;
    HealthKind hk =
        f.hdr.health < kNumHealthKinds ? static_cast<HealthKind>(f.hdr.health) : HealthKind::kNone;
    r.status = Status(code, std::string(f.payload.view()), hk);
  } else {
    r.payload = std::move(f.payload);
    r.bulk = std::move(f.bulk);
  }
  r.exec_time = Duration(static_cast<int64_t>(std::min<uint64_t>(f.hdr.exec_ns, INT64_MAX)));
  r.times.reply_first_byte = f.times.first_byte;
  r.times.reply_complete = f.times.complete;
  r.bytes_received = kHeaderSize + f.hdr.payload_len + f.hdr.bulk_len;
  credit.release();
  finish_slot(c);
  unref(c);
}

void RpcEngine::serve(const Nid& from, InFrame&& f, RxCredit credit) {
  auto it = types_.find(f.hdr.msg_type);
  if (it == types_.end() || !it->second.handler) {
    credit.release();
    RpcResponse r;
    r.status =
        Status(Code::kNotFound, "no handler for message type " + std::to_string(f.hdr.msg_type));
    send_reply(from, f.hdr, f.times.complete, std::move(r), false);
    return;
  }
  const TypeInfo& t = it->second;
  auto run = [this, &t, from](InFrame& fr, RxCredit& cr) {
    RpcRequest req{from, fr.hdr.msg_type, std::move(fr.payload), std::move(fr.bulk)};
    RpcResponse resp;
    try {
      resp = t.handler(req);
    } catch (const std::exception& e) {
      resp = RpcResponse{};
      resp.status = Status(Code::kRemoteError, "handler for " + t.name + " failed: " + e.what());
    }
    req = RpcRequest{};
    cr.release();  // before the reply, so the credit rides on it
    send_reply(from, fr.hdr, fr.times.complete, std::move(resp), true);
  };
  if (t.mode == HandlerMode::kInline) {
    run(f, credit);
    return;
  }
  struct Job {
    InFrame f;
    RxCredit credit;
  };
  auto job = std::make_shared<Job>(Job{std::move(f), std::move(credit)});
  if (!workers_.submit([job, run]() mutable { run(job->f, job->credit); })) {
    job->credit.release();
    RpcResponse r;
    r.status = Status(Code::kCancelled, "server is shutting down");
    send_reply(from, job->f.hdr, job->f.times.complete, std::move(r), false);
  }
}

void RpcEngine::send_reply(const Nid& to, const FrameHeader& req, TimePoint received,
                           RpcResponse&& r, bool counted) {
  auto f = std::make_unique<OutFrame>();
  f->hdr.kind = FrameKind::kReply;
  f->hdr.xid = req.xid;
  f->hdr.msg_type = req.msg_type;
  size_t bulk_size = r.bulk ? std::min(r.bulk->size(), r.bulk_limit) : 0;
  if (r.status.ok() && bulk_size > opts_.max_bulk) {
    r.status =
        Status(Code::kInternal, "reply bulk of " + std::to_string(bulk_size) +
                                    " bytes exceeds the limit " + std::to_string(opts_.max_bulk));
  }
  if (r.status.ok()) {
    f->payload = std::move(r.payload);
    f->bulk = std::move(r.bulk);
    f->bulk_limit = r.bulk_limit;
  } else {
    f->hdr.status = static_cast<uint16_t>(r.status.code());
    f->hdr.health = static_cast<uint16_t>(r.status.health_kind());
    std::string msg = r.status.message().substr(0, 1024);
    f->payload = Buffer::copy_of(std::string_view(msg));
  }
  TimePoint now = clock_.now();
  int64_t exec = std::max<int64_t>(0, (now - received).count());
  f->hdr.exec_ns = static_cast<uint64_t>(exec);
  RpcStats* stats = stats_.load(std::memory_order_acquire);
  if (stats && counted) stats->record_exec(RawExecRecord{exec, req.msg_type});
  // The reply goes back on the path the request came in on while that NI is up.
  auto local = Nid::unpack(req.dst_nid);
  if (local.ok())
    net_.send_via(*local, to, std::move(f), now + opts_.default_timeout, nullptr, false);
  else
    net_.send(to, std::move(f), now + opts_.default_timeout, nullptr);
}

void RpcEngine::on_connection_closed(uint64_t conn_id, const Nid& peer_nid, const Status& why) {
  std::vector<std::pair<Call*, TxTimes>> dead;
  {
    std::lock_guard lk(mu_);
    for (auto& [xid, c] : pending_) {
      if (!c->sent.load() || c->tx_times.conn_id != conn_id) continue;
      c->refs.fetch_add(1);
      dead.emplace_back(c, c->tx_times);
    }
  }
  for (auto& [c, path] : dead) {
    Status s(Code::kClosed,
             "connection to " + peer_nid.to_string() + " closed before the reply: " + why.message(),
             why.health_kind());
    if (!try_resend(c, s, path)) resolve_error(c, final_error(c, s));
    unref(c);
  }
}

size_t RpcEngine::fail_calls_to(const std::vector<Nid>& nids, const Status& s) {
  std::vector<Call*> dead;
  auto hit = [&](const Nid& d) { return std::find(nids.begin(), nids.end(), d) != nids.end(); };
  {
    std::lock_guard lk(mu_);
    for (auto& [xid, c] : pending_)
      if (hit(c->dst)) {
        c->refs.fetch_add(1);
        dead.push_back(c);
      }
    for (auto& [k, t] : targets_)
      for (Call* c : t->queue)
        if (hit(c->dst)) {
          c->refs.fetch_add(1);
          dead.push_back(c);
        }
  }
  for (Call* c : dead) {
    resolve_error(c, s);
    unref(c);
  }
  return dead.size();
}

void RpcEngine::send_recovery_pings(TimePoint now) {
  if (!opts_.recovery_pings) return;
  {
    std::lock_guard lk(mu_);
    if (shut_) return;
  }
  Duration timeout = std::max<Duration>(std::chrono::milliseconds(1),
                                        opts_.default_timeout / (opts_.retry_count + 1));
  for (const RecoveryTarget& t : net_.recovery_due(now)) {
    recovery_sent_.fetch_add(1);
    PFS_LOG_DEBUG("recovery ping {} -> {} (recovering the {} NI)", t.local.to_string(),
                  t.peer.to_string(), t.for_local_ni ? "local" : "peer");
    CallOptions o;
    o.timeout = timeout;
    o.via = std::make_pair(t.local, t.peer);
    call_async(
        t.peer, kMsgPing, Buffer{}, nullptr,
        [this, t](RpcReply&& r) {
          if (r.status.ok()) {
            recovery_ok_.fetch_add(1);
            PFS_LOG_INFO("recovery ping {} -> {} answered", t.local.to_string(),
                         t.peer.to_string());
          } else {
            PFS_LOG_DEBUG("recovery ping {} -> {} failed: {}", t.local.to_string(),
                          t.peer.to_string(), r.status.to_string());
          }
        },
        o);
  }
}

size_t RpcEngine::tick(TimePoint now) {
  net_.expire(now);
  if (RpcStats* stats = stats_.load(std::memory_order_acquire)) stats->tick();
  std::vector<Call*> dead;
  std::vector<std::pair<Call*, TxTimes>> remote;  // written, no reply by the attempt deadline
  {
    std::lock_guard lk(mu_);
    for (auto& [xid, c] : pending_)
      if (c->sent.load() && c->attempt_deadline <= now) {
        c->refs.fetch_add(1);
        remote.emplace_back(c, c->tx_times);
      } else if (c->deadline <= now) {
        c->refs.fetch_add(1);
        dead.push_back(c);
      }
    for (auto& [k, t] : targets_)
      for (Call* c : t->queue)
        if (c->deadline <= now) {
          c->refs.fetch_add(1);
          dead.push_back(c);
        }
  }
  for (Call* c : dead) {
    bool queued;
    {
      std::lock_guard lk(mu_);
      queued = c->queued;
    }
    resolve_error(
        c, Status(Code::kTimeout, "RPC " + type_name(c->type) + " to " + c->dst.to_string() +
                                      (queued ? " timed out waiting for a slot (max_rpcs_in_flight)"
                                              : " timed out (no reply)")));
    unref(c);
  }
  for (auto& [c, path] : remote) {
    std::string what = "no reply to RPC " + type_name(c->type) + " (xid " + std::to_string(c->xid) +
                       ") by its attempt deadline";
    if (!c->resolved.load()) net_.report_remote_timeout(path, what);
    Status s(Code::kTimeout,
             "RPC " + type_name(c->type) + " to " + c->dst.to_string() +
                 " timed out (no reply; remote timeout)",
             HealthKind::kPeerNiUnreachable);
    if (!try_resend(c, s, path)) resolve_error(c, final_error(c, s));
    unref(c);
  }
  send_recovery_pings(now);
  return dead.size() + remote.size();
}

void RpcEngine::start_ticker(Duration period) {
  ticker_.start(period, [this] { tick(clock_.now()); });
}

void RpcEngine::shutdown() {
  ticker_.stop();
  std::vector<Call*> dead;
  {
    std::lock_guard lk(mu_);
    if (shut_) return;
    shut_ = true;
    for (auto& [xid, c] : pending_) {
      c->refs.fetch_add(1);
      dead.push_back(c);
    }
    for (auto& [k, t] : targets_)
      for (Call* c : t->queue) {
        c->refs.fetch_add(1);
        dead.push_back(c);
      }
  }
  for (Call* c : dead) {
    resolve_error(c, Status(Code::kCancelled, "RPC " + type_name(c->type) + " to " +
                                                  c->dst.to_string() + " cancelled at shutdown"));
    unref(c);
  }
  workers_.stop();
}

}  // namespace pfsnet
