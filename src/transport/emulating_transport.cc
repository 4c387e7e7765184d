#include "transport/emulating_transport.h"

#include <algorithm>
#include <deque>
#include <thread>

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
  Conn(const EmulatingTransport& owner, ConnectionPtr inner, std::shared_ptr<LinkPipe> pipe,
       std::shared_ptr<LinkPipe> in_pipe)
      : hold_(owner.hold_),
        clock_(owner.clock_),
        timers_(owner.timers_),
        events_(owner.events_),
        inner_(std::move(inner)),
        pipe_(std::move(pipe)),
        in_pipe_(std::move(in_pipe)) {
    local_ = inner_->local_nid();
    peer_nids_ = inner_->peer_nids();
    outgoing_ = inner_->outgoing();
    bulk_ = inner_->bulk();
    id_ = inner_->id();
    wire_ = inner_->wire();
  }

  void send(std::unique_ptr<OutFrame> f) override {
    TimePoint t = hold_ ? hold_(*this, *f) : TimePoint{};
    if (pipe_) {
      TimePoint now = clock_.now();
      TimePoint arrival = pipe_->schedule(kHeaderSize + f->payload_len() + f->bulk_size(), now);
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
  std::optional<TcpKernelInfo> kernel_tcp_info(bool with_buffers) const override {
    return inner_->kernel_tcp_info(with_buffers);
  }
  // Frames received pass straight up (receive()) unless a shared link's inbound pipe
  // paces them: then they are the pipe's to deliver, and the caller waits as usual.
  Here receive_here(const std::atomic<bool>& done, Duration max_wait, int wake_fd) override {
    if (in_pipe_) return Here::kNo;
    return inner_->receive_here(done, max_wait, wake_fd);
  }

  // A caller's memory for a reply's bulk (TransportEvents::bulk_sink): only where frames
  // pass straight up -- one the inbound pipe holds would outlive its connection's close.
  std::optional<Buffer> bulk_sink(const FrameHeader& h) {
    if (in_pipe_) return std::nullopt;
    return events_.bulk_sink(*this, h);
  }

  // A frame received: up at once, or through the NI's inbound pipe (a shared link), in
  // arrival order.
  void receive(InFrame&& f) {
    if (!in_pipe_) return events_.on_frame(*this, std::move(f));
    TimePoint t = in_pipe_->schedule(kHeaderSize + f.payload.size() + f.bulk.size(), clock_.now());
    {
      MutexLock lk(mu_);
      if (closed_) return;
      inbound_.emplace_back(t, std::move(f));
    }
    deliver();
  }

  // Passes up the received frames whose time has come, one thread at a time, in order;
  // sets a timer for the next one.
  void deliver() {
    for (;;) {
      InFrame f;
      TimePoint next{};
      {
        MutexLock lk(mu_);
        if (delivering_ || closed_ || inbound_.empty()) return;
        if (inbound_.front().first > clock_.now()) {
          next = inbound_.front().first;
          if (timer_at_ != TimePoint{} && timer_at_ <= next) return;  // one is set
          timer_at_ = next;
        } else {
          f = std::move(inbound_.front().second);
          inbound_.pop_front();
          delivering_ = true;
          // It arrives now, when its last byte has come through the link: the server's
          // execution time starts here, not in the queue for the link.
          f.times.complete = std::max(f.times.complete, clock_.now());
        }
      }
      if (next != TimePoint{}) {
        std::weak_ptr<Conn> weak = shared_from_this();
        timers_.run_at(next, [weak] {
          if (auto self = weak.lock()) {
            {
              MutexLock lk(self->mu_);
              self->timer_at_ = TimePoint{};
            }
            self->deliver();
          }
        });
        return;
      }
      events_.on_frame(*this, std::move(f));
      MutexLock lk(mu_);
      delivering_ = false;
    }
  }

  // Hands down the held frames whose time has come, in time order (on the timer's thread;
  // closing waits for it to finish: the inner transport may be destroyed right after).
  void release() {
    std::vector<std::unique_ptr<OutFrame>> due;
    {
      MutexLock lk(mu_);
      if (closed_) return;
      TimePoint now = clock_.now();
      while (!held_.empty() && held_.begin()->first <= now) {
        due.push_back(std::move(held_.begin()->second));
        held_.erase(held_.begin());
      }
      if (due.empty()) return;
      ++sending_;
      sending_thread_ = std::this_thread::get_id();
    }
    for (auto& f : due) inner_->send(std::move(f));
    MutexLock lk(mu_);
    --sending_;
    sent_cv_.notify_all();
  }

  // The connection closed (or the transport stopped): held frames fail, later ones too.
  void fail_held(const Status& why) {
    std::multimap<TimePoint, std::unique_ptr<OutFrame>> held;
    {
      MutexLock lk(mu_);
      closed_ = true;
      held.swap(held_);
      inbound_.clear();
      // A release handing frames down on another thread finishes first (bounded: a send
      // on a closed connection fails at once).
      if (sending_ > 0 && sending_thread_ != std::this_thread::get_id())
        sent_cv_.wait_for(lk, std::chrono::seconds(2),
                          [&]() REQUIRES(mu_) { return sending_ == 0; });
    }
    Status s(Code::kClosed, "connection " + describe() + " closed: " + why.message(),
             why.health_kind());
    for (auto& [t, f] : held) fail_frame(*f, s);
  }

 private:
  HoldFn hold_;
  Clock& clock_;
  TimerQueue& timers_;       // REQUIRES: outlives every connection (as the clock does)
  TransportEvents& events_;  // used only while open: the transport's stop closes us first
  ConnectionPtr inner_;
  std::shared_ptr<LinkPipe> pipe_, in_pipe_;
  Mutex mu_;
  std::multimap<TimePoint, std::unique_ptr<OutFrame>> held_ GUARDED_BY(mu_);
  std::deque<std::pair<TimePoint, InFrame>> inbound_ GUARDED_BY(mu_);  // arrival order
  bool delivering_ GUARDED_BY(mu_) = false;
  TimePoint timer_at_ GUARDED_BY(mu_){};  // the delivery timer set, if any
  bool closed_ GUARDED_BY(mu_) = false;
  int sending_ GUARDED_BY(mu_) = 0;  // releases handing frames to the inner connection now
  std::thread::id sending_thread_ GUARDED_BY(mu_);
  CondVar sent_cv_;
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

ConnectCallback EmulatingTransport::outer_callback(ConnectCallback cb) {
  return [cb = std::move(cb)](Result<ConnectionPtr> r) {
    if (!r.ok()) return cb(r.status());
    // The inner transport reported on_connected first: the outer connection exists.
    if (Conn* o = outer_of(**r)) return cb(ConnectionPtr(o->shared_from_this()));
    cb(Status(Code::kClosed, "connection closed as it opened"));
  };
}

void EmulatingTransport::connect(const Nid& local, const Nid& remote, uint16_t port,
                                 ConnectCallback cb) {
  inner_->connect(local, remote, port, outer_callback(std::move(cb)));
}

void EmulatingTransport::connect_bulk(const Nid& local, const Nid& remote, uint16_t port,
                                      ConnectCallback cb) {
  inner_->connect_bulk(local, remote, port, outer_callback(std::move(cb)));
}

bool EmulatingTransport::has_bulk_connections(const Nid& local) const {
  return inner_->has_bulk_connections(local);
}

void EmulatingTransport::post(std::function<void()> fn) { inner_->post(std::move(fn)); }
bool EmulatingTransport::progress() { return inner_->progress(); }
void EmulatingTransport::set_socket_buffers(int tx_bytes, int rx_bytes) {
  inner_->set_socket_buffers(tx_bytes, rx_bytes);
}

void EmulatingTransport::stop() {
  inner_->stop();
  std::unordered_map<const Connection*, std::shared_ptr<Conn>> conns;
  {
    MutexLock lk(conns_mu_);
    conns.swap(conns_);
  }
  for (auto& [inner, c] : conns) c->fail_held(Status(Code::kCancelled, "transport stopped"));
}

EmulatingTransport::Conn* EmulatingTransport::outer_of(const Connection& inner) {
  return static_cast<Conn*>(inner.upper().get());
}

void EmulatingTransport::on_connected(const ConnectionPtr& c) {
  std::shared_ptr<LinkPipe> pipe, in_pipe;
  for (const EmulationRule& r : rules_)
    if (r.matches(c->local_nid(), c->peer_nid())) {
      MutexLock lk(mu_);
      // A shared link has one pipe each way for the NI; otherwise one per pair.
      Nid peer_key = r.shared ? shared_key(1) : c->peer_nid();
      auto& p = pipes_[{c->local_nid(), peer_key}];
      if (!p) p = std::make_shared<LinkPipe>(r);
      pipe = p;
      if (r.shared) {
        auto& in = pipes_[{c->local_nid(), shared_key(2)}];
        if (!in) {
          EmulationRule rate_only = r;
          rate_only.delay = Duration(0);
          in = std::make_shared<LinkPipe>(rate_only);
        }
        in_pipe = in;
      }
      break;
    }
  auto outer = std::make_shared<Conn>(*this, c, std::move(pipe), std::move(in_pipe));
  {
    MutexLock lk(conns_mu_);
    conns_[c.get()] = outer;
  }
  // The inner connection points at its outer one for its frames (not owning it: conns_
  // does, until the inner one closes -- after its last frame -- or the transport stops,
  // after its I/O threads).
  c->set_upper(std::shared_ptr<void>(outer.get(), [](void*) {}));
  events_.on_connected(outer);
}

void EmulatingTransport::on_frame(Connection& c, InFrame&& f) {
  if (Conn* o = outer_of(c)) o->receive(std::move(f));
}

std::optional<Buffer> EmulatingTransport::bulk_sink(Connection& c, const FrameHeader& h) {
  Conn* o = outer_of(c);
  return o ? o->bulk_sink(h) : std::nullopt;
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
