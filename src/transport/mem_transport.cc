#include "transport/mem_transport.h"

#include "base/log.h"
#include "base/mutex.h"
#include "wire/handshake.h"

namespace pfsnet {

void MemHub::enqueue(std::function<void()> fn) {
  MutexLock lk(mu_);
  events_.push_back(std::move(fn));
}

void MemHub::set_stalled(bool stalled) {
  MutexLock lk(mu_);
  stalled_ = stalled;
  if (stalled) return;
  for (auto& fn : held_) events_.push_back(std::move(fn));
  held_.clear();
}

std::pair<Nid, Nid> MemHub::link_of(const Nid& a, const Nid& b) {
  auto [lo, hi] = std::minmax(a, b);
  return {lo, hi};
}

bool MemHub::is_cut(const Nid& a, const Nid& b) const {
  return !cut_.empty() && cut_.count(link_of(a, b)) > 0;
}

void MemHub::set_no_host(const Nid& nid, bool no_host) {
  MutexLock lk(mu_);
  if (no_host)
    no_host_.insert(nid);
  else
    no_host_.erase(nid);
}

void MemHub::set_cut(const Nid& a, const Nid& b, bool cut) {
  MutexLock lk(mu_);
  auto link = link_of(a, b);
  if (cut) {
    cut_.insert(link);
    return;
  }
  cut_.erase(link);
  std::deque<CutHeld> still;
  for (CutHeld& h : cut_held_) {
    if (h.link == link)
      (stalled_ ? held_ : events_).push_back(std::move(h.fn));
    else
      still.push_back(std::move(h));
  }
  cut_held_ = std::move(still);
}

void MemHub::drop_held_from(const Nid& from) {
  std::deque<CutHeld> dropped;  // destroyed outside the lock
  MutexLock lk(mu_);
  std::deque<CutHeld> still;
  for (CutHeld& h : cut_held_) (h.from == from ? dropped : still).push_back(std::move(h));
  cut_held_ = std::move(still);
}

void MemHub::enqueue_connect(const Nid& from, const Nid& to, std::function<void()> fn) {
  MutexLock lk(mu_);
  if (is_cut(from, to))
    cut_held_.push_back({link_of(from, to), from, std::move(fn)});
  else
    events_.push_back(std::move(fn));
}

void MemHub::set_delay(const Nid& from, const Nid& to, Duration one_way) {
  MutexLock lk(mu_);
  if (one_way > Duration::zero())
    delay_[{from, to}] = one_way;
  else
    delay_.erase({from, to});
}

bool MemHub::delayed(const Nid& from, const Nid& to) const {
  MutexLock lk(mu_);
  return delay_.count({from, to}) > 0;
}

void MemHub::release_held_of(const void* owner) {
  MutexLock lk(mu_);
  std::deque<CutHeld> still;
  for (CutHeld& h : cut_held_) {
    if (h.owner == owner)
      events_.push_back(std::move(h.fn));
    else
      still.push_back(std::move(h));
  }
  cut_held_ = std::move(still);
}

void MemHub::enqueue_frame(const Nid& from, const Nid& to, std::function<void()> fn,
                           const void* owner) {
  MutexLock lk(mu_);
  if (is_cut(from, to)) {
    cut_held_.push_back({link_of(from, to), from, std::move(fn), owner});
    return;
  }
  std::pair<Nid, Nid> dir{from, to};
  auto d = delay_.find(dir);
  if (d != delay_.end() && clock_) {
    TimePoint& last = last_arrival_[dir];
    last = std::max(last, clock_->now() + d->second);
    timed_.emplace(last, std::move(fn));
    return;
  }
  (stalled_ ? held_ : events_).push_back(std::move(fn));
}

void MemHub::run_at(TimePoint t, std::function<void()> fn) {
  MutexLock lk(mu_);
  if (clock_ && t > clock_->now())
    timed_.emplace(t, std::move(fn));
  else
    events_.push_back(std::move(fn));
}

size_t MemHub::pending() const {
  MutexLock lk(mu_);
  return events_.size();
}

size_t MemHub::pump(size_t max_events) {
  {
    MutexLock lk(mu_);
    TimePoint now = clock_ ? clock_->now() : TimePoint{};
    while (!timed_.empty() && timed_.begin()->first <= now) {
      events_.push_back(std::move(timed_.begin()->second));
      timed_.erase(timed_.begin());
    }
  }
  size_t ran = 0;
  while (ran < max_events) {
    std::function<void()> fn;
    {
      MutexLock lk(mu_);
      if (events_.empty()) break;
      fn = std::move(events_.front());
      events_.pop_front();
    }
    fn();
    ++ran;
  }
  return ran;
}

class MemTransport::Conn final : public Connection, public std::enable_shared_from_this<Conn> {
 public:
  Conn(MemTransport& owner, Nid local, std::vector<Nid> peer_nids, bool outgoing, uint64_t id,
       bool bulk, WireSession wire)
      : owner_(owner) {
    local_ = local;
    peer_nids_ = std::move(peer_nids);
    outgoing_ = outgoing;
    bulk_ = bulk;
    id_ = id;
    wire_ = std::move(wire);
  }

