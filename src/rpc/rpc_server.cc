// RpcServer (rpc_server.h): requests are served by their type's handler (inline on the
// I/O thread or on a worker) and answered on the path they came in on; a reply whose send
// fails is sent again on the best path left.
#include "rpc/rpc_server.h"

#include <cassert>

#include "base/free_list.h"
#include "base/log.h"
#include "rpc/msg_types.h"

namespace pfsnet {

namespace {

// How many more times a reply whose send failed is sent (within its deadline).
constexpr int kReplyResends = 2;

// A frame of `r` to send: payload and bulk shared with it.
std::unique_ptr<OutFrame> frame_of(const SavedReply& r) {
  auto f = std::make_unique<OutFrame>();
  f->hdr = r.hdr;
  f->payload = r.payload;
  f->bulk = r.bulk;
  f->bulk_limit = r.bulk_limit;
  f->bulk_crc = r.bulk_crc;
  return f;
}

// A reply's completion that resends it when its send fails (the connection of its path
// closed, a send error, a fault rule) on the best path left, as LNet resends any message
// whose send failed: Net demerited the failed path, so selection takes another -- a reply
// to a request that came in over RDMA may so leave over TCP, which the client records as
// latency mixed. It shares the reply as first sent when the reply cache holds it too, else
// keeps it (its payload and bulk are shared with the frame either way), and holds the Net
// only, which outlives the engine.
class ReplyResend final : public TxCompletion {
 public:
  ReplyResend(Net& net, const Nid& to, RpcServer::ReplyRef reply, TimePoint deadline)
      : net_(net), to_(to), reply_(std::move(reply)), deadline_(deadline) {}

  void on_tx_done(const Status& s, const TxTimes& t) override {
    uint64_t xid = reply_.get().hdr.xid;
    if (s.ok() || left_ == 0 || s.code() == Code::kCancelled || net_.clock().now() >= deadline_) {
      if (!s.ok()) PFS_LOG_WARN("reply {} to {} not sent: {}", xid, to_.to_string(), s.message());
      delete this;
      return;
    }
    --left_;
    PFS_LOG_INFO("reply {} to {} failed on {} ({}); sending it again", xid, to_.to_string(),
                 t.local_nid != Nid() ? t.local_nid.to_string() : "?", s.message());
    // May complete at once: nothing after it.
    net_.send(to_, frame_of(reply_.get()), deadline_, this);
  }

 private:
  Net& net_;
  const Nid to_;
  const RpcServer::ReplyRef reply_;
  const TimePoint deadline_;
  int left_ = kReplyResends;

