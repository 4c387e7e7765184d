#include "rpc/rpc_engine.h"

#include <pfsnet/msg_types.h>

#include <algorithm>
#include <cassert>
#include <deque>
#include <random>

#include "base/log.h"
#include "base/mutex.h"

namespace pfsnet {
namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

bool retryable(const Status& s) {
  if (s.health_kind() != HealthKind::kNone) return true;
  return s.code() == Code::kClosed || s.code() == Code::kTimeout ||
         s.code() == Code::kUnreachable || s.code() == Code::kRejected;
}
}  // namespace

// One RPC, owned by shared pointers: the engine's tables hold it while it is on the wire
// (pending_) or waiting for a slot (a target's queue), and it holds itself (tx_keep)
// while a write of it is outstanding in the net. A failed attempt is resent (same xid)
// while the budget allows; at most one attempt's write is outstanding at a time (a
// resend starts after the previous write completed or failed).
//
// An error is delivered at once. A reply is delivered once both it and the completion of
// the write on the wire are in (the write times go into the statistics): whichever of
// on_reply and on_tx_done comes second delivers, decided under mu_ (reply_in, sent).
struct RpcEngine::Call final : TxCompletion {
  RpcEngine* eng = nullptr;
  uint64_t xid = 0;
  Nid dst;
  uint32_t type = 0;
  TimePoint deadline;                               // the whole RPC's
  TimePoint attempt_deadline GUARDED_BY(eng->mu_);  // this attempt's
  Duration attempt_timeout{0};
  uint8_t flags = 0;
  size_t reply_bulk = 0;  // CallOptions::reply_bulk
  bool urgent = false;    // CallOptions::urgent: no max_rpcs_in_flight slot
  Buffer payload;         // kept for resends; each attempt sends a copy
  BulkData bulk;
  std::optional<std::pair<Nid, Nid>> pin;  // recovery pings: this path only, no resend
  Callback cb;

  RpcReply reply;
  std::atomic<bool> resolved{false};           // the outcome is decided (a reply, or an error)
  std::atomic<bool> delivered{false};          // the callback ran (or is running)
  CallPtr tx_keep GUARDED_BY(eng->mu_);        // this call, while a write of it is outstanding
  bool sent GUARDED_BY(eng->mu_) = false;      // the current attempt's write completed
  bool reply_in GUARDED_BY(eng->mu_) = false;  // a reply arrived (resolved by it)
  // The current attempt's reply arrived damaged (or said its request did) before its write
  // completed: why, to resend with then; OK when not.
  Status damaged GUARDED_BY(eng->mu_);
  bool reply_verbs GUARDED_BY(eng->mu_) = false;  // ... from a verbs (RDMA) NI
  bool on_wire GUARDED_BY(eng->mu_) = false;
  bool queued GUARDED_BY(eng->mu_) = false;
  bool holds_slot GUARDED_BY(eng->mu_) = false;
  // The target it queued in (null: urgent); targets live as long as the engine.
  Target* target GUARDED_BY(eng->mu_) = nullptr;
  int attempts GUARDED_BY(eng->mu_) = 1;
  // The current attempt's write: times (copied into the reply when it is delivered), path
  // and connection.
  TxTimes tx_times GUARDED_BY(eng->mu_);

  void on_tx_done(const Status& s, const TxTimes& t) override { eng->on_tx_done(*this, s, t); }
};

// Reached only through RpcEngine::targets_, under the engine's mu_ (which clang cannot
// name from here: a Target holds no pointer to its engine).
struct RpcEngine::Target {
  Nid dst;
  int64_t in_flight = 0;
  int64_t limit = 0;  // its own max_rpcs_in_flight; 0: the engine's
  std::deque<CallPtr> queue;
  RpcCounters counters;  // its RPCs that completed, and those that waited for a slot
};