  void send(std::unique_ptr<OutFrame> f) override {
    auto self = shared_from_this();
    std::shared_ptr<OutFrame> frame(std::move(f));
    // On a delayed link the frame was written when sent, and its delay is the link's;
    // else it is written when the hub delivers it.
    std::optional<TimePoint> sent;
    if (owner_.hub_.delayed(local_, peer_nids_.at(0))) sent = owner_.clock_.now();
    owner_.hub_.enqueue_frame(
        local_, peer_nids_.at(0), [self, frame, sent] { self->deliver(*frame, sent); }, this);
  }

  void close(const Status& why) override {
    auto self = shared_from_this();
    owner_.hub_.enqueue([self, why] { self->do_close(why, true); });
  }

  void post(std::function<void()> fn) override { owner_.hub_.enqueue(std::move(fn)); }
  bool is_open() const override { return open_; }

  void do_close(const Status& why, bool tell_other) {
    if (!open_) return;
    open_ = false;
    close_kind_ = why.health_kind();
    owner_.hub_.release_held_of(this);
    owner_.events_.on_closed(*this, why);
    if (tell_other) {
      if (auto o = other_.lock()) o->do_close(Status(Code::kClosed, "closed by peer"), false);
    }
  }

  // `sent`: when it was handed to a delayed link (the delay lies between); none: now.
  void deliver(OutFrame& f, std::optional<TimePoint> sent) {
    auto other = other_.lock();
    if (!open_ || !other || !other->open_) {
      if (f.done)
        f.done->on_tx_done(
            Status(Code::kClosed, "connection " + describe() + " closed", close_kind_), TxTimes{});
      return;
    }
    TimePoint start = sent.value_or(owner_.clock_.now());
    InFrame in;
    in.hdr = f.hdr;
    // What a TCP connection of this version would carry: extensions only on version 2, of
    // the features both ends announced.
    in.hdr.version = wire_.version;
    fit_extensions(wire_, &in.hdr.ext);
    if (wire_.version >= 2) {  // the NIDs are the connection's
      in.hdr.src_nid = local_;
      in.hdr.dst_nid = peer_nid();
    }
    in.hdr.credits = f.credits_set ? f.hdr.credits : take_credits_to_return();
    in.hdr.payload_len = static_cast<uint32_t>(f.payload_len());
    in.hdr.bulk_len = static_cast<uint32_t>(f.bulk_size());
    in.payload = f.wire_payload();
    if (f.bulk) in.bulk = Buffer::copy_of(f.bulk->span().first(f.bulk_size()));
    TimePoint now = owner_.clock_.now();
    in.times = RxTimes{sent ? now : start, now};
    if (f.done) f.done->on_tx_done(Status::Ok(), TxTimes{start, now});
    other->owner_.events_.on_frame(*other, std::move(in));
  }