 public:
  PFSNET_THREAD_FREE_LIST(ReplyResend)
};

}  // namespace

RpcServer::RpcServer(Net& net, const RpcOptions& opts, const std::atomic<RpcStats*>& stats,
                     TypeNames& names, OpHistory& history)
    : net_(net),
      opts_(opts),
      stats_(stats),
      names_(names),
      clock_(net.clock()),
      workers_(opts.workers, net.clock(), "pfs-rpc-worker"),
      board_(net.clock(), history),
      replay_(
          [&] {
            ReplyCacheOptions o = opts.replay;
            o.restart_window = opts.default_timeout;  // no copy sent before the start is later
            return o;
          }(),
          net.clock().now()) {
  set_policy(opts.nrs_policy, opts.nrs);
}

void RpcServer::serve(const Nid& from, InFrame&& f, RxCredit credit) {
  if (f.hdr.msg_type == kMsgRpcDone) {
    serve_done(from, std::move(f), std::move(credit));
    return;
  }
  auto it = types_.find(f.hdr.msg_type);
  if (it == types_.end() || (!it->second.handler && !it->second.async)) {
    credit.release();
    RpcResponse r;
    r.status =
        Status(Code::kNotFound, "no handler for message type " + std::to_string(f.hdr.msg_type));
    send_reply(from, f.hdr, f.times.complete, std::move(r), false);
    return;
  }
  const TypeInfo& t = it->second;
  const bool saved = t.once && f.hdr.incarnation != 0;
  if (saved && !admit(from, f.hdr, (f.hdr.flags & kFlagResend) && !t.restart_safe)) {
    credit.release();
    return;
  }
  RequestScheduler* nrs =
      nrs_[!t.async && t.mode == HandlerMode::kWorker].load(std::memory_order_acquire);
  if (nrs && nrs_scheduled(f.hdr.msg_type)) {
    // Held until the policy lets it in, with its receive credit: it counts against its
    // client's window as a request in service does (rpc/nrs.h).
    NrsFlowKey flow{from, std::string(f.hdr.ext.job())};
    const uint64_t bytes = f.payload.size() + f.bulk.size();
    // On the board from its arrival: `diag ops` shows what it waits for.
    struct Held {
      InFrame f;
      RxCredit credit;
      std::optional<OpBoard::Ticket> op;
    };
    auto held = std::make_shared<Held>(Held{std::move(f), std::move(credit), std::nullopt});
    held->op.emplace(
        board_.enter(server_op(from, held->f.hdr, held->f.times.complete), OpPhase::kQueued));
    held->op->queued("a slot of the request scheduler (rpc.nrs_policy fair)");
    nrs->submit(std::move(flow), bytes, [this, &t, from, saved, held](RequestScheduler::Slot slot) {
      start(t, from, std::move(held->f), std::move(held->credit), saved, std::move(slot),
            std::move(held->op));
    });
    return;
  }
  start(t, from, std::move(f), std::move(credit), saved, {});
}

void RpcServer::start(const TypeInfo& t, const Nid& from, InFrame&& f, RxCredit credit, bool saved,
                      RequestScheduler::Slot slot, std::optional<OpBoard::Ticket> op) {
  if (t.async) {
    serve_async(t, from, std::move(f), std::move(credit), saved, std::move(slot), std::move(op));
    return;
  }
  // `op`: a worker runs it (null inline), which says how long it waited for one.
  auto run = [this, &t, from, saved](InFrame& fr, RxCredit& cr, OpBoard::Ticket* op,
                                     RequestScheduler::Slot& sl) {
    const bool queued = op != nullptr;
    if (op) op->executing();
    RpcRequest req{
        from,       fr.hdr.msg_type, std::move(fr.payload), std::move(fr.bulk), fr.hdr.incarnation,
        fr.hdr.xid, fr.bulk_crc};
    take_extensions(fr.hdr, &req);
    std::optional<Duration> waited;
    if (queued) waited = std::max(Duration(0), clock_.now() - fr.times.complete);
    // What the handler logs names this RPC (the JSON format's xid, job, trace_id).
    ScopedLogRpc in_rpc(log_rpc(fr.hdr.xid, fr.hdr.ext));
    if (!fr.hdr.ext.empty()) log_request(from, fr.hdr, waited);
    RpcResponse resp;
    try {
      resp = t.handler(req);
    } catch (const std::exception& e) {
      resp = RpcResponse{};
      resp.status = Status(Code::kRemoteError,
                           "handler for " + type_name(fr.hdr.msg_type) + " failed: " + e.what());
    }
    req = RpcRequest{};
    cr.release();  // before the reply, so the credit rides on it
    if (op) op->ended(resp.status);
    send_reply(from, fr.hdr, fr.times.complete, std::move(resp), true, saved, waited);
    sl.release();  // the policy's next request may start here
  };
  if (t.mode == HandlerMode::kInline) {
    // Held by the policy: it waited, and says how long as a worker's request does; one the
    // policy let in at once runs as an inline request always did (off the board).
    if (op && !slot.waited()) op.reset();
    run(f, credit, op ? &*op : nullptr, slot);
    return;
  }
  struct Job {
    InFrame f;
    RxCredit credit;
    OpBoard::Ticket op;  // off the board once the job is done with (its reply sent)
    RequestScheduler::Slot slot;
  };
  if (op)
    op->queued("");  // now for a worker
  else
    op.emplace(board_.enter(server_op(from, f.hdr, f.times.complete), OpPhase::kQueued));
  auto job =
      std::make_shared<Job>(Job{std::move(f), std::move(credit), std::move(*op), std::move(slot)});
  if (!workers_.submit([job, run]() mutable { run(job->f, job->credit, &job->op, job->slot); })) {
    job->credit.release();
    RpcResponse r;
    r.status = Status(Code::kCancelled, "server is shutting down");
    send_reply(from, job->f.hdr, job->f.times.complete, std::move(r), false, saved);
  }
}

void RpcServer::stop() {
  for (auto& q : nrs_)
    if (RequestScheduler* r = q.exchange(nullptr, std::memory_order_acq_rel)) r->drain();
  workers_.stop();
}

void RpcServer::set_policy(NrsPolicyKind kind, const FairShareOptions& o) {
  MutexLock lk(nrs_mu_);
  for (int workers = 0; workers < 2; ++workers) {
    RequestScheduler* cur = nrs_[workers].load(std::memory_order_acquire);
    if (kind == NrsPolicyKind::kFifo) {
      if (cur) {
        nrs_[workers].store(nullptr, std::memory_order_release);
        // What it holds starts as its requests in service end (not here: the caller may be
        // a config applier, under the configuration's lock); their slots come back to it.
        cur->release_all();
      }
      continue;
    }
    FairShareOptions own = o;
    if (workers) own.slots = std::max(1, opts_.workers);
    if (cur) {
      cur->set_options(std::move(own));
      continue;
    }
    nrs_all_.push_back(std::make_unique<RequestScheduler>(clock_, std::move(own)));
    nrs_[workers].store(nrs_all_.back().get(), std::memory_order_release);
  }
}

NrsPolicyKind RpcServer::policy() const {
  return nrs_[0].load(std::memory_order_acquire) ? NrsPolicyKind::kFair : NrsPolicyKind::kFifo;
}

std::optional<RpcServer::PolicyFigures> RpcServer::policy_figures() const {
  MutexLock lk(nrs_mu_);
  RequestScheduler* a = nrs_[0].load(std::memory_order_acquire);
  RequestScheduler* w = nrs_[1].load(std::memory_order_acquire);
  if (!a || !w) return std::nullopt;
  return PolicyFigures{a->figures(), w->figures()};
}

std::vector<Op> RpcServer::ops() const {
  std::vector<Op> v = board_.in_flight();
  const WorkerStats w = workers_.stats();
  for (Op& op : v) {
    if (op.phase == OpPhase::kWaiting) continue;                       // its handler said for what
    if (op.phase == OpPhase::kQueued && !op.detail.empty()) continue;  // held by the policy
    if (op.phase == OpPhase::kQueued)
      op.detail = "waiting for a worker: " + std::to_string(w.busy) + " of " +
                  std::to_string(w.threads) + " busy, " + std::to_string(w.queued) +
                  " request(s) queued (rpc.workers)";
    else if (op.handler_at == TimePoint{})  // an asynchronous handler's, since arrival
      op.detail = "its handler has not answered";
    else
      op.detail = "its handler runs on a worker";
  }
  return v;
}

Op RpcServer::server_op(const Nid& from, const FrameHeader& h, TimePoint arrived) {
  Op op;
  op.client = false;
  op.xid = h.xid;
  op.type = h.msg_type;
  op.peer = from;
  op.job = std::string(h.ext.job());
  if (h.ext.has_trace) op.trace = h.ext.trace;
  op.started = arrived;
  return op;
}

void RpcServer::serve_async(const TypeInfo& t, const Nid& from, InFrame&& f, RxCredit credit,
                            bool saved, RequestScheduler::Slot slot,
                            std::optional<OpBoard::Ticket> held_op) {
  // The credit rides on the reply: released just before it is sent (or now, kReturned).
  if (!t.hold_credit) credit.release();
  auto cr = std::make_shared<RxCredit>(std::move(credit));
  FrameHeader hdr = f.hdr;
  TimePoint received = f.times.complete;
  // On the board until the responder is done with (answered, or dropped unanswered); since
  // its arrival when the policy held it.
  auto op = held_op ? std::make_shared<OpBoard::Ticket>(std::move(*held_op))
                    : std::make_shared<OpBoard::Ticket>(
                          board_.enter(server_op(from, hdr, received), OpPhase::kExecuting));
  if (held_op) op->executing();
  // No allocation under fifo: there is no slot to give back.
  auto sl = slot.held() ? std::make_shared<RequestScheduler::Slot>(std::move(slot)) : nullptr;
  Responder resp(
      [this, from, hdr, received, cr, saved, op, sl](RpcResponse&& r) {
        cr->release();
        op->ended(r.status);
        send_reply(from, hdr, received, std::move(r), true, saved);
        if (sl) sl->release();
      },
      [op](std::string_view what) {  // what its handler waits for (diag ops)
        if (what.empty())
          op->resumed();
        else
          op->waiting(std::string(what));
      });
  RpcRequest req{
      from,      f.hdr.msg_type, std::move(f.payload), std::move(f.bulk), f.hdr.incarnation,
      f.hdr.xid, f.bulk_crc};
  take_extensions(hdr, &req);
  ScopedLogRpc in_rpc(log_rpc(hdr.xid, hdr.ext));
  if (!hdr.ext.empty()) log_request(from, hdr, std::nullopt);
  try {
    t.async(req, std::move(resp));
  } catch (const std::exception& e) {
    // The Responder went with the call; if the handler had not kept it, it answered
    // kCancelled already.
    PFS_LOG_WARN("async handler for {} failed: {}", type_name(hdr.msg_type), e.what());
  }
}

void RpcServer::serve_done(const Nid& from, InFrame&& f, RxCredit credit) {
  credit.release();
  RpcResponse r;
  auto d = decode_done(f.payload.span());
  if (!d.ok()) {
    r.status = d.status();
  } else if (f.hdr.incarnation != 0) {
    MutexLock lk(replay_mu_);
    replay_.done(f.hdr.incarnation, *d, clock_.now());
  }
  send_reply(from, f.hdr, f.times.complete, std::move(r), false);
}

bool RpcServer::admit(const Nid& from, const FrameHeader& h, bool copy) {
  Admission a;
  {
    MutexLock lk(replay_mu_);
    a = replay_.admit(h.incarnation, h.xid, h.done_lag, ReplyPath{from, h.dst_nid}, clock_.now(),
                      copy);
  }
  switch (a.what) {
    case Admit::kRun:
      return true;
    case Admit::kRunning:   // the first run answers
    case Admit::kFinished:  // nobody waits for it
      PFS_LOG_DEBUG("request {} xid {} from {}: a copy, {}: dropped", type_name(h.msg_type), h.xid,
                    from.to_string(), admit_name(a.what));
      return false;
    case Admit::kSaved:
      PFS_LOG_DEBUG("request {} xid {} from {} ran already: its reply sent again",
                    type_name(h.msg_type), h.xid, from.to_string());
      send_reply_frame(from, h.dst_nid, ReplyRef{std::move(a.reply), {}}, clock_.now());
      return false;
    case Admit::kOverWindow:
    case Admit::kUnknown:
    case Admit::kBeforeStart: {
      RpcResponse r;
      if (a.what == Admit::kBeforeStart)
        r.status = Status(Code::kOutcomeUnknown,
                          "request " + type_name(h.msg_type) + " xid " + std::to_string(h.xid) +
                              " is a copy of one that may have reached this server before it "
                              "started, and it keeps no record across its restart: whether it "
                              "ran cannot be told; not run again");
      else if (a.what == Admit::kOverWindow)
        r.status =
            Status(Code::kProtocol,
                   "request " + type_name(h.msg_type) + " xid " + std::to_string(h.xid) +
                       " refused, not run: its client has " + std::to_string(opts_.replay.window) +
                       " requests it has not acknowledged here (rpc.reply_cache_entries)");
      else
        r.status = Status(Code::kOutcomeUnknown,
                          "request " + type_name(h.msg_type) + " xid " + std::to_string(h.xid) +
                              " is a copy of one whose record went with its client's state "
                              "(evicted, or silent past rpc.reply_cache_idle): whether it ran "
                              "cannot be told; not run again");
      PFS_LOG_WARN_LIMITED("replay:" + from.to_string(), "{}", r.status.message());
      send_reply(from, h, clock_.now(), std::move(r), false);
      return false;
    }
  }
  return true;
}

void RpcServer::take_extensions(const FrameHeader& h, RpcRequest* req) {
  if (h.ext.job_id_len) req->job_id.assign(h.ext.job());
  if (h.ext.has_trace) req->trace = h.ext.trace;
}

void RpcServer::log_request(const Nid& from, const FrameHeader& h, std::optional<Duration> waited) {
  // At run time (node.log_level = "debug"), not compiled out as PFS_LOG_DEBUG is: only
  // requests that carry extension fields come here.
  if (!spdlog::should_log(spdlog::level::debug)) return;
  PFS_LOG_AT(spdlog::level::debug, "request {} xid {} from {}: job {}, trace {}, queued {} us",
             type_name(h.msg_type), h.xid, from.to_string(),
             h.ext.job_id_len ? h.ext.job() : std::string_view("-"),
             h.ext.has_trace ? h.ext.trace.to_string() : std::string("-"),
             waited ? std::chrono::duration_cast<std::chrono::microseconds>(*waited).count() : 0);
}

void RpcServer::send_reply(const Nid& to, const FrameHeader& req, TimePoint received,
                           RpcResponse&& r, bool counted, bool saved,
                           std::optional<Duration> queued) {
  ReplyRef ref;
  SavedReply* reply = &ref.own;
  reply->hdr.kind = FrameKind::kReply;
  reply->hdr.xid = req.xid;
  reply->hdr.msg_type = req.msg_type;
  size_t bulk_size = r.bulk ? std::min(r.bulk->size(), r.bulk_limit) : 0;
  if (r.status.ok() && bulk_size > opts_.max_bulk) {
    r.status =
        Status(Code::kInternal, "reply bulk of " + std::to_string(bulk_size) +
                                    " bytes exceeds the limit " + std::to_string(opts_.max_bulk));
  }
  if (r.status.ok()) {
    reply->payload = std::move(r.payload);
    reply->bulk = std::move(r.bulk);
    reply->bulk_limit = r.bulk_limit;
    reply->bulk_crc = r.bulk_crc;
  } else {
    reply->hdr.status = static_cast<uint16_t>(r.status.code());
    reply->hdr.health = static_cast<uint16_t>(r.status.health_kind());
    std::string msg = r.status.message().substr(0, 1024);
    reply->payload = Buffer::copy_of(std::string_view(msg));
  }
  TimePoint now = clock_.now();
  int64_t exec = std::max<int64_t>(0, (now - received).count());
  reply->hdr.exec_ns = static_cast<uint64_t>(exec);
  if (queued) {  // a worker ran it: how long it waited for one travels back (version 2)
    reply->hdr.ext.has_queue_time = true;
    reply->hdr.ext.queue_ns = static_cast<uint64_t>(queued->count());
  }
  RpcStats* stats = stats_.load(std::memory_order_acquire);
  if (stats && counted)
    stats->record_exec(RawExecRecord{exec, req.msg_type, queued ? queued->count() : 0});
  // The wait for a worker, under its own name (RPC_QUEUE): diag rpc shows it beside the
  // execution times.
  if (stats && counted && queued) stats->record_exec(RawExecRecord{queued->count(), kMsgRpcQueue});
  // Per job and per client (diag jobs): what it asked and what it got back -- the payload
  // and bulk the handler saw (a sealed payload's checksum is the wire's, not the job's).
  const uint64_t asked = uint64_t(req.payload_len) + req.bulk_len -
                         ((req.flags & kFlagDataCrc) ? std::min(req.payload_len, kDataCrcSize) : 0);
  if (stats && counted)
    stats->jobs().record(req.ext.job_id_len ? req.ext.job() : std::string_view(), to, req.msg_type,
                         asked, reply->payload.size() + (reply->bulk ? bulk_size : 0),
                         Duration(exec), queued.value_or(Duration::zero()), now);
  Nid dest = to;
  Nid local = req.dst_nid;
  if (saved) {
    // The reply cache keeps it: shared from here on.
    ref.shared = std::make_shared<const SavedReply>(std::move(ref.own));
    std::optional<ReplyPath> p;
    {
      MutexLock lk(replay_mu_);
      p = replay_.finish(req.incarnation, req.xid, ref.shared);
    }
    // A copy came by another path while it ran: the client waits there now.
    if (p) {
      dest = p->from;
      local = p->local;
    }
  }
  send_reply_frame(dest, local, std::move(ref), now);
}

void RpcServer::send_reply_frame(const Nid& to, const Nid& local, ReplyRef reply, TimePoint now) {
  // The reply goes back on the path the request came in on while that NI is up.
  TimePoint deadline = now + opts_.default_timeout;
  std::unique_ptr<OutFrame> f = frame_of(reply.get());
  auto* resend = new ReplyResend(net_, to, std::move(reply), deadline);
  if (!local.is_none() && local != Nid())
    net_.send_via(local, to, std::move(f), deadline, resend, false);
  else
    net_.send(to, std::move(f), deadline, resend);
}

// ---- message types and their handlers ----

RpcServer::TypeInfo& RpcServer::add_type(uint32_t type, std::string name, Execution exec) {
  names_.define(type, std::move(name));
  TypeInfo& t = types_[type];
  assert(!t.handler && !t.async);
  t.once = exec != Execution::kRepeatable;
  t.restart_safe = exec == Execution::kOnceRestartSafe;
  return t;
}

void RpcServer::handle(uint32_t type, std::string name, Handler h, HandlerMode mode,
                       Execution exec) {
  TypeInfo& t = add_type(type, std::move(name), exec);
  t.handler = std::move(h);
  t.mode = mode;
}

void RpcServer::handle_async(uint32_t type, std::string name, AsyncHandler h, Execution exec,
                             AsyncCredit credit) {
  TypeInfo& t = add_type(type, std::move(name), exec);
  t.async = std::move(h);
  t.hold_credit = credit == AsyncCredit::kHeld;
}

void RpcServer::refuse_corrupt(const Nid& from, const FrameHeader& hdr, RxCredit credit) {
  credit.release();
  if (auto t = types_.find(hdr.msg_type);
      t != types_.end() && t->second.once && hdr.incarnation != 0) {
    MutexLock lk(replay_mu_);
    replay_.refused(hdr.incarnation, hdr.xid, clock_.now());
  }
  RpcResponse r;
  r.status = Status(Code::kCorrupt,
                    "request " + type_name(hdr.msg_type) + " xid " + std::to_string(hdr.xid) +
                        " from " + from.to_string() + " failed its data checksum; not run",
                    HealthKind::kPeerNiCorrupt);
  send_reply(from, hdr, clock_.now(), std::move(r), false);
}

void RpcServer::expire(TimePoint now) {
  MutexLock lk(replay_mu_);
  if (now - replay_swept_ >= std::chrono::seconds(10)) {
    replay_.expire(now);
    replay_swept_ = now;
  }
}

size_t RpcServer::forget_client(const Nid& client) {
  MutexLock lk(replay_mu_);
  return replay_.evict(client);
}

ReplyCacheStats RpcServer::replay_stats() const {
  MutexLock lk(replay_mu_);
  return replay_.stats();
}

}  // namespace pfsnet