RpcOptions RpcOptions::from(const Config& cfg) {
  RpcOptions ro;
  ro.max_rpcs_in_flight = cfg.rpc.max_rpcs_in_flight;
  for (const auto& [nid, n] : cfg.rpc.peer_rpcs_in_flight)
    if (auto parsed = Nid::parse(nid); parsed.ok()) ro.peer_rpcs_in_flight.emplace_back(*parsed, n);
  ro.default_timeout = std::chrono::seconds(cfg.lnet.transaction_timeout);
  ro.max_bulk = static_cast<uint32_t>(cfg.max_bulk());
  ro.retry_count = cfg.lnet.retry_count;
  ro.workers = static_cast<int>(cfg.rpc.workers);
  ro.replay.max_entries = static_cast<size_t>(cfg.rpc.reply_cache_entries);
  ro.replay.max_bytes = static_cast<size_t>(cfg.rpc.reply_cache_bytes);
  ro.replay.idle = std::chrono::seconds(cfg.rpc.reply_cache_idle);
  return ro;
}

namespace {
uint64_t random_incarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t(rd()) << 32) ^ rd();
  return v;
}
}  // namespace

RpcEngine::RpcEngine(Net& net, RpcOptions opts, RpcStats* stats)
    : net_(net),
      opts_(opts),
      stats_(stats),
      clock_(net.clock()),
      workers_(opts.workers, net.clock()),
      incarnation_(opts.incarnation ? opts.incarnation : random_incarnation()),
      replay_(opts.replay) {
  for (const MsgType& t : kMsgTypes) types_[t.id].name = std::string(t.name);
  {
    MutexLock lk(mu_);
    for (const auto& [nid, n] : opts_.peer_rpcs_in_flight)
      peer_limits_[nid.pack()] = std::max<int64_t>(1, n);
  }
  net_.set_rx(this);
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

void RpcEngine::handle(uint32_t type, std::string name, Handler h, HandlerMode mode,
                       Execution exec) {
  define_type(type, std::move(name));
  TypeInfo& t = types_[type];
  assert(!t.handler && !t.async);
  t.handler = std::move(h);
  t.mode = mode;
  t.once = exec == Execution::kOnce;
}

void RpcEngine::handle_async(uint32_t type, std::string name, AsyncHandler h, Execution exec,
                             AsyncCredit credit) {
  define_type(type, std::move(name));
  TypeInfo& t = types_[type];
  assert(!t.handler && !t.async);
  t.async = std::move(h);
  t.once = exec == Execution::kOnce;
  t.hold_credit = credit == AsyncCredit::kHeld;
}

void RpcEngine::handle(uint32_t type, Handler h, HandlerMode mode, Execution exec) {
  assert(!msg_type_name(type).empty());
  handle(type, std::string(msg_type_name(type)), std::move(h), mode, exec);
}

ReplyCacheStats RpcEngine::replay_stats() const {
  MutexLock lk(replay_mu_);
  return replay_.stats();
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
  MutexLock lk(mu_);
  size_t n = pending_.size();
  for (auto& [k, t] : targets_) n += t->queue.size();
  return n;
}

std::pair<int64_t, size_t> RpcEngine::target_load(const Nid& dst) const {
  MutexLock lk(mu_);
  auto it = targets_.find(dst.pack());
  if (it == targets_.end()) return {0, 0};
  return {it->second->in_flight, it->second->queue.size()};
}

RpcEngine::CallPtr RpcEngine::start_call(const Nid& dst, uint32_t type, Buffer payload,
                                         BulkData bulk, Callback cb, CallOptions o) {
  auto c = std::make_shared<Call>();
  c->eng = this;
  c->dst = dst;
  c->type = type;
  c->reply.times.submit = clock_.now();
  Duration total = o.timeout.count() > 0 ? o.timeout : opts_.default_timeout;
  c->deadline = c->reply.times.submit + total;
  c->pin = o.via;
  c->reply_bulk = o.reply_bulk;  // the transport bounds it by the frame limits
  c->urgent = o.urgent;
  c->attempt_timeout =
      c->pin ? total
             : std::max<Duration>(std::chrono::milliseconds(1), total / (opts_.retry_count + 1));
  c->payload = std::move(payload);
  c->bulk = std::move(bulk);
  c->reply.bytes_sent = kHeaderSize + c->payload.size() + (c->bulk ? c->bulk->size() : 0);
  c->cb = std::move(cb);
  submit(c);
  return c;
}

void RpcEngine::call_async(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                           Callback cb, CallOptions o) {
  (void)start_call(dst, type, std::move(payload), std::move(bulk), std::move(cb), o);
}

RpcReply RpcEngine::call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                         CallOptions o) {
  // The waiter lives on this stack: the callback fills it and signals under w.m, and this
  // function takes w.m before it returns, so the callback is done with it by then.
  struct Waiter {
    Mutex m;
    CondVar cv;
    bool done GUARDED_BY(m) = false;
    std::atomic<bool> ready{false};  // set after `out` is filled, for the spinning caller
    RpcReply out GUARDED_BY(m);
  } w;
  std::weak_ptr<Call> weak = start_call(
      dst, type, std::move(payload), std::move(bulk),
      [&w](RpcReply&& r) {
        MutexLock lk(w.m);
        w.out = std::move(r);
        w.done = true;
        w.ready.store(true, std::memory_order_release);
        w.cv.notify_one();
      },
      o);
  TimePoint deadline = clock_.now() + (o.timeout.count() > 0 ? o.timeout : opts_.default_timeout);
  // Spin briefly before sleeping: a reply that comes within opts_.spin then costs no
  // thread wake-up (a third of a loopback round trip on a 2-core VM). Only one caller
  // spins at a time, so blocking callers never eat the cores. The spinner drives the
  // transport's progress meanwhile (Net::progress): over RDMA it takes the reply from the
  // completion queue itself instead of waiting for the I/O thread to be scheduled.
  if (opts_.spin.count() > 0 && spinners_.fetch_add(1) == 0) {
    auto until = std::chrono::steady_clock::now() + opts_.spin;
    for (int i = 0; !w.ready.load(std::memory_order_acquire); ++i) {
      if ((i & 15) == 15 && std::chrono::steady_clock::now() >= until) break;
      if (!net_.progress()) cpu_relax();
    }
    spinners_.fetch_sub(1);
  } else if (opts_.spin.count() > 0) {
    spinners_.fetch_sub(1);
  }
  MutexLock lk(w.m);
  while (!w.done) {
    // Wait in real time for what the clock says is left; a manual clock is advanced by
    // the test, which then runs the timers.
    Duration left = std::max(Duration(std::chrono::milliseconds(1)), deadline - clock_.now());
    if (w.cv.wait_for(lk, std::min<Duration>(left, std::chrono::milliseconds(200)),
                      [&]() REQUIRES(w.m) { return w.done; }))
      break;
    if (clock_.now() >= deadline) {
      lk.unlock();
      if (CallPtr c = weak.lock())
        resolve_error(c, final_error(*c, Status(Code::kTimeout, "RPC " + type_name(type) + " to " +
                                                                    dst.to_string() +
                                                                    " timed out (no reply)")));
      lk.lock();
    }
  }
  return std::move(w.out);
}

