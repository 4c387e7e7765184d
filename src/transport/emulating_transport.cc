#include "transport/emulating_transport.h"

#include "base/mutex.h"

namespace pfsnet {

namespace {

// Reports an emulated frame's write times: entering the pipe and its last byte leaving.
class LinkCompletion final : public TxCompletion {
 public:
  LinkCompletion(TxCompletion* user, TimePoint entered, TimePoint left)
      : user_(user), entered_(entered), left_(left) {}
  void on_tx_done(const Status& s, const TxTimes& t) override {
    user_->on_tx_done(s, s.ok() ? TxTimes{entered_, left_} : t);
    delete this;  // exactly one completion per frame
  }

 private:
  TxCompletion* user_;
  TimePoint entered_, left_;
};

void fail_frame(OutFrame& f, const Status& s) {
  if (f.done) f.done->on_tx_done(s, TxTimes{});
}

}  // namespace

class EmulatingTransport::Conn final : public Connection,
                                       public std::enable_shared_from_this<Conn> {
 public:
  // Keeps what it needs of the transport by value: a Conn may outlive it (its holder
  // keeps it; a timer may fire after the transport is gone).
  Conn(const EmulatingTransport& owner, ConnectionPtr inner, std::shared_ptr<LinkPipe> pipe)
      : hold_(owner.hold_),
        clock_(owner.clock_),
        timers_(owner.timers_),
        inner_(std::move(inner)),
        pipe_(std::move(pipe)) {
    local_ = inner_->local_nid();
    peer_nids_ = inner_->peer_nids();
    outgoing_ = inner_->outgoing();
    id_ = inner_->id();
  }

  void send(std::unique_ptr<OutFrame> f) override {
    TimePoint t = hold_ ? hold_(*this, *f) : TimePoint{};
    if (pipe_) {
      TimePoint now = clock_.now();
      TimePoint arrival = pipe_->schedule(kHeaderSize + f->payload.size() + f->bulk_size(), now);
      if (f->done) f->done = new LinkCompletion(f->done, now, arrival - pipe_->delay());
      t = std::max(t, arrival);
    }
    // The credits owed now ride on this frame, however long it is held.
    f->hdr.credits = take_credits_to_return();
    f->credits_set = true;
    if (t == TimePoint{}) {
      inner_->send(std::move(f));
      return;
    }
    {
      MutexLock lk(mu_);
      if (closed_) {
        lk.unlock();
        fail_frame(*f, Status(Code::kClosed, "connection " + describe() + " closed"));
        return;
      }
      held_.emplace(t, std::move(f));
    }
    std::weak_ptr<Conn> weak = shared_from_this();
    timers_.run_at(t, [weak] {
      if (auto self = weak.lock()) self->release();
    });
  }

  void close(const Status& why) override { inner_->close(why); }
  void post(std::function<void()> fn) override { inner_->post(std::move(fn)); }
  bool is_open() const override { return inner_->is_open(); }
  std::optional<TcpKernelInfo> kernel_tcp_info() const override {
    return inner_->kernel_tcp_info();
  }

  // Hands down the held frames whose time has come, in time order.
  void release() {
    std::vector<std::unique_ptr<OutFrame>> due;
    {
      MutexLock lk(mu_);
      TimePoint now = clock_.now();
      while (!held_.empty() && held_.begin()->first <= now) {
        due.push_back(std::move(held_.begin()->second));
        held_.erase(held_.begin());
      }
    }
    for (auto& f : due) inner_->send(std::move(f));
  }

  // The connection closed (or the transport stopped): held frames fail, later ones too.
  void fail_held(const Status& why) {
    std::multimap<TimePoint, std::unique_ptr<OutFrame>> held;
    {
      MutexLock lk(mu_);
      closed_ = true;
      held.swap(held_);
    }
    Status s(Code::kClosed, "connection " + describe() + " closed: " + why.message(),
             why.health_kind());
    for (auto& [t, f] : held) fail_frame(*f, s);
  }

 private:
  HoldFn hold_;
  Clock& clock_;
  TimerQueue& timers_;  // REQUIRES: outlives every connection (as the clock does)
  ConnectionPtr inner_;
  std::shared_ptr<LinkPipe> pipe_;
  Mutex mu_;
  std::multimap<TimePoint, std::unique_ptr<OutFrame>> held_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
};

EmulatingTransport::EmulatingTransport(std::vector<EmulationRule> rules, HoldFn hold, Clock& clock,
                                       TimerQueue& timers, TransportEvents& events,
                                       const InnerFactory& make_inner)
    : rules_(std::move(rules)),
      hold_(std::move(hold)),
      clock_(clock),
      timers_(timers),
      events_(events),
      inner_(make_inner(*this)) {}

EmulatingTransport::~EmulatingTransport() { stop(); }

Status EmulatingTransport::listen(const Nid& local, uint16_t port) {
  return inner_->listen(local, port);
}

void EmulatingTransport::connect(const Nid& local, const Nid& remote, uint16_t port,
                                 ConnectCallback cb) {
  inner_->connect(local, remote, port, [this, cb](Result<ConnectionPtr> r) {
    if (!r.ok()) return cb(r.status());
    // The inner transport reported on_connected first: the outer connection exists.
    if (std::shared_ptr<Conn> o = outer_of(**r)) return cb(ConnectionPtr(o));
    cb(Status(Code::kClosed, "connection closed as it opened"));
  });
}

void EmulatingTransport::post(std::function<void()> fn) { inner_->post(std::move(fn)); }
bool EmulatingTransport::progress() { return inner_->progress(); }

void EmulatingTransport::stop() {
  inner_->stop();
  std::unordered_map<const Connection*, std::shared_ptr<Conn>> conns;
  {
    MutexLock lk(conns_mu_);
    conns.swap(conns_);
  }
  for (auto& [inner, c] : conns) c->fail_held(Status(Code::kCancelled, "transport stopped"));
}

std::shared_ptr<EmulatingTransport::Conn> EmulatingTransport::outer_of(
    const Connection& inner) const {
  MutexLock lk(conns_mu_);
  auto it = conns_.find(&inner);
  return it == conns_.end() ? nullptr : it->second;
}

void EmulatingTransport::on_connected(const ConnectionPtr& c) {
  std::shared_ptr<LinkPipe> pipe;
  for (const EmulationRule& r : rules_)
    if (r.matches(c->local_nid(), c->peer_nid())) {
      MutexLock lk(mu_);
      auto& p = pipes_[{c->local_nid().pack(), c->peer_nid().pack()}];
      if (!p) p = std::make_shared<LinkPipe>(r);
      pipe = p;
      break;
    }
  auto outer = std::make_shared<Conn>(*this, c, std::move(pipe));
  {
    MutexLock lk(conns_mu_);
    conns_[c.get()] = outer;
  }
  events_.on_connected(outer);
}

void EmulatingTransport::on_frame(Connection& c, InFrame&& f) {
  if (std::shared_ptr<Conn> o = outer_of(c)) events_.on_frame(*o, std::move(f));
}

void EmulatingTransport::on_closed(Connection& c, const Status& why) {
  std::shared_ptr<Conn> o;
  {
    MutexLock lk(conns_mu_);
    auto it = conns_.find(&c);
    if (it == conns_.end()) return;
    o = std::move(it->second);
    conns_.erase(it);
  }
  o->fail_held(why);
  events_.on_closed(*o, why);
}

}  // namespace pfsnet
