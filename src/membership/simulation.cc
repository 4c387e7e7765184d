#include "membership/simulation.h"

namespace pfsnet {

namespace {
// Wall time of a block of MGS work.
class CpuTimer {
 public:
  explicit CpuTimer(double* acc) : acc_(acc), t0_(std::chrono::steady_clock::now()) {}
  ~CpuTimer() {
    *acc_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  double* acc_;
  std::chrono::steady_clock::time_point t0_;
};
}  // namespace

Nid MembershipSim::nid_of(int i, bool server) {
  Nid n;
  n.set_ipv4((server ? (11u << 24) : (10u << 24)) + static_cast<uint32_t>(i) + 1);
  return n;
}

MembershipSim::MembershipSim(SimOptions o) : opts_(o), rng_(o.seed) {
  start_ = clock_.now();
  MgsOptions mo;
  mo.client_interval = o.client_interval;
  mo.server_interval = o.server_interval;
  mo.miss_limit = o.miss_limit;
  mo.heard_reports = o.heard_reports;
  mo.notify_rate = o.notify_rate;
  mo.notify_window = o.notify_window;
  mo.relay_fanout = o.relay_fanout;
  mgs_opts_ = mo;
  mgs_ = std::make_unique<MgsCore>(mo, mgs_instance_);
  Nid mgs_nid;
  mgs_nid.set_ipv4((12u << 24) + 1);
  int n = o.servers + o.clients;
  for (int i = 0; i < n; ++i) {
    bool server = i < o.servers;
    AgentOptions a;
    a.name = (server ? "oss" : "c") + std::to_string(server ? i : i - o.servers);
    a.roles = server ? kRoleServer : kRoleClient;
    a.nids = {nid_of(server ? i : i - o.servers, server)};
    a.mgs = {mgs_nid};
    a.client_interval = o.client_interval;
    a.server_interval = o.server_interval;
    a.heard_reports = o.heard_reports;
    a.max_skips = static_cast<int>(std::max<int64_t>(0, o.miss_limit - 1));
    a.instance = 1000 + static_cast<uint64_t>(i);
    agents_.push_back(std::make_unique<AgentCore>(a));
  }
  alive_.assign(n, true);
  wake_pending_.assign(n, false);
  heard_.resize(o.servers);
  contact_.assign(n, TimePoint{});
  // Nodes start at random moments within a client period, as a real cluster boots.
  std::uniform_int_distribution<int64_t> start(0, o.client_interval.count() - 1);
  for (int i = 0; i < n; ++i) {
    wake_pending_[i] = true;
    push(Duration(start(rng_)), Ev::kWake, i);
    if (i >= o.servers && o.activity.count() > 0) {
      std::uniform_int_distribution<int64_t> phase(0, o.activity.count() - 1);
      push(Duration(phase(rng_)), Ev::kActivity, i);
    }
  }
  push(std::chrono::milliseconds(100), Ev::kMgsTick, -1);
}

void MembershipSim::push(Duration after, Ev type, int node, std::shared_ptr<Buffer> payload,
                         uint64_t token, AgentCore::Kind kind) {
  q_.push(Event{clock_.now() + after, seq_++, type, node, token, kind, std::move(payload)});
}

void MembershipSim::push(Duration after, Event e) {
  e.t = clock_.now() + after;
  e.seq = seq_++;
  q_.push(std::move(e));
}

int MembershipSim::agent_of_nid(const Nid& n) const {
  uint32_t net = n.ipv4() >> 24, i = (n.ipv4() & 0xffffff) - 1;
  if (net == 11 && i < uint32_t(opts_.servers)) return int(i);
  if (net == 10 && i < uint32_t(opts_.clients)) return opts_.servers + int(i);
  return -1;
}

void MembershipSim::run_for(Duration d) {
  TimePoint end = clock_.now() + d;
  while (!q_.empty() && q_.top().t <= end) {
    Event e = q_.top();
    q_.pop();
    clock_.advance_to(e.t);
    handle(e);
  }
  clock_.advance_to(end);
}

void MembershipSim::send_notifications() {
  std::vector<Event> out;
  {
    CpuTimer t(&mgs_cpu_);
    // The sending MGS's instance in the token's top bits: an acknowledgement reaches only
    // the MGS that sent the notification (a new leader's tokens start again).
    for (MgsCore::Outgoing& o : mgs_->take_notifications(clock_.now())) {
      Event e{};
      e.node = agent_of_id_[o.to];
      e.token = o.token | (mgs_instance_ << 48);
      e.type = o.targets.empty() ? Ev::kNotify : Ev::kRelay;
      e.payload = std::make_shared<Buffer>(
          o.targets.empty() ? encode(o.req) : encode(RelayReq{o.req, std::move(o.targets)}));
      out.push_back(std::move(e));
    }
  }
  for (Event& e : out) push(opts_.latency, std::move(e));
}

MembershipSim::Failover MembershipSim::fail_over() {
  Failover f;
  std::vector<std::string> chunks;
  for (const auto& [c, b] : table_) {
    chunks.push_back(b);
    f.bytes += b.size();
  }
  f.chunks = chunks.size();
  auto next = std::make_unique<MgsCore>(mgs_opts_, ++mgs_instance_);
  auto t0 = std::chrono::steady_clock::now();
  Status st = next->restore(chunks, clock_.now());
  f.restore_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  mgs_cpu_ += f.restore_s;
  if (st.ok()) f.nodes = next->nodes().size();
  mgs_ = std::move(next);
  return f;
}

size_t MembershipSim::table_errors() const {
  size_t bad = 0;
  for (size_t i = 0; i < agents_.size(); ++i) {
    if (!alive_[i]) continue;
    const NodeRecord* n = mgs_->find(agents_[i]->id());
    bad += !n || n->name != agents_[i]->options().name || n->state != NodeState::kUp;
  }
  return bad;
}

void MembershipSim::kill_server(int i) {
  killed_ = i;
  alive_[i] = false;
}

uint64_t MembershipSim::client_pings_skipped() const {
  uint64_t n = 0;
  for (const auto& a : agents_) n += a->counters().skipped;
  return n;
}

void MembershipSim::wake(int i) {
  AgentCore& a = *agents_[i];
  if (!alive_[i] || a.in_flight() || wake_pending_[i]) return;
  wake_pending_[i] = true;
  push(std::max<Duration>(Duration(0), a.next_due() - clock_.now()), Ev::kWake, i);
}

void MembershipSim::handle(Event& e) {
  TimePoint now = clock_.now();
  switch (e.type) {
    case Ev::kWake: {
      int i = e.node;
      wake_pending_[i] = false;
      if (!alive_[i]) return;
      AgentCore& a = *agents_[i];
      auto s = a.due(now, contact_[i], [&] { return std::exchange(heard_[i], {}); });
      if (s) {
        push(opts_.latency, Ev::kMgsRx, i, std::make_shared<Buffer>(std::move(s->payload)), 0,
             s->kind);
      } else {
        wake(i);
      }
      return;
    }
    case Ev::kMgsRx: {
      std::shared_ptr<Buffer> reply;
      {
        CpuTimer t(&mgs_cpu_);
        ++mgs_messages_;
        if (e.kind == AgentCore::Kind::kRegister) {
          auto req = decode_register_req(e.payload->span());
          RegisterRep rep = mgs_->on_register(*req, now);
          if (agent_of_id_.size() <= rep.id) agent_of_id_.resize(rep.id + 1, -1);
          agent_of_id_[rep.id] = e.node;
          reply = std::make_shared<Buffer>(encode(rep));
        } else {
          auto req = decode_ping_req(e.payload->span());
          reply = std::make_shared<Buffer>(encode(mgs_->on_ping(*req, now)));
        }
      }
      push(opts_.latency, Ev::kAgentRx, e.node, std::move(reply), 0, e.kind);
      return;
    }
    case Ev::kAgentRx: {
      int i = e.node;
      if (!alive_[i]) return;
      AgentCore& a = *agents_[i];
      if (e.kind == AgentCore::Kind::kRegister)
        a.on_register_reply(*decode_register_rep(e.payload->span()), now);
      else
        a.on_ping_reply(*decode_ping_rep(e.payload->span()), now);
      if (a.evicted()) a.eviction_handled(now);  // a simulated node holds nothing to drop
      wake(i);
      return;
    }
    case Ev::kMgsTick: {
      {
        CpuTimer t(&mgs_cpu_);
        mgs_->tick(now);
        if (opts_.keep_table)
          for (auto& [c, b] : mgs_->take_dirty_chunks()) {
            ++chunks_written_;
            bytes_written_ += b.size();
            table_[c] = std::string(reinterpret_cast<const char*>(b.data()), b.size());
          }
        for (const NodeEvent& ch : mgs_->take_changes())
          if (killed_ >= 0 && ch.state == NodeState::kDead &&
              ch.name == "oss" + std::to_string(killed_) && declared_s_ < 0)
            declared_s_ = std::chrono::duration<double>(now - start_).count();
      }
      send_notifications();
      push(std::chrono::milliseconds(100), Ev::kMgsTick, -1);
      return;
    }
    case Ev::kNotify: {
      int i = e.node;
      if (!alive_[i]) {  // no answer: the sender's deadline passes
        Event ack{};
        ack.ok = false;
        ack.token = e.token;
        ack.index = e.index;
        ack.type = e.via >= 0 ? Ev::kRelayAck : Ev::kNotifyAck;
        ack.node = e.via;
        push(e.via >= 0 ? opts_.notify_timeout / 2 : opts_.notify_timeout, std::move(ack));
        return;
      }
      auto req = decode_notify_req(e.payload->span());
      agents_[i]->apply(req->events);
      for (const NodeEvent& ev : req->events)
        if (killed_ >= 0 && ev.state == NodeState::kDead &&
            ev.name == "oss" + std::to_string(killed_))
          if (told_.insert(i).second)
            told_last_s_ = std::chrono::duration<double>(now - start_).count();
      Event ack{};
      ack.token = e.token;
      ack.index = e.index;
      ack.type = e.via >= 0 ? Ev::kRelayAck : Ev::kNotifyAck;
      ack.node = e.via;
      push(opts_.latency, std::move(ack));
      return;
    }
    case Ev::kRelay: {  // a server passes the notification on, one every relay_gap
      int r = e.node;
      if (!alive_[r]) {
        Event ack{};
        ack.ok = false;
        ack.token = e.token;
        ack.type = Ev::kNotifyAck;
        push(opts_.notify_timeout, std::move(ack));
        return;
      }
      auto req = decode_relay_req(e.payload->span());
      uint64_t id = next_round_++;
      rounds_[id] = RelayRound{e.token, req->targets.size(), {}};
      auto notify = std::make_shared<Buffer>(encode(req->notify));
      for (uint32_t k = 0; k < req->targets.size(); ++k) {
        Event n{};
        n.type = Ev::kNotify;
        n.node = agent_of_nid(req->targets[k]);
        n.token = id;
        n.payload = notify;
        n.via = r;
        n.index = k;
        push(opts_.latency + opts_.relay_gap * k, std::move(n));
      }
      return;
    }
    case Ev::kRelayAck: {
      auto it = rounds_.find(e.token);
      if (it == rounds_.end()) return;
      RelayRound& round = it->second;
      if (!e.ok) round.failed.push_back(e.index);
      if (--round.left > 0) return;
      std::sort(round.failed.begin(), round.failed.end());
      Event ack{};
      ack.type = Ev::kNotifyAck;
      ack.token = round.token;
      ack.payload = std::make_shared<Buffer>(encode(RelayRep{std::move(round.failed)}));
      rounds_.erase(it);
      push(opts_.latency, std::move(ack));
      return;
    }
    case Ev::kNotifyAck: {
      {
        CpuTimer t(&mgs_cpu_);
        ++mgs_messages_;
        std::vector<uint32_t> failed;
        if (e.payload) failed = decode_relay_rep(e.payload->span())->failed;
        if ((e.token >> 48) == mgs_instance_)
          mgs_->notification_done(e.token & ((uint64_t(1) << 48) - 1), e.ok, now, failed);
      }
      send_notifications();  // the window has room again
      return;
    }
    case Ev::kActivity: {
      int i = e.node;
      if (!alive_[i]) return;
      std::uniform_int_distribution<int> pick(0, opts_.servers - 1);
      int s = pick(rng_);
      if (alive_[s]) {
        heard_[s].push_back(agents_[i]->options().nids[0]);
        contact_[i] = now;
      }
      push(opts_.activity, Ev::kActivity, i);
      return;
    }
  }
}

}  // namespace pfsnet