RpcEngine::Target& RpcEngine::target_locked(const Nid& dst) {
  auto& t = targets_[dst.pack()];
  if (!t) {
    t = std::make_unique<Target>();
    t->dst = dst;
    auto own = peer_limits_.find(dst.pack());
    if (own != peer_limits_.end()) t->limit = own->second;
  }
  return *t;
}

int64_t RpcEngine::limit_locked(const Target& t) const {
  return t.limit > 0 ? t.limit : opts_.max_rpcs_in_flight;
}

RpcEngine::CallPtr RpcEngine::grant_slot_locked(Target& t) {
  if (shut_ || t.queue.empty() || t.in_flight >= limit_locked(t)) return nullptr;
  CallPtr c = std::move(t.queue.front());
  t.queue.pop_front();
  c->queued = false;
  ++t.in_flight;
  c->holds_slot = true;
  on_wire_locked(c);
  return c;
}

void RpcEngine::on_wire_locked(const CallPtr& c) {
  c->xid = next_xid_++;
  pending_[c->xid] = c;
  c->on_wire = true;
}

void RpcEngine::submit(const CallPtr& c) {
  CallPtr start;
  bool queued = false;
  {
    MutexLock lk(mu_);
    if (!shut_ && c->urgent) {  // on the wire at once, holding no slot
      on_wire_locked(c);
      start = c;
    } else if (!shut_) {
      Target& t = target_locked(c->dst);
      c->target = &t;
      t.queue.push_back(c);
      c->queued = true;
      start = grant_slot_locked(t);
      queued = c->queued;  // read here: once unlocked, a finishing call may send it
      if (queued) {
        slot_waits_.fetch_add(1, std::memory_order_relaxed);
        ++t.counters.slot_waits;
      }
    }
  }
  if (start) {
    send_call(start);
  } else if (!queued) {  // shut down: never sent
    resolve_error(c, Status(Code::kCancelled, "RPC engine is shut down"));
  }
}

