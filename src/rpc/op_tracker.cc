#include "rpc/op_tracker.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace pfsnet {

const char* op_phase_name(OpPhase p) {
  switch (p) {
    case OpPhase::kSlot:
      return "slot";
    case OpPhase::kNetwork:
      return "network";
    case OpPhase::kReply:
      return "reply";
    case OpPhase::kResend:
      return "resend";
    case OpPhase::kQueued:
      return "queued";
    case OpPhase::kExecuting:
      return "executing";
    case OpPhase::kDone:
      return "done";
    case OpPhase::kWaiting:
      return "waiting";
  }
  return "?";
}

std::string op_duration_text(Duration d) {
  const double ns = static_cast<double>(std::max<int64_t>(0, d.count()));
  char b[32];
  if (ns >= 1e9)
    std::snprintf(b, sizeof b, "%.3f s", ns / 1e9);
  else if (ns >= 1e6)
    std::snprintf(b, sizeof b, "%.1f ms", ns / 1e6);
  else
    std::snprintf(b, sizeof b, "%.0f us", ns / 1e3);
  return b;
}

std::string op_verdict_now(const Op& op, TimePoint now) {
  const std::string in = op_duration_text(now - op.phase_since);
  const std::string detail = op.detail.empty() ? "" : " (" + op.detail + ")";
  switch (op.phase) {
    case OpPhase::kSlot:
      return "client: waiting " + in + " for a max_rpcs_in_flight slot" + detail;
    case OpPhase::kNetwork:
      switch (op.net_wait) {
        case SendWait::Kind::kConnect:
          return "network: waiting " + in + " to connect to " + op.peer.to_string() + detail;
        case SendWait::Kind::kCredits:
          return "client: waiting " + in + " for credits" + detail;
        case SendWait::Kind::kWrite:
          return "client: waiting " + in + " for the write to " + op.peer.to_string() + detail;
        case SendWait::Kind::kNone:
          break;
      }
      return "client: waiting " + in + " for a connection, credits or the write to " +
             op.peer.to_string();
    case OpPhase::kReply: {
      const std::string wait =
          "waiting " + in + " for the reply from " + op.peer.to_string() +
          (op.attempts > 1 ? " (attempt " + std::to_string(op.attempts) + ")" : "");
      // TCP's word on what was written to it, where there is one (Net::reply_wait).
      const std::string said = op.reply_wait.text.empty() ? "" : " (" + op.reply_wait.text + ")";
      switch (op.reply_wait.kind) {
        case ReplyWait::Kind::kDelivered:
          // A reply of bulk may be on its way back already: the client cannot tell.
          if (op.reply_bulk == 0) return "server: " + wait + ", whose host has the request" + said;
          return "network or server: " + wait + ", whose host has the request; its reply (up " +
                 "to " + std::to_string(op.reply_bulk) + " B) may be on its way" + said;
        case ReplyWait::Kind::kStalled:
          return "server: " + wait + ", which does not read its connection" + said;
        case ReplyWait::Kind::kLosing:
        case ReplyWait::Kind::kQueue:
          return "network: " + wait + said;
        case ReplyWait::Kind::kUnacked:
        case ReplyWait::Kind::kNone:
          break;
      }
      return "network or server: " + wait + said;
    }
    case OpPhase::kResend:
      return "network: attempt " + std::to_string(op.attempts) + " failed, resending" + detail;
    case OpPhase::kQueued:
      return "server: queued " + in + " for a worker" + detail;
    case OpPhase::kExecuting:
      return "server: executing for " + in + detail;
    case OpPhase::kWaiting:
      return "server: waiting " + in + " for " + op.detail;
    case OpPhase::kDone:
      break;
  }
  return op.blame ? op.blame->verdict : "ended";
}

std::optional<SlowOpsRule::Limit> SlowOpsRule::limit(const Op& op) const {
  std::optional<Limit> l;
  if (threshold > Duration::zero()) l = Limit{threshold, std::nullopt};
  if (p99_factor > 0 && type_p99)
    if (std::optional<Duration> p99 = type_p99(op.client, op.type)) {
      const Duration rel = std::max(
          p99_min, std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::nano>(
                       double(p99->count()) * p99_factor)));
      if (!l || rel < l->after) l = Limit{rel, p99};
    }
  return l;
}

