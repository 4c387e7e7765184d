// RpcClient (rpc_client.h): calls take a max_rpcs_in_flight slot of their target (or
// queue for one), go on the wire, are resent while their budget allows and complete once;
// run-time limits and counters. What comes back is in rpc_replies.cc, a call's state in
// rpc_call.h.
#include "rpc/rpc_client.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <deque>
#include <map>
#include <random>
#include <thread>

#include "base/log.h"
#include "base/mutex.h"
#include "rpc/msg_types.h"
#include "rpc/rpc_call.h"

namespace pfsnet {
namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// This thread's eventfd for waits on a socket (Net::receive_here): made at its first
// blocking call, closed at its exit; -1 when none can be made (the caller sleeps instead).
int thread_wake_fd() {
  struct Fd {
    int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  };
  thread_local Fd f;
  return f.fd;
}

bool retryable(const Status& s) {
  if (s.health_kind() != HealthKind::kNone) return true;
  return s.code() == Code::kClosed || s.code() == Code::kTimeout ||
         s.code() == Code::kUnreachable || s.code() == Code::kRejected;
}
}  // namespace

namespace {
uint64_t random_incarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t(rd()) << 32) ^ rd();
  return v;
}
}  // namespace

RpcClient::RpcClient(Net& net, const RpcOptions& opts, const std::atomic<RpcStats*>& stats,
                     const TypeNames& names, OpHistory& history)
    : net_(net),
      opts_(opts),
      stats_(stats),
      names_(names),
      clock_(net.clock()),
      history_(history),
      waiter_(opts.waiter ? *opts.waiter : cv_waiter_),
      incarnation_(opts.incarnation ? opts.incarnation : random_incarnation()),
      unacked_cap_(std::max<size_t>(1, opts.replay.window / 2)),
      done_trigger_(std::max<size_t>(1, unacked_cap_ / 4)) {
  MutexLock lk(mu_);
  max_in_flight_ = opts_.max_rpcs_in_flight;
  for (const auto& [nid, n] : opts_.peer_rpcs_in_flight)
    peer_limits_[nid] = std::max<int64_t>(1, n);
}

RpcClient::~RpcClient() = default;

size_t RpcClient::pending() const {
  MutexLock lk(mu_);
  size_t n = pending_.size();
  for (auto& [k, t] : targets_) n += t->queue.size();
  return n;
}

std::pair<int64_t, size_t> RpcClient::target_load(const Nid& dst) const {
  MutexLock lk(mu_);
  auto it = targets_.find(dst);
  if (it == targets_.end()) return {0, 0};
  return {it->second->in_flight, it->second->queue.size()};
}

RpcClient::CallPtr RpcClient::start_call(const Nid& dst, uint32_t type, Buffer payload,
                                         BulkData bulk, Callback cb, CallOptions o) {
  auto c = std::allocate_shared<Call>(FreeListAllocator<Call>());
  c->eng = this;
  c->dst = dst;
  c->type = type;
  c->reply.times.submit = clock_.now();
  Duration total = o.timeout.count() > 0 ? o.timeout : opts_.default_timeout;
  c->deadline = c->reply.times.submit + total;
  c->pin = o.via;
  c->reply_bulk = o.reply_bulk;  // the transport bounds it by the frame limits
  c->reply_memory = std::move(o.reply_memory);
  c->bulk_crc = o.bulk_crc;
  c->urgent = o.urgent;
  c->one_stream = o.one_stream;
  c->recover = o.recover;
  c->no_delay = o.no_delay;
  // The caller's, else this process's (if any): no copy per call.
  const std::string& job = o.job_id.empty() ? opts_.default_job_id : o.job_id;
  const bool bad_job = !job.empty() && !c->ext.set_job(job);
  if (o.trace) {
    c->ext.has_trace = o.trace->valid();
    c->ext.trace = *o.trace;
  }
  c->attempt_timeout =
      c->pin ? total
      : o.attempt_timeout.count() > 0
          ? std::min(total, o.attempt_timeout)
          : std::max<Duration>(std::chrono::milliseconds(1), total / (opts_.retry_count + 1));
  c->payload = std::move(payload);
  c->bulk = std::move(bulk);
  c->reply.bytes_sent = kHeaderSize + c->payload.size() + (c->bulk ? c->bulk->size() : 0);
  c->cb = std::move(cb);
  if (bad_job || (o.trace && !o.trace->valid())) {  // refused unsent
    resolve_error(c, Status(Code::kInvalidArgument,
                            bad_job ? "job id '" + job.substr(0, 80) +
                                          "': 1 to 64 printable ASCII bytes, no space"
                                    : std::string("trace context with an all-zero id")));
    return c;
  }
  submit(c);
  return c;
}