void RpcEngine::send_call(const CallPtr& c) {
  auto f = std::make_unique<OutFrame>();
  f->hdr.kind = FrameKind::kRequest;
  f->hdr.msg_type = c->type;
  f->hdr.flags = c->flags;
  f->hdr.xid = c->xid;
  f->hdr.incarnation = incarnation_;
  f->payload = Buffer::copy_of(c->payload.span());
  f->bulk = c->bulk;
  f->reply_sink = c->reply_bulk;
  // The attempt's deadline runs from when it goes on the wire (not from a wait for a
  // max_rpcs_in_flight slot), within the RPC's own deadline.
  TimePoint deadline;
  {
    MutexLock lk(mu_);
    c->attempt_deadline = std::min(c->deadline, clock_.now() + c->attempt_timeout);
    deadline = c->attempt_deadline;
    // Every xid below the oldest on the wire is finished here: the server may forget it.
    uint64_t oldest = pending_.empty() ? c->xid : std::min(c->xid, pending_.begin()->first);
    f->hdr.done_lag = static_cast<uint32_t>(std::min<uint64_t>(c->xid - oldest, UINT32_MAX));
    c->tx_keep = c;  // until on_tx_done
  }
  if (c->pin)
    net_.send_via(c->pin->first, c->pin->second, std::move(f), deadline, c.get(), true);
  else
    net_.send(c->dst, std::move(f), deadline, c.get());
}

void RpcEngine::on_tx_done(Call& call, const Status& s, const TxTimes& t) {
  CallPtr c;
  bool reply_in;
  Status damaged;
  int attempt;
  {
    MutexLock lk(mu_);
    call.tx_keep.swap(c);  // takes the reference over: no count up and down
    if (s.ok()) {
      c->tx_times = t;
      c->sent = true;
    }
    reply_in = c->reply_in;
    damaged = c->damaged;
    c->damaged = Status::Ok();
    attempt = c->attempts;  // the write that ended is the current attempt's (one at a time)
  }
  if (reply_in) {
    complete(c);  // the reply came before this write's completion
  } else if (!s.ok() || !damaged.ok()) {
    const Status& why = s.ok() ? damaged : s;
    if (try_resend(c, why, t, attempt) == Resend::kGiveUp) resolve_error(c, final_error(*c, why));
  }
}

RpcEngine::Resend RpcEngine::try_resend(const CallPtr& c, const Status& s,
                                        const TxTimes& failed_path, int seen_attempt) {
  TimePoint now = clock_.now();
  [[maybe_unused]] int attempt = 0;
  {
    MutexLock lk(mu_);
    if (c->attempts != seen_attempt && !c->resolved.load()) return Resend::kStale;
    if (shut_ || c->resolved.load() || !c->on_wire || c->pin || !retryable(s) ||
        c->attempts > opts_.retry_count || now >= c->deadline)
      return Resend::kGiveUp;
    attempt = ++c->attempts;
    c->sent = false;
    c->damaged = Status::Ok();
  }
  net_.note_resend(failed_path);
  PFS_LOG_DEBUG("resending RPC {} to {} (xid {}, attempt {}): {}", type_name(c->type),
                c->dst.to_string(), c->xid, attempt, s.to_string());
  send_call(c);
  return Resend::kSent;
}