std::optional<SlowOps> find_slow_ops(const std::vector<Op>& ops, TimePoint now,
                                     const SlowOpsRule& rule,
                                     const std::function<std::string(uint32_t)>& type_name) {
  SlowOps s;
  const Op* oldest = nullptr;
  std::optional<Duration> oldest_p99;  // the oldest's type's p99, when that made it slow
  bool relative = false;               // one of them is slow for its type's p99
  for (const Op& op : ops) {
    if (op.phase == OpPhase::kDone) continue;
    const std::optional<SlowOpsRule::Limit> limit = rule.limit(op);
    if (!limit || now - op.started < limit->after) continue;
    ++s.count;
    const TimePoint crossed = op.started + limit->after;
    if (s.count == 1 || crossed < s.since) s.since = crossed;
    relative = relative || limit->p99.has_value();
    if (!oldest || op.started < oldest->started) {
      oldest = &op;
      oldest_p99 = limit->p99;
    }
  }
  if (!oldest) return std::nullopt;
  s.oldest = *oldest;
  std::string over;
  if (rule.threshold > Duration::zero()) over = "for over " + op_duration_text(rule.threshold);
  if (relative)
    over +=
        (over.empty() ? "" : " or ") + fmt::format("over {:g} x their type's p99 (and {})",
                                                   rule.p99_factor, op_duration_text(rule.p99_min));
  const std::string whose =
      oldest_p99 ? " (its type's p99 " + op_duration_text(*oldest_p99) + ")" : std::string();
  s.evidence = std::to_string(s.count) + " RPC(s) in flight " + over + "; the oldest, " +
               type_name(oldest->type) + whose + " xid " + std::to_string(oldest->xid) +
               (oldest->client ? " to " : " from ") + oldest->peer.to_string() +
               (oldest->job.empty() ? "" : " job " + oldest->job) + ", for " +
               op_duration_text(now - oldest->started) + ": " + op_verdict_now(*oldest, now);
  return s;
}

Op::Blame op_blame(TimePoint submit, TimePoint granted, TimePoint write_start, TimePoint end,
                   Duration exec, std::optional<Duration> queue, int attempts, int64_t slot_limit) {
  auto nonneg = [](Duration d) { return std::max(Duration(0), d); };
  if (granted == TimePoint{}) granted = submit;
  if (write_start == TimePoint{}) write_start = granted;
  Op::Blame b;
  b.slot = nonneg(granted - submit);
  b.net_wait = nonneg(write_start - granted);
  b.server_queue = nonneg(std::min(exec, queue.value_or(Duration(0))));
  b.server_exec = nonneg(exec - b.server_queue);
  b.wire = nonneg(end - write_start - exec);
  const Duration total = nonneg(end - submit);
  const std::string of = " of " + op_duration_text(total);
  struct Part {
    Duration d;
    std::string text;
  };
  const Part parts[] = {
      {b.server_queue, "server: " + op_duration_text(b.server_queue) + of + " queued for a worker"},
      {b.server_exec, "server: " + op_duration_text(b.server_exec) + of + " executing"},
      {b.wire, "network: " + op_duration_text(b.wire) + of +
                   " on the wire (the round trip less the server's time" +
                   (attempts > 1 ? "; " + std::to_string(attempts) + " attempts" : "") + ")"},
      {b.slot, "client: waited " + op_duration_text(b.slot) + of +
                   " for a max_rpcs_in_flight slot (" + std::to_string(slot_limit) + ")"},
      {b.net_wait,
       "client: waited " + op_duration_text(b.net_wait) + of + " for a connection or credits"},
  };
  const Part* top = &parts[0];
  for (const Part& p : parts)
    if (p.d > top->d) top = &p;
  b.verdict = top->text;
  return b;
}