void RpcClient::call_async(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                           Callback cb, CallOptions o) {
  (void)start_call(dst, type, std::move(payload), std::move(bulk), std::move(cb), o);
}

RpcReply RpcClient::call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                         CallOptions o) {
  // The reply's slot lives on this stack: the callback fills it and signals under w.m, and
  // this function takes w.m before it returns, so the callback is done with it by then.
  struct Slot {
    Mutex m;
    CondVar cv;
    bool done GUARDED_BY(m) = false;
    std::atomic<bool> ready{false};  // set after `out` is filled, for the spinning caller
    RpcReply out GUARDED_BY(m);
    // While the caller waits on its socket (receive_here): its eventfd, written when the
    // reply comes on another thread (`signaled`), instead of notifying cv.
    int wake_fd GUARDED_BY(m) = -1;
    bool signaled GUARDED_BY(m) = false;
    std::thread::id caller = std::this_thread::get_id();
  } w;
  std::weak_ptr<Call> weak = start_call(
      dst, type, std::move(payload), std::move(bulk),
      [&w](RpcReply&& r) {
        MutexLock lk(w.m);
        w.out = std::move(r);
        w.done = true;
        w.ready.store(true, std::memory_order_release);
        if (w.wake_fd < 0) {
          w.cv.notify_one();
        } else if (std::this_thread::get_id() != w.caller) {
          uint64_t one = 1;
          (void)!::write(w.wake_fd, &one, sizeof(one));
          w.signaled = true;
        }
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
  // Then on the socket, where the reply comes: one wake-up, this thread's (TCP; in the
  // in-process cluster the waiter runs the events instead).
  int wake_fd = opts_.receive_here && &waiter_ == &cv_waiter_ ? thread_wake_fd() : -1;
  if (wake_fd >= 0 && !w.ready.load(std::memory_order_acquire)) {
    {
      MutexLock lk(w.m);
      if (!w.done) w.wake_fd = wake_fd;
    }
    Duration left = deadline - clock_.now();
    if (left > Duration::zero()) (void)net_.receive_here(dst, w.ready, left, wake_fd);
    bool drain;
    {
      MutexLock lk(w.m);
      w.wake_fd = -1;
      drain = w.signaled;
    }
    uint64_t n;
    if (drain) (void)!::read(wake_fd, &n, sizeof(n));
  }
  MutexLock lk(w.m);
  if (!waiter_.wait_until(lk, w.cv, deadline, [&]() REQUIRES(w.m) { return w.done; })) {
    lk.unlock();
    if (CallPtr c = weak.lock())
      resolve_error(c, final_error(*c, Status(Code::kTimeout, "RPC " + type_name(type) + " to " +
                                                                  dst.to_string() +
                                                                  " timed out (no reply)")));
    lk.lock();
    // Resolved now, by this thread or by the one that took the reply meanwhile: its
    // callback is done or about to be.
    w.cv.wait(lk, [&]() REQUIRES(w.m) { return w.done; });
  }
  return std::move(w.out);
}

RpcClient::Target& RpcClient::target_locked(const Nid& dst) {
  auto& t = targets_[dst];
  if (!t) {
    t = std::make_unique<Target>();
    t->dst = dst;
    auto own = peer_limits_.find(dst);
    if (own != peer_limits_.end()) t->limit = own->second;
  }
  return *t;
}

int64_t RpcClient::limit_locked(const Target& t) const {
  return t.limit > 0 ? t.limit : max_in_flight_;
}

RpcClient::Armed RpcClient::grant_slot_locked(Target& t, std::optional<TimePoint> now) {
  if (shut_ || t.queue.empty() || t.in_flight >= limit_locked(t)) return {};
  if (!t.legacy && t.unacked.size() >= unacked_cap_) {
    // Its server may still hold unacked_cap_ records of ours: a DONE first, then more --
    // when some of them are finished here (else they are all on the wire: their ends free
    // the room).
    if (t.unacked.size() > static_cast<size_t>(std::max<int64_t>(0, t.in_flight)))
      want_done_locked(t);
    ++t.counters.ack_waits;
    return {};
  }
  CallPtr c = std::move(t.queue.front());
  t.queue.pop_front();
  c->queued = false;
  ++t.in_flight;
  c->holds_slot = true;
  on_wire_locked(c);
  return arm_locked(c, now ? *now : clock_.now());
}

RpcClient::Armed RpcClient::arm_locked(const CallPtr& c, TimePoint now) {
  // The attempt's deadline runs from when it goes on the wire (not from a wait for a
  // max_rpcs_in_flight slot), within the RPC's own deadline.
  c->attempt_deadline = std::min(c->deadline, now + c->attempt_timeout);
  c->armed_at = now;
  if (c->granted_at == TimePoint{}) c->granted_at = now;
  c->tx_keep = c;  // until on_tx_done
  // Every xid below the oldest on the wire is finished here: the server may forget it,
  // and will have by the time this request arrives or any later one does.
  uint64_t oldest = pending_.empty() ? c->xid : std::min(c->xid, pending_.begin()->first);
  if (c->acct)
    while (!c->acct->unacked.empty() && c->acct->unacked.front() < oldest)
      c->acct->unacked.pop_front();
  return {c, c->attempt_deadline,
          static_cast<uint32_t>(std::min<uint64_t>(c->xid - oldest, UINT32_MAX)),
          static_cast<uint8_t>(c->flags | (c->written > c->not_run ? kFlagResend : 0))};
}

void RpcClient::on_wire_locked(const CallPtr& c) {
  c->xid = next_xid_++;
  pending_[c->xid] = c;
  c->on_wire = true;
  if (c->type == kMsgRpcDone) return;  // never recorded by the server
  c->acct = c->target ? c->target : &target_locked(c->dst);
  if (!c->acct->legacy) c->acct->unacked.push_back(c->xid);  // an older server: no window
}

void RpcClient::want_done_locked(Target& t) {
  if (t.legacy || t.done_due) return;
  t.done_due = true;
  dones_due_.store(true, std::memory_order_relaxed);
}

void RpcClient::left_wire_locked(Call& c) {
  Target* t = c.acct;
  if (!t || t->legacy || t->done_out) return;
  // Off the wire, not yet known finished at the server: the in-flight ones are the rest.
  size_t on_wire = static_cast<size_t>(std::max<int64_t>(0, t->in_flight));
  if (t->unacked.size() >= on_wire + done_trigger_) want_done_locked(*t);
}

DoneAck RpcClient::done_ack_locked() const {
  DoneAck d;
  d.upper = next_xid_;
  d.open.reserve(std::min(pending_.size(), kMaxDoneOpen));
  for (const auto& [xid, c] : pending_) {
    if (d.open.size() == kMaxDoneOpen) {  // the rest wait for the next DONE
      d.upper = xid;
      break;
    }
    d.open.push_back(xid);
  }
  return d;
}

void RpcClient::send_dones() {
  std::vector<Nid> due;
  std::shared_ptr<const DoneAck> ack;  // one for every target: what is finished is the engine's
  {
    MutexLock lk(mu_);
    dones_due_.store(false, std::memory_order_relaxed);
    if (shut_) return;
    for (auto& [key, t] : targets_) {
      if (!t->done_due || t->done_out || t->legacy) continue;
      t->done_due = false;
      t->done_out = true;
      due.push_back(t->dst);
    }
    if (!due.empty()) ack = std::make_shared<const DoneAck>(done_ack_locked());
  }
  for (const Nid& dst : due) {
    dones_sent_.fetch_add(1, std::memory_order_relaxed);
    CallOptions o;
    o.urgent = true;  // holds no slot: it is what frees them
    call_async(
        dst, kMsgRpcDone, encode_done(*ack), nullptr,
        [this, dst, ack](RpcReply&& r) { on_done_reply(dst, *ack, r.status); }, o);
  }
}

void RpcClient::on_done_reply(const Nid& dst, const DoneAck& sent, const Status& s) {
  std::vector<Armed> start;
  {
    MutexLock lk(mu_);
    Target& t = target_locked(dst);
    t.done_out = false;
    if (s.ok()) {
      std::erase_if(t.unacked, [&](uint64_t x) {
        return x < sent.upper && !std::binary_search(sent.open.begin(), sent.open.end(), x);
      });
    } else if (s.code() == Code::kNotFound) {
      PFS_LOG_INFO(
          "{} does not take DONE messages (an older pfsnet): no cap on the requests "
          "it may hold of this client",
          dst.to_string());
      t.legacy = true;
    } else {
      t.done_due = true;  // again from expire()
    }
    for (Armed a = grant_slot_locked(t); a.c; a = grant_slot_locked(t)) start.push_back(a);
  }
  for (const Armed& a : start) send_call(a);
  if (dones_due_.load(std::memory_order_relaxed)) send_dones();
}

void RpcClient::submit(const CallPtr& c) {
  Armed start;
  bool queued = false;
  const TimePoint now = c->reply.times.submit;  // read just now, by start_call
  {
    MutexLock lk(mu_);
    if (!shut_ && c->urgent) {  // on the wire at once, holding no slot
      on_wire_locked(c);
      start = arm_locked(c, now);
    } else if (!shut_) {
      Target& t = target_locked(c->dst);
      c->target = &t;
      t.queue.push_back(c);
      c->queued = true;
      start = grant_slot_locked(t, now);
      queued = c->queued;  // read here: once unlocked, a finishing call may send it
      if (queued) {
        slot_waits_.fetch_add(1, std::memory_order_relaxed);
        ++t.counters.slot_waits;
      }
    }
  }
  if (start.c) {
    send_call(start);
  } else if (!queued) {  // shut down: never sent
    resolve_error(c, Status(Code::kCancelled, "RPC engine is shut down"));
  }
  if (dones_due_.load(std::memory_order_relaxed)) send_dones();
}

void RpcClient::send_call(const Armed& a) {
  const CallPtr& c = a.c;
  auto f = std::make_unique<OutFrame>();
  f->hdr.kind = FrameKind::kRequest;
  f->hdr.msg_type = c->type;
  f->hdr.flags = a.flags;
  f->hdr.xid = c->xid;
  f->hdr.incarnation = incarnation_;
  f->payload = c->payload;
  f->bulk = c->bulk;
  f->bulk_crc = c->bulk_crc;
  f->reply_sink = c->reply_bulk;
  f->one_stream = c->one_stream;
  f->hdr.done_lag = a.done_lag;
  if (!c->ext.empty()) f->hdr.ext = c->ext;  // where the connection carries them
  if (c->pin)
    net_.send_via(c->pin->first, c->pin->second, std::move(f), a.deadline, c.get(), true);
  else
    net_.send(c->dst, std::move(f), a.deadline, c.get());
}

void RpcClient::on_tx_done(Call& call, const Status& s, const TxTimes& t) {
  CallPtr c;
  bool reply_in;
  Status damaged;
  int attempt;
  std::optional<Delivery> d;
  {
    MutexLock lk(mu_);
    call.tx_keep.swap(c);  // takes the reference over: no count up and down
    if (s.ok()) {
      c->tx_times = t;
      c->sent = true;
      ++c->written;
    }
    reply_in = c->reply_in;
    if (reply_in) d = complete_locked(*c);  // the reply came before this write's completion
    damaged = c->damaged;
    c->damaged = Status::Ok();
    attempt = c->attempts;  // the write that ended is the current attempt's (one at a time)
  }
  if (reply_in) {
    if (d) complete(c, *d);
  } else if (!s.ok() || !damaged.ok()) {
    const Status& why = s.ok() ? damaged : s;
    if (try_resend(c, why, t, attempt) == Resend::kGiveUp) resolve_error(c, final_error(*c, why));
  }
}

RpcClient::Resend RpcClient::try_resend(const CallPtr& c, const Status& s,
                                        const TxTimes& failed_path, int seen_attempt) {
  TimePoint now = clock_.now();
  // A connect that failed -- refused, or no route or ARP answer (UNREACHABLE) -- or backs
  // off past this attempt's deadline: the next attempt waits for the peer's next connect
  // (expire() sends it then), within the RPC's own deadline, rather than being refused at
  // once -- unless the caller has somewhere else to go and would rather fail at once
  // (CallOptions::no_delay).
  const bool unconnected = (s.health_kind() == HealthKind::kPeerNiConnectError ||
                            s.health_kind() == HealthKind::kPeerNiUnreachable) &&
                           !c->pin && !c->no_delay;
  const TimePoint connect_at = unconnected ? net_.connect_due(c->dst, now) : now;
  [[maybe_unused]] int attempt = 0;
  Armed a;
  bool later = false;  // parked: expire() sends it at resend_at
  {
    MutexLock lk(mu_);
    if (c->attempts != seen_attempt && !c->resolved.load()) return Resend::kStale;
    // A call that may wait for its server's restart: a failed connection after its first
    // resend, or a server the MGS declared dead (until it registers again), parks it until
    // the next try, however many.
    const bool recover =
        c->recover &&
        ((c->attempts > 1 && (s.code() == Code::kClosed || s.code() == Code::kUnreachable)) ||
         s.code() == Code::kPeerDead);
    if (shut_ || c->resolved.load() || !c->on_wire || c->pin || !(retryable(s) || recover) ||
        (c->attempts > opts_.retry_count && !recover) || connect_at >= c->deadline ||
        now >= c->deadline)
      return Resend::kGiveUp;
    c->sent = false;
    c->damaged = Status::Ok();
    c->last_failure = s;
    if (c->failures.size() < 8)
      c->failures.push_back(
          {now, "attempt " + std::to_string(c->attempts) + " failed: " + s.to_string()});
    later = recover || connect_at > now;
    if (later) {
      c->resend_at = recover ? std::max(connect_at, now + kRecoverResend) : connect_at;
    } else {
      attempt = ++c->attempts;
      a = arm_locked(c, now);
    }
  }
  net_.note_resend(failed_path);  // sent again now or at resend_at: a resend either way
  if (later) return Resend::kSent;
  PFS_LOG_DEBUG("resending RPC {} to {} (xid {}, attempt {}): {}", type_name(c->type),
                c->dst.to_string(), c->xid, attempt, s.to_string());
  send_call(a);
  return Resend::kSent;
}

Status RpcClient::final_error(const Call& c, const Status& s) {
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

void RpcClient::resolve_error(const CallPtr& c, const Status& s) {
  if (c->resolved.exchange(true)) return;
  Armed next;
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
    next = finish_slot_locked(*c);
  }
  c->reply.status = s;
  if (next.c) send_call(next);
  if (dones_due_.load(std::memory_order_relaxed)) send_dones();
  if (c->delivered.exchange(true)) return;
  deliver(*c);
}

void RpcClient::deliver(Call& c) {
  keep_if_slow(c);
  // What the caller's callback logs names this RPC (the JSON format's xid, job, trace_id).
  ScopedLogRpc in_rpc(log_rpc(c.xid, c.ext));
  if (!c.ext.empty()) log_call(c);
  if (c.cb) c.cb(std::move(c.reply));
}

void RpcClient::log_call(const Call& c) const {
  // At run time (node.log_level = "debug"), as the server's line of each such request.
  if (!spdlog::should_log(spdlog::level::debug)) return;
  PFS_LOG_AT(spdlog::level::debug, "call {} xid {} to {}: {} after {} us, job {}, trace {}",
             type_name(c.type), c.xid, c.dst.to_string(),
             c.reply.status.ok() ? std::string("ok") : c.reply.status.to_string(),
             std::chrono::duration_cast<std::chrono::microseconds>(
                 (c.reply.times.reply_complete != TimePoint{} ? c.reply.times.reply_complete
                                                              : clock_.now()) -
                 c.reply.times.submit)
                 .count(),
             c.ext.job_id_len ? c.ext.job() : std::string_view("-"),
             c.ext.has_trace ? c.ext.trace.to_string() : std::string("-"));
}

std::optional<RpcClient::Delivery> RpcClient::complete_locked(Call& c) {
  if (c.delivered.exchange(true)) return std::nullopt;
  RpcTimes& t = c.reply.times;
  t.write_start = c.tx_times.write_start;
  t.write_done = c.tx_times.write_done;
  if (c.reply.status.ok() && c.target) {
    RpcCounters& n = c.target->counters;
    ++n.completed;
    n.round_trip_ns += static_cast<uint64_t>(std::max<int64_t>(0, c.reply.round_trip().count()));
    n.bytes += c.reply.bytes_sent + c.reply.bytes_received;
  }
  return Delivery{c.tx_times.local_nid, c.tx_times.peer_nid, c.reply_verbs};
}

void RpcClient::complete(const CallPtr& c, const Delivery& d) {
  const RpcTimes& t = c->reply.times;
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
    r.node = c->dst;
    r.local_ni = d.sent_on;
    r.peer_ni = d.sent_to;
    r.exec_ns = c->reply.exec_time.count();
    r.total_ns = (t.reply_complete - t.submit).count();
    r.msg_type = c->type;
    r.bytes_sent = static_cast<uint32_t>(c->reply.bytes_sent);
    r.bytes_received = static_cast<uint32_t>(c->reply.bytes_received);
    // By the kinds of the two paths: a peer with tcp and o2ib NIs may answer on the other.
    r.sent_verbs = d.sent_on.is_verbs();
    r.received_verbs = d.received_verbs;
    stats->record(r);
  }
  deliver(*c);
}

Op RpcClient::op_of(const Call& c) {
  Op op;
  op.xid = c.xid;
  op.type = c.type;
  op.peer = c.dst;
  op.job = std::string(c.ext.job());
  if (c.ext.has_trace) op.trace = c.ext.trace;
  op.started = c.reply.times.submit;
  return op;
}

void RpcClient::keep_if_slow(const Call& c) {
  // The RPC path's one look: a reply's arrival was stamped already (no clock read).
  const TimePoint end =
      c.reply.times.reply_complete != TimePoint{} ? c.reply.times.reply_complete : clock_.now();
  if (!history_.wants(end - c.reply.times.submit, end)) return;
  const TimePoint now = clock_.now();
  Op op = op_of(c);
  op.phase = OpPhase::kDone;
  op.phase_since = op.ended = now;
  op.status = c.reply.status;
  const RpcTimes& t = c.reply.times;
  op.events.push_back({t.submit, "submitted"});
  Nid path_local, path_peer;  // the path its last attempt took
  {
    MutexLock lk(mu_);
    path_local = c.tx_times.local_nid;
    path_peer = c.tx_times.peer_nid;
    op.attempts = c.attempts;
    op.events.insert(op.events.end(), c.failures.begin(), c.failures.end());
    if (c.attempts > 1)
      op.events.push_back({c.armed_at, "attempt " + std::to_string(c.attempts) + " sent"});
    if (c.reply.status.ok())
      op.blame = op_blame(t.submit, c.granted_at, t.write_start, end, c.reply.exec_time,
                          c.reply.queue_time, c.attempts,
                          c.target ? limit_locked(*c.target) : max_in_flight_);
  }
  // The network's share set against TCP's own view of the path, read now (a system call
  // per connection, for the few RPCs slow enough to be kept): a standing queue (srtt far
  // above its lowest), segments being lost, or nothing the kernel saw.
  // And against the probe mesh's view of the path it took, in the same seconds.
  if (op.blame && op.blame->verdict.starts_with("network:")) {
    if (ReplyWait w = net_.reply_wait(c.dst); !w.text.empty())
      op.blame->verdict += "; now " + w.text;
    MutexLock lk(view_mu_);
    if (path_view_ && path_local != Nid())
      if (std::string m = path_view_(path_local, path_peer); !m.empty())
        op.blame->verdict += "; " + m;
  }
  if (t.write_start != TimePoint{}) op.events.push_back({t.write_start, "write started"});
  if (t.write_done != TimePoint{}) op.events.push_back({t.write_done, "written"});
  if (t.reply_first_byte != TimePoint{})
    op.events.push_back({t.reply_first_byte, "reply arriving"});
  if (c.reply.status.ok()) {
    std::string server = "reply received; server: " + op_duration_text(c.reply.exec_time);
    if (c.reply.queue_time)
      server += ", of it " + op_duration_text(*c.reply.queue_time) + " queued for a worker";
    op.events.push_back({t.reply_complete != TimePoint{} ? t.reply_complete : now, server});
  } else {
    op.events.push_back({now, "failed: " + c.reply.status.to_string()});
  }
  std::stable_sort(op.events.begin(), op.events.end(),
                   [](const OpEvent& a, const OpEvent& b) { return a.at < b.at; });
  history_.add(std::move(op));
}

std::vector<Op> RpcClient::ops() const {
  std::vector<Op> v = ops_of_calls();
  // What the net holds each unsent one for, asked outside the client's lock: once per
  // server (its calls wait on the same paths).
  const TimePoint now = clock_.now();
  std::map<Nid, SendWait> waits;
  std::map<Nid, ReplyWait> replies;
  for (Op& op : v) {
    if (op.phase == OpPhase::kReply) {  // whether the server's host has it, by TCP
      auto it = replies.find(op.peer);
      if (it == replies.end()) it = replies.emplace(op.peer, net_.reply_wait(op.peer)).first;
      op.reply_wait = it->second;
      if (!it->second.text.empty()) op.detail += "; " + it->second.text;
      continue;
    }
    if (op.phase != OpPhase::kNetwork) continue;
    auto it = waits.find(op.peer);
    if (it == waits.end()) it = waits.emplace(op.peer, net_.send_wait(op.peer, now)).first;
    SendWait w = it->second;
    op.net_wait = w.kind;
    // (ops_of_calls() left the detail the attempt's note alone)
    op.detail = (w.kind == SendWait::Kind::kNone
                     ? std::string("handed to the net: a connection, credits or the write")
                     : std::move(w.text)) +
                op.detail;
  }
  return v;
}

std::vector<Op> RpcClient::ops_of_calls() const {
  std::vector<Op> v;
  MutexLock lk(mu_);
  for (const auto& [xid, c] : pending_) {
    if (c->type == kMsgRpcDone) continue;
    Op op = op_of(*c);
    op.attempts = c->attempts;
    if (c->resend_at) {
      op.phase = OpPhase::kResend;
      op.phase_since = c->armed_at;
      op.detail = "resending at +" + op_duration_text(*c->resend_at - clock_.now()) +
                  " after: " + c->last_failure.to_string();
    } else if (!c->sent) {
      op.phase = OpPhase::kNetwork;
      op.phase_since = c->armed_at;  // ops() says what the net holds it for
    } else {
      op.phase = OpPhase::kReply;
      op.phase_since = c->tx_times.write_done;
      op.reply_bulk = c->reply_bulk;
      op.detail = "waiting for the reply from " + c->dst.to_string();
    }
    if (c->attempts > 1 && op.phase != OpPhase::kResend)
      op.detail += " (attempt " + std::to_string(c->attempts) +
                   "; the last failed: " + c->last_failure.to_string() + ")";
    v.push_back(std::move(op));
  }
  for (const auto& [dst, t] : targets_)
    for (const CallPtr& c : t->queue) {
      Op op = op_of(*c);
      op.phase = OpPhase::kSlot;
      op.phase_since = c->reply.times.submit;
      op.detail = "queued behind " + std::to_string(t->in_flight) + " RPC(s) on the wire to " +
                  dst.to_string() + " (max_rpcs_in_flight " + std::to_string(limit_locked(*t)) +
                  ")";
      v.push_back(std::move(op));
    }
  return v;
}

RpcClient::Armed RpcClient::finish_slot_locked(Call& c) {
  left_wire_locked(c);
  if (!c.holds_slot) return {};
  c.holds_slot = false;
  Target& t = *c.target;  // set when it queued, before it could hold a slot
  --t.in_flight;
  return grant_slot_locked(t);
}

std::vector<Nid> RpcClient::waiting_targets() const {
  std::vector<Nid> v;
  MutexLock lk(mu_);
  for (const auto& [key, t] : targets_)
    if (!t->queue.empty()) v.push_back(key);
  return v;
}

RpcCounters RpcClient::counters() const {
  RpcCounters c;
  c.completed = completed_.load(std::memory_order_relaxed);
  c.round_trip_ns = round_trip_ns_.load(std::memory_order_relaxed);
  c.bytes = bytes_.load(std::memory_order_relaxed);
  c.slot_waits = slot_waits_.load(std::memory_order_relaxed);
  return c;
}

int64_t RpcClient::max_rpcs_in_flight() const {
  MutexLock lk(mu_);
  return max_in_flight_;
}

int64_t RpcClient::max_rpcs_in_flight(const Nid& dst) const {
  MutexLock lk(mu_);
  auto own = peer_limits_.find(dst);
  return own != peer_limits_.end() ? own->second : max_in_flight_;
}

std::vector<RpcClient::TargetInfo> RpcClient::targets() const {
  std::vector<TargetInfo> v;
  MutexLock lk(mu_);
  for (const auto& [key, t] : targets_)
    v.push_back(
        {t->dst, limit_locked(*t), t->limit > 0, t->in_flight, t->queue.size(), t->counters});
  return v;
}

void RpcClient::set_peer_rpcs_in_flight(const std::vector<std::pair<Nid, int64_t>>& limits) {
  std::vector<Armed> start;
  {
    MutexLock lk(mu_);
    peer_limits_.clear();
    for (const auto& [nid, n] : limits) peer_limits_[nid] = std::max<int64_t>(1, n);
    for (auto& [key, t] : targets_) {
      auto own = peer_limits_.find(key);
      t->limit = own != peer_limits_.end() ? own->second : 0;
      for (Armed a = grant_slot_locked(*t); a.c; a = grant_slot_locked(*t))
        start.push_back(std::move(a));
    }
  }
  for (const Armed& a : start) send_call(a);
}

void RpcClient::set_max_rpcs_in_flight(int64_t n) {
  std::vector<Armed> start;
  {
    MutexLock lk(mu_);
    max_in_flight_ = std::max<int64_t>(1, n);
    for (auto& [k, t] : targets_)
      for (Armed a = grant_slot_locked(*t); a.c; a = grant_slot_locked(*t))
        start.push_back(std::move(a));
  }
  for (const Armed& a : start) send_call(a);
}

bool RpcClient::shutdown() {
  std::vector<CallPtr> dead;
  {
    MutexLock lk(mu_);
    if (shut_) return false;
    shut_ = true;
    for (auto& [xid, c] : pending_) dead.push_back(c);
    for (auto& [k, t] : targets_)
      for (const CallPtr& c : t->queue) dead.push_back(c);
  }
  for (const CallPtr& c : dead)
    resolve_error(c, Status(Code::kCancelled, "RPC " + type_name(c->type) + " to " +
                                                  c->dst.to_string() + " cancelled at shutdown"));
  return true;
}

}  // namespace pfsnet