Status RpcEngine::final_error(const Call& c, const Status& s) {
  int attempts;
  {
    MutexLock lk(mu_);
    attempts = c.attempts;
  }
  if (attempts <= 1) return s;
  return Status(s.code(),
                "RPC " + type_name(c.type) + " to " + c.dst.to_string() + " failed after " +
                    std::to_string(attempts) + " attempts; last: " + s.message(),
                s.health_kind());
}

void RpcEngine::resolve_error(const CallPtr& c, const Status& s) {
  if (c->resolved.exchange(true)) return;
  {
    MutexLock lk(mu_);
    if (c->on_wire) {
      pending_.erase(c->xid);
      c->on_wire = false;
    }
    if (c->queued) {
      c->queued = false;
      auto& q = c->target->queue;  // a queued call has its target
      q.erase(std::remove(q.begin(), q.end(), c), q.end());
    }
  }
  c->reply.status = s;
  finish_slot(*c);
  if (c->delivered.exchange(true)) return;
  if (c->cb) c->cb(std::move(c->reply));
}

void RpcEngine::complete(const CallPtr& c) {
  if (c->delivered.exchange(true)) return;
  RpcTimes& t = c->reply.times;
  uint64_t sent_on, sent_to;
  bool received_verbs;
  {
    MutexLock lk(mu_);
    t.write_start = c->tx_times.write_start;
    t.write_done = c->tx_times.write_done;
    sent_on = c->tx_times.local_nid;
    sent_to = c->tx_times.peer_nid;
    received_verbs = c->reply_verbs;
    if (c->reply.status.ok() && c->target) {
      RpcCounters& n = c->target->counters;
      ++n.completed;
      n.round_trip_ns += static_cast<uint64_t>(std::max<int64_t>(0, c->reply.round_trip().count()));
      n.bytes += c->reply.bytes_sent + c->reply.bytes_received;
    }
  }
  if (c->reply.status.ok()) {
    completed_.fetch_add(1, std::memory_order_relaxed);
    round_trip_ns_.fetch_add(
        static_cast<uint64_t>(std::max<int64_t>(0, c->reply.round_trip().count())),
        std::memory_order_relaxed);
    bytes_.fetch_add(c->reply.bytes_sent + c->reply.bytes_received, std::memory_order_relaxed);
  }
  if (RpcStats* stats = stats_.load(std::memory_order_acquire)) {
    // GPFS raw statistics record, saved as the reply is completely received.
    RawStatRecord r;
    r.channel_wait_ns = (t.write_start - t.submit).count();
    r.send_ns = (t.write_done - t.write_start).count();
    r.receive_ns = (t.reply_complete - t.reply_first_byte).count();
    r.latency_ns = c->reply.latency().count();
    r.node = c->dst.pack();
    r.local_ni = sent_on;
    r.peer_ni = sent_to;
    r.exec_ns = c->reply.exec_time.count();
    r.bytes_sent = static_cast<uint32_t>(c->reply.bytes_sent);
    r.bytes_received = static_cast<uint32_t>(c->reply.bytes_received);
    // By the kinds of the two paths: a peer with tcp and o2ib NIs may answer on the other.
    auto local = Nid::unpack(sent_on);
    r.sent_verbs = local.ok() && local->is_verbs();
    r.received_verbs = received_verbs;
    stats->record(r);
  }
  if (c->cb) c->cb(std::move(c->reply));
}

void RpcEngine::finish_slot(Call& c) {
  CallPtr next;
  {
    MutexLock lk(mu_);
    if (!c.holds_slot) return;
    c.holds_slot = false;
    Target& t = *c.target;  // set when it queued, before it could hold a slot
    --t.in_flight;
    next = grant_slot_locked(t);
  }
  if (next) send_call(next);
}

std::vector<Nid> RpcEngine::waiting_targets() const {
  std::vector<Nid> v;
  MutexLock lk(mu_);
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
  MutexLock lk(mu_);
  return opts_.max_rpcs_in_flight;
}

int64_t RpcEngine::max_rpcs_in_flight(const Nid& dst) const {
  MutexLock lk(mu_);
  auto own = peer_limits_.find(dst.pack());
  return own != peer_limits_.end() ? own->second : opts_.max_rpcs_in_flight;
}