void OpHistory::trim_locked(TimePoint now) {
  std::erase_if(ops_, [&](const Op& op) { return now - op.ended > o_.window; });
  std::sort(ops_.begin(), ops_.end(),
            [](const Op& a, const Op& b) { return length(a) > length(b); });
  const size_t capacity = capacity_.load(std::memory_order_relaxed);
  if (ops_.size() > capacity) ops_.resize(capacity);
  int64_t floor = 0;
  if (ops_.size() == capacity && !ops_.empty()) floor = length(ops_.back()).count();
  int64_t refresh = INT64_MAX;
  for (const Op& op : ops_)
    refresh = std::min<int64_t>(refresh, (op.ended + o_.window).time_since_epoch().count());
  floor_ns_.store(floor, std::memory_order_relaxed);
  refresh_ns_.store(refresh, std::memory_order_relaxed);
}

void OpHistory::add(Op op) {
  if (capacity_.load(std::memory_order_relaxed) == 0 || length(op) < o_.min_duration) return;
  MutexLock lk(mu_);
  const TimePoint now = op.ended;
  ops_.push_back(std::move(op));
  trim_locked(now);
}

void OpHistory::set_capacity(size_t capacity) {
  MutexLock lk(mu_);
  capacity_.store(capacity, std::memory_order_relaxed);
  // Nothing leaves the window here: trimmed as of the newest op's end.
  TimePoint newest{};
  for (const Op& op : ops_) newest = std::max(newest, op.ended);
  trim_locked(newest);
}

std::vector<Op> OpHistory::slowest(TimePoint now) {
  MutexLock lk(mu_);
  trim_locked(now);
  return ops_;
}

OpBoard::Ticket OpBoard::enter(Op op, OpPhase phase) {
  op.client = false;
  op.phase = phase;
  op.phase_since = clock_.now();
  MutexLock lk(mu_);
  ops_.push_front(std::move(op));
  return Ticket(this, ops_.begin());
}

void OpBoard::Ticket::executing() {
  if (!board_) return;
  TimePoint now = board_->clock_.now();
  MutexLock lk(board_->mu_);
  it_->phase = OpPhase::kExecuting;
  it_->phase_since = now;
  it_->handler_at = now;
}

void OpBoard::Ticket::queued(std::string why) {
  if (!board_) return;
  TimePoint now = board_->clock_.now();
  MutexLock lk(board_->mu_);
  it_->phase = OpPhase::kQueued;
  it_->phase_since = now;
  it_->detail = std::move(why);
}

void OpBoard::Ticket::waiting(std::string what) {
  if (!board_) return;
  TimePoint now = board_->clock_.now();
  MutexLock lk(board_->mu_);
  it_->phase = OpPhase::kWaiting;
  it_->phase_since = now;
  it_->events.push_back({now, "waiting for " + what});
  it_->detail = std::move(what);
}

void OpBoard::Ticket::resumed() {
  if (!board_) return;
  TimePoint now = board_->clock_.now();
  MutexLock lk(board_->mu_);
  if (it_->phase != OpPhase::kWaiting) return;
  it_->events.push_back({now, "resumed after " + op_duration_text(now - it_->phase_since)});
  it_->phase = OpPhase::kExecuting;
  it_->phase_since = now;
  it_->detail.clear();
}

void OpBoard::Ticket::ended(const Status& s) {
  if (!board_) return;
  MutexLock lk(board_->mu_);
  it_->status = s;
}

OpBoard::Ticket::~Ticket() {
  if (!board_) return;
  const TimePoint now = board_->clock_.now();
  std::optional<Op> done;
  {
    MutexLock lk(board_->mu_);
    if (board_->history_.wants(now - it_->started, now)) {
      done = std::move(*it_);
      done->ended = now;
      done->phase = OpPhase::kDone;
      done->phase_since = now;
      std::vector<OpEvent> waits = std::move(done->events);  // its handler's waits
      done->events = {{done->started, "arrived"}};
      if (done->handler_at != TimePoint{})
        done->events.push_back({done->handler_at, "handler started"});
      for (OpEvent& e : waits) done->events.push_back(std::move(e));
      done->events.push_back({now, "replied"});
    }
    board_->ops_.erase(it_);
  }
  if (done) board_->history_.add(std::move(*done));
}

std::vector<Op> OpBoard::in_flight() const {
  MutexLock lk(mu_);
  return std::vector<Op>(ops_.begin(), ops_.end());
}

}  // namespace pfsnet
