// RpcClient (rpc_client.h), what comes back: replies matched to their calls (delivered
// once both the reply and the write's completion are in), damaged frames resent, calls
// on a closed connection resent or failed, deadlines (rpc_call.h).
#include "base/log.h"
#include "base/mutex.h"
#include "rpc/msg_types.h"
#include "rpc/rpc_call.h"
#include "rpc/rpc_client.h"

namespace pfsnet {

void RpcClient::resend_damaged(uint64_t xid, const Status& s, bool not_run) {
  CallPtr c;
  TxTimes path;
  int attempt = 0;
  {
    MutexLock lk(mu_);
    auto it = pending_.find(xid);
    if (it == pending_.end()) return;  // answered, timed out or cancelled already
    c = it->second;
    if (not_run) ++c->not_run;  // that copy's fate is known (its write is counted either way)
    if (!c->sent) {             // its write completes later: on_tx_done resends
      c->damaged = s;
      return;
    }
    path = c->tx_times;
    attempt = c->attempts;
  }
  if (try_resend(c, s, path, attempt) == Resend::kGiveUp) resolve_error(c, final_error(*c, s));
}

std::optional<Buffer> RpcClient::reply_memory(const FrameHeader& hdr,
                                              std::function<void()> cancel) {
  if (hdr.status != 0) return std::nullopt;  // an error's text, not the data
  CallPtr c;
  {
    MutexLock lk(mu_);
    auto it = pending_.find(hdr.xid);
    if (it == pending_.end() || !it->second->reply_memory) return std::nullopt;
    c = it->second;  // its function is set once, before the call was sent
  }
  return c->reply_memory(hdr.bulk_len, std::move(cancel));
}

void RpcClient::on_reply(const Nid& from, InFrame&& f, RxCredit credit) {
  if (f.hdr.status == static_cast<uint16_t>(Code::kCorrupt)) {
    // The request arrived damaged and did not run: it goes again.
    credit.release();
    resend_damaged(
        f.hdr.xid,
        Status(Code::kCorrupt, std::string(f.payload.view()), HealthKind::kPeerNiCorrupt), true);
    return;
  }
  // One critical section: the call found and resolved by its reply, its slot passed on,
  // and -- when its write completed already -- its delivery's part under the lock.
  CallPtr c;
  Armed next;
  std::optional<Delivery> d;
  {
    MutexLock lk(mu_);
    auto it = pending_.find(f.hdr.xid);
    if (it != pending_.end()) {
      c = std::move(it->second);
      pending_.erase(it);
      c->on_wire = false;
    }
    if (!c || c->resolved.exchange(true)) {
      late_replies_.fetch_add(1);
      return;  // timed out or cancelled already; the credit returns as `credit` goes
    }
    take_reply(*c, from, f);
    next = finish_slot_locked(*c);
    if (c->sent) d = complete_locked(*c);
  }
  credit.release();
  if (next.c) send_call(next);
  if (d) complete(c, *d);
  if (dones_due_.load(std::memory_order_relaxed)) send_dones();
}

void RpcClient::take_reply(Call& c, const Nid& from, InFrame& f) {
  RpcReply& r = c.reply;
  // The message as the caller sees it: a data checksum (net/net.h) is not counted.
  r.bytes_received = kHeaderSize + f.payload.size() + f.hdr.bulk_len;
  if (f.hdr.status != 0) {
    Code code = f.hdr.status <= static_cast<uint16_t>(Code::kOutcomeUnknown)
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
  if (f.hdr.ext.has_queue_time)
    r.queue_time =
        Duration(static_cast<int64_t>(std::min<uint64_t>(f.hdr.ext.queue_ns, INT64_MAX)));
  r.times.reply_first_byte = f.times.first_byte;
  r.times.reply_complete = f.times.complete;
  c.reply_in = true;
  c.reply_verbs = from.is_verbs();
}

void RpcClient::on_connection_closed(uint64_t conn_id, const Nid& peer_nid, const Status& why) {
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

size_t RpcClient::fail_calls_to(const std::vector<Nid>& nids, const Status& s, bool spare_recover) {
  std::vector<CallPtr> dead;
  auto hit = [&](const Call& c) {
    return !(spare_recover && c.recover) &&
           std::find(nids.begin(), nids.end(), c.dst) != nids.end();
  };
  {
    MutexLock lk(mu_);
    for (auto& [xid, c] : pending_)
      if (hit(*c)) dead.push_back(c);
    for (auto& [k, t] : targets_)
      for (const CallPtr& c : t->queue)
        if (hit(*c)) dead.push_back(c);
  }
  for (const CallPtr& c : dead) resolve_error(c, s);
  return dead.size();
}

size_t RpcClient::expire(TimePoint now) {
  std::vector<std::pair<CallPtr, bool>> dead;  // (call, still queued for a slot)
  struct Remote {
    CallPtr c;
    TxTimes path;
    int attempt;
  };
  std::vector<Remote> remote;  // written, no reply by the attempt deadline
  std::vector<Armed> resends;  // parked (CallOptions::recover), due now
  {
    MutexLock lk(mu_);
    for (auto& [xid, c] : pending_)
      if (c->resend_at && *c->resend_at <= now && now < c->deadline) {
        c->resend_at.reset();
        ++c->attempts;
        resends.push_back(arm_locked(c, now));
      } else if (c->sent && c->attempt_deadline <= now)
        remote.push_back({c, c->tx_times, c->attempts});
      else if (c->deadline <= now)
        dead.emplace_back(c, false);
    for (auto& [k, t] : targets_) {
      for (const CallPtr& c : t->queue)
        if (c->deadline <= now) dead.emplace_back(c, true);
      if (t->done_due && !t->done_out) dones_due_.store(true, std::memory_order_relaxed);
    }
  }
  if (dones_due_.load(std::memory_order_relaxed)) send_dones();
  for (Armed& a : resends) send_call(a);
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

}  // namespace pfsnet