  MemTransport& owner_;
  std::weak_ptr<Conn> other_;
  bool open_ = true;
  HealthKind close_kind_ = HealthKind::kNone;
};

MemTransport::MemTransport(MemHub& hub, TransportOptions opts, std::vector<Nid> node_nids,
                           Clock& clock, TransportEvents& events)
    : hub_(hub),
      opts_(std::move(opts)),
      node_nids_(std::move(node_nids)),
      clock_(clock),
      events_(events) {
  hub_.set_clock(&clock_);
}

MemTransport::~MemTransport() {
  MutexLock lk(hub_.mu_);
  for (const Nid& n : listening_) hub_.listeners_.erase(n);
}

Status MemTransport::listen(const Nid& local, uint16_t) {
  MutexLock lk(hub_.mu_);
  if (hub_.listeners_.count(local))
    return Status(Code::kInvalidArgument, local.to_string() + " is already listening",
                  HealthKind::kPeerNiAddrError);
  hub_.listeners_[local] = this;
  listening_.push_back(local);
  return Status::Ok();
}

void MemTransport::connect(const Nid& local, const Nid& remote, uint16_t, ConnectCallback cb) {
  open(local, remote, false, std::move(cb));
}

void MemTransport::connect_bulk(const Nid& local, const Nid& remote, uint16_t, ConnectCallback cb) {
  open(local, remote, true, std::move(cb));
}

void MemTransport::open(const Nid& local, const Nid& remote, bool bulk, ConnectCallback cb) {
  hub_.enqueue_connect(local, remote, [this, local, remote, bulk, cb = std::move(cb)] {
    MemTransport* server = nullptr;
    uint64_t id = 0;
    bool no_host = false;
    {
      MutexLock lk(hub_.mu_);
      auto it = hub_.listeners_.find(remote);
      if (it != hub_.listeners_.end()) server = it->second;
      no_host = hub_.no_host_.count(remote) > 0;
      id = hub_.next_id_;
      hub_.next_id_ += 2;
    }
    if (no_host) {
      cb(Status(Code::kUnreachable, "connect to " + remote.to_string() + ": no route to host",
                HealthKind::kPeerNiUnreachable));
      return;
    }
    if (!server) {
      cb(Status(Code::kUnreachable, "connect to " + remote.to_string() + ": connection refused",
                HealthKind::kPeerNiConnectError));
      return;
    }
    // The two ends' handshake machines (wire/handshake.h) against each other, the frames
    // handed across here: the exchange every transport runs, keys proven both ways.
    HandshakeMachine hc =
        HandshakeMachine::client(opts_.cluster_key.get(), announced_nids(local, node_nids_),
                                 bulk ? kHelloBulk : uint8_t{0}, speaks_now(opts_.wire, events_));
    HandshakeMachine hs = HandshakeMachine::server(server->opts_.cluster_key.get(),
                                                   announced_nids(remote, server->node_nids_),
                                                   speaks_now(server->opts_.wire, server->events_));
    run_handshake(hc, hs);
    using State = HandshakeMachine::State;
    if (hc.state() != State::kEstablished || hs.state() != State::kEstablished) {
      if (hc.state() == State::kRefused)
        PFS_LOG_ERROR("refusing connection to {}: {}", remote.to_string(),
                      hc.why() == kWrongClusterKey ? "it does not hold our cluster key" : hc.why());
      if (hs.state() == State::kRefused)
        PFS_LOG_ERROR("refusing connection from {}: {}", local.to_string(), hs.why());
      bool refused = hc.state() == State::kRefused || hc.state() == State::kRefusedByPeer;
      cb(refused ? Status(Code::kRejected,
                          hc.state() == State::kRefused
                              ? (hc.why() == kWrongClusterKey
                                     ? remote.to_string() +
                                           " does not hold the cluster key (wrong cluster key)"
                                     : "refusing " + remote.to_string() + ": " + hc.why())
                              : "refused by " + remote.to_string() + ": " + hc.why(),
                          HealthKind::kPeerNiConnectionRejected)
                 : Status(Code::kProtocol,
                          "handshake with " + remote.to_string() + ": " +
                              (hc.why().empty() ? hs.why() : hc.why()),
                          HealthKind::kPeerNiConnectError));
      return;
    }
    std::vector<Nid> mine = hs.peer_nids(), theirs = hc.peer_nids();
    auto a = std::make_shared<Conn>(*this, local, theirs, true, id, bulk, hc.session());
    auto b = std::make_shared<Conn>(*server, remote, mine, false, id + 1, bulk, hs.session());
    a->other_ = b;
    b->other_ = a;
    {
      MutexLock lk(mu_);
      conns_.push_back(a);
    }
    {
      MutexLock lk(server->mu_);
      server->conns_.push_back(b);
    }
    // The server hears of it in an event of its own, as over TCP where the two ends
    // finish the handshake apart (two ends connecting at once each see their own first),
    // but before any frame the connector sends.
    hub_.enqueue([server, b] { server->events_.on_connected(b); });
    events_.on_connected(a);
    cb(ConnectionPtr(a));
  });
}

void MemTransport::stop() {
  std::vector<std::shared_ptr<Conn>> live;
  {
    MutexLock lk(mu_);
    for (auto& w : conns_)
      if (auto c = w.lock()) live.push_back(c);
    conns_.clear();
  }
  for (auto& c : live) c->do_close(Status(Code::kCancelled, "transport stopped"), true);
}

}  // namespace pfsnet