std::vector<RpcEngine::TargetInfo> RpcEngine::targets() const {
  std::vector<TargetInfo> v;
  MutexLock lk(mu_);
  for (const auto& [key, t] : targets_)
    v.push_back(
        {t->dst, limit_locked(*t), t->limit > 0, t->in_flight, t->queue.size(), t->counters});
  return v;
}

void RpcEngine::set_peer_rpcs_in_flight(const std::vector<std::pair<Nid, int64_t>>& limits) {
  std::vector<CallPtr> start;
  {
    MutexLock lk(mu_);
    peer_limits_.clear();
    for (const auto& [nid, n] : limits) peer_limits_[nid.pack()] = std::max<int64_t>(1, n);
    for (auto& [key, t] : targets_) {
      auto own = peer_limits_.find(key);
      t->limit = own != peer_limits_.end() ? own->second : 0;
      while (CallPtr c = grant_slot_locked(*t)) start.push_back(std::move(c));
    }
  }
  for (const CallPtr& c : start) send_call(c);
}

void RpcEngine::set_max_rpcs_in_flight(int64_t n) {
  std::vector<CallPtr> start;
  {
    MutexLock lk(mu_);
    opts_.max_rpcs_in_flight = std::max<int64_t>(1, n);
    for (auto& [k, t] : targets_)
      while (CallPtr c = grant_slot_locked(*t)) start.push_back(std::move(c));
  }
  for (const CallPtr& c : start) send_call(c);
}

void RpcEngine::on_corrupt(const Nid& from, const FrameHeader& hdr, RxCredit credit) {
  credit.release();
  if (hdr.kind == FrameKind::kRequest) {
    RpcResponse r;
    r.status = Status(Code::kCorrupt,
                      "request " + type_name(hdr.msg_type) + " xid " + std::to_string(hdr.xid) +
                          " from " + from.to_string() + " failed its data checksum; not run",
                      HealthKind::kPeerNiCorrupt);
    send_reply(from, hdr, clock_.now(), std::move(r), false);
    return;
  }
  resend_damaged(hdr.xid, Status(Code::kCorrupt,
                                 "the reply to RPC " + type_name(hdr.msg_type) + " from " +
                                     from.to_string() + " failed its data checksum",
                                 HealthKind::kPeerNiCorrupt));
}

void RpcEngine::resend_damaged(uint64_t xid, const Status& s) {
  CallPtr c;
  TxTimes path;
  int attempt = 0;
  {
    MutexLock lk(mu_);
    auto it = pending_.find(xid);
    if (it == pending_.end()) return;  // answered, timed out or cancelled already
    c = it->second;
    if (!c->sent) {  // its write completes later: on_tx_done resends
      c->damaged = s;
      return;
    }
    path = c->tx_times;
    attempt = c->attempts;
  }
  if (try_resend(c, s, path, attempt) == Resend::kGiveUp) resolve_error(c, final_error(*c, s));
}

void RpcEngine::on_reply(const Nid& from, InFrame&& f, RxCredit credit) {
  if (f.hdr.status == static_cast<uint16_t>(Code::kCorrupt)) {
    // The request arrived damaged and did not run: it goes again.
    credit.release();
    resend_damaged(f.hdr.xid, Status(Code::kCorrupt, std::string(f.payload.view()),
                                     HealthKind::kPeerNiCorrupt));
    return;
  }
  CallPtr c;
  {
    MutexLock lk(mu_);
    auto it = pending_.find(f.hdr.xid);
    if (it != pending_.end()) {
      c = std::move(it->second);
      pending_.erase(it);
      c->on_wire = false;
    }
  }
  if (!c || c->resolved.exchange(true)) {
    late_replies_.fetch_add(1);
    return;  // timed out or cancelled already; the credit returns as `credit` goes
  }
  RpcReply& r = c->reply;
  // The message as the caller sees it: a data checksum (net/net.h) is not counted.
  r.bytes_received = kHeaderSize + f.payload.size() + f.hdr.bulk_len;
  if (f.hdr.status != 0) {
    Code code = f.hdr.status <= static_cast<uint16_t>(Code::kCorrupt)
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
  credit.release();
  finish_slot(*c);
  bool write_done;
  {
    MutexLock lk(mu_);
    c->reply_in = true;
    c->reply_verbs = from.is_verbs();
    write_done = c->sent;
  }
  if (write_done) complete(c);
}

void RpcEngine::on_connection_closed(uint64_t conn_id, const Nid& peer_nid, const Status& why) {
  struct Hit {
    CallPtr c;
    TxTimes path;
    int attempt;
  };
  std::vector<Hit> dead;
  {
    MutexLock lk(mu_);
    for (auto& [xid, c] : pending_)
      if (c->sent && c->tx_times.conn_id == conn_id) dead.push_back({c, c->tx_times, c->attempts});
  }
  for (auto& [c, path, attempt] : dead) {
    Status s(Code::kClosed,
             "connection to " + peer_nid.to_string() + " closed before the reply: " + why.message(),
             why.health_kind());
    if (try_resend(c, s, path, attempt) == Resend::kGiveUp) resolve_error(c, final_error(*c, s));
  }
}

size_t RpcEngine::fail_calls_to(const std::vector<Nid>& nids, const Status& s) {
  std::vector<CallPtr> dead;
  auto hit = [&](const Nid& d) { return std::find(nids.begin(), nids.end(), d) != nids.end(); };
  {
    MutexLock lk(mu_);
    for (auto& [xid, c] : pending_)
      if (hit(c->dst)) dead.push_back(c);
    for (auto& [k, t] : targets_)
      for (const CallPtr& c : t->queue)
        if (hit(c->dst)) dead.push_back(c);
  }
  for (const CallPtr& c : dead) resolve_error(c, s);
  return dead.size();
}

size_t RpcEngine::expire(TimePoint now) {
  {
    MutexLock lk(replay_mu_);
    if (now - replay_swept_ >= std::chrono::seconds(10)) {
      replay_.expire(now);
      replay_swept_ = now;
    }
  }
  std::vector<std::pair<CallPtr, bool>> dead;  // (call, still queued for a slot)
  struct Remote {
    CallPtr c;
    TxTimes path;
    int attempt;
  };
  std::vector<Remote> remote;  // written, no reply by the attempt deadline
  {
    MutexLock lk(mu_);
    for (auto& [xid, c] : pending_)
      if (c->sent && c->attempt_deadline <= now)
        remote.push_back({c, c->tx_times, c->attempts});
      else if (c->deadline <= now)
        dead.emplace_back(c, false);
    for (auto& [k, t] : targets_)
      for (const CallPtr& c : t->queue)
        if (c->deadline <= now) dead.emplace_back(c, true);
  }
  for (auto& [c, queued] : dead)
    resolve_error(
        c, Status(Code::kTimeout, "RPC " + type_name(c->type) + " to " + c->dst.to_string() +
                                      (queued ? " timed out waiting for a slot (max_rpcs_in_flight)"
                                              : " timed out (no reply)")));
  for (auto& [c, path, attempt] : remote) {
    std::string what = "no reply to RPC " + type_name(c->type) + " (xid " + std::to_string(c->xid) +
                       ") by its attempt deadline";
    if (!c->resolved.load()) net_.report_remote_timeout(path, what);
    Status s(Code::kTimeout,
             "RPC " + type_name(c->type) + " to " + c->dst.to_string() +
                 " timed out (no reply; remote timeout)",
             HealthKind::kPeerNiUnreachable);
    if (try_resend(c, s, path, attempt) == Resend::kGiveUp) resolve_error(c, final_error(*c, s));
  }
  return dead.size() + remote.size();
}

void RpcEngine::shutdown() {
  std::vector<CallPtr> dead;
  {
    MutexLock lk(mu_);
    if (shut_) return;
    shut_ = true;
    for (auto& [xid, c] : pending_) dead.push_back(c);
    for (auto& [k, t] : targets_)
      for (const CallPtr& c : t->queue) dead.push_back(c);
  }
  for (const CallPtr& c : dead)
    resolve_error(c, Status(Code::kCancelled, "RPC " + type_name(c->type) + " to " +
                                                  c->dst.to_string() + " cancelled at shutdown"));
  workers_.stop();
}

}  // namespace pfsnet
