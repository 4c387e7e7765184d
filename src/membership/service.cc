#include "membership/service.h"

#include <pfsnet/version.h>

#include <algorithm>
#include <future>
#include <random>

#include "base/log.h"
#include "base/mutex.h"
#include "membership/methods.h"
#include "rpc/ping.h"

namespace pfsnet {

namespace {
uint64_t random_instance() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd() ^ 1;
}

int64_t wall_ms(Clock& clock) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock.wall_now().time_since_epoch())
      .count();
}

std::string nids_text(const std::vector<Nid>& v) {
  std::string s;
  for (const Nid& n : v) s += (s.empty() ? "" : " ") + n.to_string();
  return s;
}
}  // namespace

MembershipService::MembershipService(const Config& cfg, Net& net, RpcEngine& rpc, Clock& clock)
    : cfg_(cfg), net_(net), rpc_(rpc), clock_(clock), instance_(random_instance()) {
  roles_ = roles_from(cfg.node.roles) | (cfg.lnet.routing ? kRoleRouter : 0);
  // An evicted client's requests: their records go from this server's reply cache, and a
  // late copy of one is answered OUTCOME_UNKNOWN (rpc/reply_cache.h). The fence dies with
  // this service, before the engine.
  fence_.subscribe([&rpc](const FenceEvent& e) {
    if (e.kind != FenceEvent::kEvicted) return;
    for (const Nid& n : e.nids) rpc.forget_client(n);
  });
  Duration tt = std::chrono::seconds(cfg.lnet.transaction_timeout);
  notify_timeout_ = std::min<Duration>(tt, std::chrono::seconds(5));
  verify_timeout_ = std::chrono::seconds(cfg.membership.verify_timeout);
  std::vector<Nid> nids;
  for (const NetConfig& n : cfg.nets) nids.push_back(n.nid);
  if (roles_ & kRoleMgs) {
    mgs_ = std::make_unique<MgsCore>(MgsOptions::from(cfg), instance_);
    {
      MutexLock lk(mu_);
      register_self_locked();
    }
    if (!cfg.membership.etcd.empty() && !nids.empty()) {
      // The leader key's value: this MGS's first NID, where nodes are sent.
      auto etcd = EtcdClient::create(cfg.membership.etcd, std::chrono::seconds(1));
      if (etcd.ok()) {
        LeaseOptions lo;
        lo.ttl = std::chrono::seconds(cfg.membership.etcd_lease);
        lo.keepalive = lo.ttl / 3;
        // A dead leader's key goes when etcd expires its lease (checked every 500 ms); the
        // follower takes it within a campaign period after.
        lo.campaign = std::min<Duration>(lo.keepalive, std::chrono::milliseconds(200));
        lo.margin = std::min<Duration>(lo.ttl / 5, std::chrono::seconds(1));
        lo.retry = std::chrono::milliseconds(500);
        leadership_ = std::make_unique<EtcdLeadership>(
            std::move(*etcd), lo, cfg.membership.etcd_key, nids[0].to_string(), clock_);
      } else {
        start_error_ = etcd.status();
      }
    } else {
      // Without etcd the level is kept in a file of the MGS's own.
      level_path_ = cfg.membership.state_dir + "/release_level";
      auto rec = read_level_file(level_path_);
      if (rec.ok()) {
        MutexLock lk(mu_);
        set_level_locked(*rec, "kept in " + level_path_);
      } else {
        start_error_ = rec.status();
      }
    }
    serve(rpc_, kMgsRegisterRpc, [this](RegisterReq&& q, RpcRequest& req) -> Result<RegisterRep> {
      // The release the node named in the handshake of the connection this came on
      // (none from a node of wire version 1).
      std::optional<WireSession> w = net_.wire_of(req.from);
      const bool large = net_.takes_large_nids(req.from);
      MutexLock lk(mu_);
      Leadership l = leadership_locked();
      RegisterRep r;
      if (!l.not_leader) {
        r = mgs_->on_register(q, clock_.now());
        wires_[r.id] = w ? NodeWire{w->peer_release, level_of(*w)} : NodeWire{};
        if (w && w->peer_says_level) r.cluster_level = level_.level;
      }
      r.lead = l;
      if (!large) for_version1(&r);
      return r;
    });
    serve(rpc_, kMgsPingRpc, [this](PingReq&& q, RpcRequest& req) -> Result<PingRep> {
      const bool large = net_.takes_large_nids(req.from);
      std::optional<WireSession> w = net_.wire_of(req.from);
      MutexLock lk(mu_);
      Leadership l = leadership_locked();
      PingRep r;
      if (!l.not_leader) {
        r = mgs_->on_ping(q, clock_.now());
        // A node this MGS took over from etcd (or from its predecessor) pings without
        // registering: its handshake says what it runs.
        if (r.status == PingStatus::kOk && w && !wires_.contains(q.id))
          wires_[q.id] = NodeWire{w->peer_release, level_of(*w)};
        if (w && w->peer_says_level) r.cluster_level = level_.level;
      }
      r.lead = l;
      if (!large) for_version1(&r);
      return r;
    });
    serve(rpc_, kMgsReportRpc, [this](ReportReq&& q, RpcRequest& req) -> Result<PingRep> {
      const bool large = net_.takes_large_nids(req.from);
      std::optional<WireSession> w = net_.wire_of(req.from);
      MutexLock lk(mu_);
      Leadership l = leadership_locked();
      PingRep r;
      if (!l.not_leader) {
        r = mgs_->on_report(q, clock_.now());
        if (w && w->peer_says_level) r.cluster_level = level_.level;
      }
      r.lead = l;
      if (!large) for_version1(&r);
      return r;
    });
    serve(rpc_, kMgsStatusRpc, [this](PageReq&& q, RpcRequest& req) -> Result<StatusTable> {
      const bool large = net_.takes_large_nids(req.from);
      MutexLock lk(mu_);
      Leadership l = leadership_locked();
      if (l.not_leader) return not_leading(l);
      StatusTable t = table_locked(q.offset, std::min<uint32_t>(q.limit, kMaxStatusPage));
      if (!large) for_version1(&t);
      return t;
    });
    serve(rpc_, kMgsReleasesRpc, [this](PageReq&& q, RpcRequest&) -> Result<ReleasesPage> {
      MutexLock lk(mu_);
      Leadership l = leadership_locked();
      if (l.not_leader) return not_leading(l);
      return releases_locked(q.offset, std::min<uint32_t>(q.limit, kMaxStatusPage));
    });
    serve_async(rpc_, kMgsUpgradeRpc,
                [this](UpgradeReq&& q, RpcRequest& req, TypedResponder<UpgradeRep> resp) {
                  auto out = std::make_shared<TypedResponder<UpgradeRep>>(std::move(resp));
                  upgrade_here(q, req.from.to_string(), [out](Result<UpgradeRep> r) {
                    if (r.ok())
                      out->reply(*r);
                    else
                      out->fail(r.status());
                  });
                });
  }
  std::vector<Nid> others;  // an MGS does not ping itself
  for (const Nid& m : cfg.node.mgs)
    if (std::find(nids.begin(), nids.end(), m) == nids.end()) others.push_back(m);
  if (!others.empty()) {
    AgentOptions o;
    o.name = cfg.node.name;
    o.roles = roles_;
    o.nids = nids;
    o.mgs = others;
    o.client_interval = std::chrono::seconds(cfg.membership.client_ping_interval);
    o.server_interval = std::chrono::seconds(cfg.membership.server_ping_interval);
    o.heard_reports = cfg.membership.heard_from_reports;
    o.max_skips = static_cast<int>(std::max<int64_t>(0, cfg.membership.ping_miss_limit - 1));
    o.instance = instance_;
    o.unreachable_reports = cfg.membership.unreachable_reports;
    o.takes_large_nids = [this](const Nid& mgs) { return net_.takes_large_nids(mgs); };
    request_timeout_ = std::min<Duration>(tt, o.period());
    agent_ = std::make_unique<AgentCore>(o);
  }
  serve(rpc_, kMgsNotifyRpc, [this](NotifyReq&& q, RpcRequest& r) -> Result<Empty> {
    if (agent_) {
      MutexLock lk(mu_);
      if (q.epoch < agent_->epoch()) {  // from an MGS that led before the one we follow
        PFS_LOG_WARN("membership: a notification from {} of epoch {} (now {}) dropped",
                     r.from.to_string(), q.epoch, agent_->epoch());
        return Empty{};
      }
      agent_->apply(q.events);
    }
    act_on(q.events, r.from.to_string());
    if (roles_ & kRoleServer)
      for (const NodeEvent& e : q.fenced) fence_.fenced(e.nids);
    return Empty{};
  });
  serve_async(rpc_, kMgsRelayRpc,
              [this](RelayReq&& q, RpcRequest& r, TypedResponder<RelayRep> resp) {
                relay(std::move(q), r.from, std::move(resp));
              });
}

namespace {
// One MGS_RELAY under way on this server: its targets' answers, then the reply.
struct RelayRound {
  explicit RelayRound(TypedResponder<RelayRep> r, size_t n) : resp(std::move(r)), left(n) {}
  void done(uint32_t k, bool ok) {
    std::optional<RelayRep> rep;
    {
      MutexLock lk(mu);
      if (!ok) failed.push_back(k);
      if (--left > 0) return;
      std::sort(failed.begin(), failed.end());
      rep = RelayRep{std::move(failed)};
    }
    resp.reply(*rep);
  }
  Mutex mu;
  TypedResponder<RelayRep> resp;  // answered once, by the last target's outcome
  size_t left GUARDED_BY(mu);
  std::vector<uint32_t> failed GUARDED_BY(mu);
};
}  // namespace

void MembershipService::relay(RelayReq&& q, const Nid& from, TypedResponder<RelayRep> resp) {
  if (agent_) {
    MutexLock lk(mu_);
    if (q.notify.epoch < agent_->epoch())  // from an MGS that led before the one we follow
      return resp.fail(Status(Code::kRejected, "MGS_RELAY of epoch " +
                                                   std::to_string(q.notify.epoch) +
                                                   " refused: the leader's epoch is " +
                                                   std::to_string(agent_->epoch())));
  }
  PFS_LOG_DEBUG("membership: relaying a notification of {} event(s) from {} to {} client(s)",
                q.notify.events.size(), from.to_string(), q.targets.size());
  (void)from;  // for the log only
  auto round = std::make_shared<RelayRound>(std::move(resp), q.targets.size());
  const Buffer payload = encode(q.notify);
  CallOptions co;
  co.timeout = notify_timeout_ / 2;  // the MGS waits notify_timeout_ for the whole round
  for (uint32_t k = 0; k < q.targets.size(); ++k) {
    call_encoded_async(
        rpc_, kMgsNotifyRpc, q.targets[k], Buffer::copy_of(payload.span()),
        [round, k](Result<Empty> r) { round->done(k, r.ok()); }, co);
  }
}

MembershipService::~MembershipService() { stop(); }

Status MembershipService::start(TimerQueue& queue) {
  if (!start_error_.ok()) return start_error_;
  ticker_.start(queue, clock_, std::chrono::milliseconds(100),
                [this](TimePoint now) { tick(now); });
  return Status::Ok();
}

void MembershipService::stop() {
  ticker_.stop();
  if (leadership_) leadership_->stop(true);  // the next MGS leads at once, not after a TTL
}

void MembershipService::register_self_locked() {
  std::vector<Nid> nids;
  for (const NetConfig& n : cfg_.nets) nids.push_back(n.nid);
  self_id_ =
      mgs_->on_register(RegisterReq{cfg_.node.name, roles_, nids, instance_, true}, clock_.now())
          .id;
  wires_[self_id_] = NodeWire{release_name(), kReleaseLevel};
}

Status MembershipService::not_leading(const Leadership& l) {
  return Status(Code::kRejected,
                "this MGS does not lead (leader: " +
                    (l.leader ? l.leader->to_string() : std::string("none known")) + ", epoch " +
                    std::to_string(l.epoch) + ")");
}

Leadership MembershipService::leadership_locked() {
  Leadership l;
  if (!leadership_) return l;
  LeaderLease::View v = leadership_->view();
  l.epoch = v.epoch;
  if (v.role == LeaderLease::Role::kLeader) {
    if (table_epoch_ != v.epoch) {
      // Leading at a new epoch: the table its predecessor left in etcd (read before the
      // lead began), each node up and given a whole period to ping; nodes it does not
      // hold (or a table that does not decode) register when their pings find them unknown.
      table_epoch_ = v.epoch;
      *mgs_ = MgsCore(MgsOptions::from(cfg_), instance_);
      wires_.clear();  // filled again by registrations and first pings
      // The cluster's release level, read with the table: never lowered by a record that
      // is missing (level 1) or unusable while this MGS knows a higher one.
      if (auto rec = leadership_->take_level(v.epoch)) {
        auto r = rec->empty() ? Result<LevelRecord>(LevelRecord{}) : decode_level_record(*rec);
        if (!r.ok())
          PFS_LOG_ERROR("membership: the release level in etcd is unusable ({}); keeping {}",
                        r.status().to_string(), level_.level);
        else if (r->level >= level_.level)
          set_level_locked(*r, "kept in etcd");
      }
      if (auto chunks = leadership_->take_table(v.epoch)) {
        Status st = mgs_->restore(*chunks, clock_.now());
        if (!st.ok()) {
          PFS_LOG_WARN("membership: the MGS table in etcd is unusable ({}); starting empty",
                       st.to_string());
          *mgs_ = MgsCore(MgsOptions::from(cfg_), instance_);
        } else {
          PFS_LOG_WARN("membership: leading at epoch {} with the table from etcd: {} node(s)",
                       v.epoch, mgs_->nodes().size());
        }
      }
      register_self_locked();
    }
    return l;
  }
  l.not_leader = true;
  auto leader = v.role == LeaderLease::Role::kFollower ? Nid::parse(v.leader)
                                                       : Result<Nid>(Status(Code::kNotFound, ""));
  if (leader.ok() && !(!cfg_.nets.empty() && *leader == cfg_.nets[0].nid)) l.leader = *leader;
  return l;
}

// ---- MGS side ----

void MembershipService::set_level_locked(const LevelRecord& r, const std::string& how) {
  const uint16_t before = level_.level;
  level_ = r;
  net_.set_min_peer_level(r.level);
  if (r.level != before || r.level > 1)
    PFS_LOG_WARN(
        "membership: the cluster's minimum release level is {} ({}{}): peers below it are "
        "refused",
        r.level, how, r.by.empty() ? std::string() : ", set by " + r.by);
}

std::vector<NodeLevel> MembershipService::node_levels_locked() const {
  std::vector<NodeLevel> v;
  for (const NodeRecord& n : mgs_->nodes()) {
    if (n.name.empty()) continue;
    NodeLevel e{n.id, n.name, n.state, 0, ""};
    if (auto w = wires_.find(n.id); w != wires_.end()) {
      e.level = w->second.level;
      e.release = w->second.release;
    }
    v.push_back(std::move(e));
  }
  return v;
}

void MembershipService::upgrade_here(const UpgradeReq& q, std::string by,
                                     std::function<void(Result<UpgradeRep>)> done) {
  MutexLock lk(mu_);
  Leadership l = leadership_locked();
  if (l.not_leader) {
    lk.unlock();
    return done(not_leading(l));
  }
  UpgradeRep rep = decide_level(q, level_.level, kReleaseLevel, node_levels_locked());
  if (!q.commit || !rep.refusal.empty() || rep.target <= level_.level) {
    lk.unlock();
    return done(rep);
  }
  LevelRecord rec{rep.target, wall_ms(clock_), std::move(by)};
  if (leadership_) {  // kept in etcd before it is in force
    const uint64_t epoch = l.epoch;
    lk.unlock();
    leadership_->save_level(epoch, encode_level_record(rec),
                            [this, rep, rec, epoch, done = std::move(done)](Status st) mutable {
                              if (!st.ok()) {
                                rep.refusal =
                                    "the level could not be kept in etcd: " + st.message();
                                return done(rep);
                              }
                              {
                                MutexLock l2(mu_);
                                if (table_epoch_ == epoch && rec.level > level_.level)
                                  set_level_locked(rec, "committed");
                              }
                              rep.level = rec.level;
                              rep.committed = true;
                              done(rep);
                            });
    return;
  }
  if (Status st = write_level_file(level_path_, rec); !st.ok()) {
    rep.refusal = "the level could not be kept: " + st.message();
  } else {
    set_level_locked(rec, "committed, kept in " + level_path_);
    rep.level = rec.level;
    rep.committed = true;
  }
  lk.unlock();
  done(rep);
}

void MembershipService::send_verifications(std::vector<MgsCore::Verify> vs) {
  for (MgsCore::Verify& v : vs) {
    if (v.nids.empty()) continue;
    CallOptions co;
    co.timeout = verify_timeout_;
    uint64_t token = v.token;
    rpc_.call_async(
        v.nids[0], kMsgPing, ping_payload(std::nullopt), nullptr,
        [this, token](RpcReply&& r) {
          MutexLock lk(mu_);
          mgs_->verification_done(token, r.status.ok(), clock_.now());
        },
        co);
  }
}

StatusTable MembershipService::table_locked(uint32_t offset, uint32_t limit) const {
  TimePoint now = clock_.now();
  int64_t wall_now =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_.wall_now().time_since_epoch())
          .count();
  auto wall = [&](TimePoint t) {
    return wall_now - std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count();
  };
  StatusTable t;
  t.mgs = cfg_.nets.empty() ? Nid() : cfg_.nets[0].nid;
  t.generation = mgs_->generation();
  t.offset = offset;
  for (const NodeRecord& n : mgs_->nodes()) {
    if (n.name.empty()) continue;
    if (t.total++ < offset || t.nodes.size() >= limit) continue;
    StatusNode s{n.id, n.name, n.roles, n.state, n.nids};
    s.last_heard_unix_ms = wall(n.last_heard);
    s.registered_unix_ms = wall(n.registered);
    s.last_change_unix_ms = wall(n.last_change);
    s.last_heard_ago_ms = static_cast<uint64_t>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(now - n.last_heard).count()));
    s.heard_by_report = n.heard_by_report;
    // Reported and being checked, for the first second: a live node answers the MGS's ping
    // well within it, so until then one node's report is all there is.
    s.verifying = n.verifying && n.state == NodeState::kSuspect &&
                  now - n.reported_at < std::chrono::seconds(1);
    auto rel = wires_.find(n.id);
    if (rel != wires_.end()) s.release = rel->second.release;
    t.nodes.push_back(std::move(s));
  }
  const MgsCore::Counters& c = mgs_->counters();
  t.counters = {c.registers,
                c.pings,
                c.reported,
                c.notifications_sent,
                c.notification_failures,
                c.notifications_dropped,
                c.events_delivered};
  return t;
}

uint64_t MembershipService::table_generation() {
  MutexLock lk(mu_);
  return mgs_ ? mgs_->generation() : 0;
}

std::vector<std::string> MembershipService::dead_nodes() {
  std::vector<std::string> v;
  MutexLock lk(mu_);
  if (!mgs_) return v;
  for (const NodeRecord& n : mgs_->nodes())
    if (!n.name.empty() && n.state == NodeState::kDead) v.push_back(n.name);
  return v;
}

// ---- node side ----

void MembershipService::act_on(const std::vector<NodeEvent>& events, const std::string& source) {
  for (const NodeEvent& e : events) {
    if (e.name == cfg_.node.name || e.nids.empty()) continue;
    bool server_news = (roles_ & kRoleClient) && (e.roles & kRoleServer);
    bool client_news = (roles_ & kRoleServer) && (e.roles & kRoleClient);
    if (!server_news && !client_news) continue;
    if (e.state == NodeState::kDead) {
      std::string why =
          "node " + e.name + " (" + nids_text(e.nids) + ") was declared dead by the MGS " + source;
      if (server_news) {
        // Calls that wait for a restarting server (block I/O: CallOptions::recover) go on
        // waiting for its return, within their deadlines: a server restarted for an
        // upgrade is declared dead once its peers find it gone, and back when it registers.
        net_.set_peer_dead(e.nids[0], true, why);
        size_t n = rpc_.fail_calls_to(e.nids, Status(Code::kPeerDead, why), true);
        PFS_LOG_WARN(
            "membership: server {} declared dead by the MGS: {} RPC(s) failed, new ones "
            "refused until it returns (but those that wait for a restart)",
            e.name, n);
      }
      if (client_news) {
        // Evicted: token managers drop its tokens and the block service refuses its I/O
        // until it registers again; what this node asked of it (revocations) ends now.
        // A call that waits for a restart (CallOptions::recover) is none of those: it goes on
        // waiting for the node's return, as for a server.
        fence_.evict(e.nids, why);
        rpc_.fail_calls_to(e.nids, Status(Code::kPeerDead, why), true);
        net_.drop_peer(e.nids[0], why);
        PFS_LOG_WARN(
            "membership: client {} declared dead by the MGS: its connections and state "
            "dropped",
            e.name);
      }
    } else if (e.state == NodeState::kUp) {
      if (net_.peer_dead(e.nids[0])) net_.set_peer_dead(e.nids[0], false, "");
      if (client_news) fence_.readmit(e.nids);
      PFS_LOG_INFO("membership: {} {} is up (MGS {})", server_news ? "server" : "client", e.name,
                   source);
    }
  }
}

std::vector<Nid> MembershipService::peers_heard_since(std::unordered_map<Nid, uint64_t>& seen) {
  std::vector<Nid> v;
  for (const NiInfo& p : net_.peers()) {
    uint64_t& last = seen[p.nid];
    if (p.recv_count > last) v.push_back(p.nid);
    last = p.recv_count;
  }
  return v;
}

TimePoint MembershipService::last_server_contact(TimePoint now) {
  if (now < next_contact_sample_) return server_contact_;
  next_contact_sample_ = now + std::chrono::seconds(1);
  for (const Nid& nid : peers_heard_since(contact_seen_)) {
    AgentCore::Role role = agent_->role_of(nid);
    if (role == AgentCore::Role::kServer) server_contact_ = now;
    if (role == AgentCore::Role::kUnknown) agent_->ask_role(nid);  // answered by the next ping
  }
  return server_contact_;
}

void MembershipService::learn_level_locked(uint16_t level) {
  if (level == 0 || level == agent_level_) return;
  agent_level_ = level;
  net_.set_min_peer_level(level);
  if (level > kReleaseLevel)
    PFS_LOG_ERROR(
        "membership: the cluster's minimum release level is {}, above this node's release "
        "({}, level {}): its peers refuse it; upgrade this node",
        level, release_name(), kReleaseLevel);
  else
    PFS_LOG_INFO(
        "membership: the cluster's minimum release level is {} (MGS {}): peers below "
        "it are refused",
        level, agent_->current_mgs().to_string());
}

void MembershipService::evicted() {
  std::vector<Nid> servers;  // every peer but the MGSs: a client's RPCs go to servers
  std::string why;
  {
    MutexLock lk(mu_);
    const std::vector<Nid>& mgs = agent_->options().mgs;
    for (const NiInfo& p : net_.peers())
      if (std::find(mgs.begin(), mgs.end(), p.nid) == mgs.end()) servers.push_back(p.nid);
    why = "this node was declared dead by the MGS " + agent_->current_mgs().to_string() +
          " (evicted): its tokens were dropped and the servers refused its I/O until it "
          "registered again";
  }
  // What went to the servers before is of the evicted session: it ends here, not resent.
  size_t failed = rpc_.fail_calls_to(servers, Status(Code::kPeerDead, why));
  fence_.self_evicted(why);  // tokens and cached blocks dropped
  PFS_LOG_WARN(
      "membership: evicted: {} RPC(s) to {} server NID(s) failed, tokens dropped; registering",
      failed, servers.size());
  MutexLock lk(mu_);
  agent_->eviction_handled(clock_.now());
}

void MembershipService::send_agent_request(TimePoint now) {
  std::optional<AgentCore::Send> s;
  {
    MutexLock lk(mu_);
    TimePoint contact =
        ((roles_ & ~kRoleRouter) == kRoleClient && cfg_.membership.heard_from_reports)
            ? last_server_contact(now)
            : TimePoint{};
    s = agent_->due(now, contact, [this] {
      mu_.assert_held();  // due() calls this at once, under the lock
      return peers_heard_since(rx_seen_);
    });
  }
  if (!s) return;
  CallOptions co;
  co.timeout = request_timeout_;
  co.no_delay = true;  // an MGS that refuses is failed over from, not waited for
  // The agent hands over its request encoded; the reply comes back decoded, or the error.
  if (s->kind == AgentCore::Kind::kRegister)
    call_encoded_async(
        rpc_, kMgsRegisterRpc, s->mgs, std::move(s->payload),
        [this](Result<RegisterRep> rep) {
          TimePoint t = clock_.now();
          MutexLock lk(mu_);
          if (rep.ok()) {
            agent_->on_register_reply(*rep, t);
            if (!rep->lead.not_leader) learn_level_locked(rep->cluster_level);
            if (agent_->evicted()) {
              lk.unlock();
              evicted();
            }
          } else {
            PFS_LOG_DEBUG("membership: registration failed: {}", rep.status().to_string());
            agent_->on_failure(t);
          }
        },
        co);
  else
    call_encoded_async(
        rpc_, kMgsPingRpc, s->mgs, std::move(s->payload),
        [this](Result<PingRep> rep) {
          TimePoint t = clock_.now();
          MutexLock lk(mu_);
          if (rep.ok()) {
            agent_->on_ping_reply(*rep, t);
            if (!rep->lead.not_leader) learn_level_locked(rep->cluster_level);
            if (agent_->evicted()) {
              lk.unlock();
              evicted();
            }
          } else {
            PFS_LOG_DEBUG("membership: ping failed: {}", rep.status().to_string());
            agent_->on_failure(t);
          }
        },
        co);
}

void MembershipService::tick(TimePoint now) {
  bool leads = true;
  if (leadership_) {
    leadership_->tick();
    MutexLock lk(mu_);
    leads = !leadership_locked().not_leader;
  }
  if (mgs_ && leads) {
    std::vector<MgsCore::Outgoing> outs;
    std::vector<NodeEvent> changes;
    std::vector<MgsCore::Verify> verifies;
    {
      MutexLock lk(mu_);
      // The MGS hears itself (and registers again if its own rounds stalled so long that it
      // declared itself dead).
      if (mgs_->on_ping(PingReq{self_id_, instance_, {}}, now).status != PingStatus::kOk)
        register_self_locked();
      mgs_->tick(now);
      changes = mgs_->take_changes();
      outs = mgs_->take_notifications(now);
      verifies = mgs_->take_verifications();
      for (MgsCore::Outgoing& o : outs) o.req.epoch = table_epoch_;
      if (leadership_) {
        // The table's changed chunks, for the next leader (written by the etcd worker).
        std::vector<std::pair<uint32_t, std::string>> chunks;
        for (auto& [c, b] : mgs_->take_dirty_chunks())
          chunks.emplace_back(c, std::string(reinterpret_cast<const char*>(b.data()), b.size()));
        if (!chunks.empty()) leadership_->save(table_epoch_, std::move(chunks));
      }
    }
    act_on(changes, "(local)");
    send_notifications(std::move(outs));
    send_verifications(std::move(verifies));
  }
  if (agent_) {
    send_agent_request(now);
    send_report(now);
  }
}

void MembershipService::send_report(TimePoint now) {
  std::optional<AgentCore::Send> s;
  {
    MutexLock lk(mu_);
    if (now < next_report_sample_) return;
    next_report_sample_ = now + std::chrono::seconds(1);
  }
  std::vector<AgentCore::PeerSample> samples;
  for (const NiInfo& p : net_.peers()) {
    if (net_.peer_dead(p.nid)) continue;  // the MGS has told us already
    auto errors = [&](HealthKind k) { return p.errors[static_cast<size_t>(k)]; };
    samples.push_back({p.nid, errors(HealthKind::kPeerNiConnectError),
                       errors(HealthKind::kPeerNiUnreachable), p.recv_count});
  }
  {
    MutexLock lk(mu_);
    s = agent_->report_due(now, samples);
  }
  if (!s) return;
  PFS_LOG_INFO("membership: telling MGS {} of peers we cannot reach", s->mgs.to_string());
  CallOptions co;
  co.timeout = request_timeout_;
  call_encoded_async(
      rpc_, kMgsReportRpc, s->mgs, std::move(s->payload),
      [](Result<PingRep> rep) {
        if (!rep.ok())
          PFS_LOG_DEBUG("membership: report to the MGS failed: {}", rep.status().to_string());
      },
      co);
}

void MembershipService::send_notifications(std::vector<MgsCore::Outgoing> outs) {
  for (MgsCore::Outgoing& o : outs) {
    CallOptions co;
    co.timeout = notify_timeout_;
    uint64_t token = o.token;
    // A node of wire version 1 is told of no large NID (docs/wire_format.md, "Large NIDs").
    const bool large = net_.takes_large_nids(o.nids[0]);
    if (!large) for_version1(&o.req);
    if (!o.targets.empty()) {  // through a server, to many clients
      // Clients a version-1 relay cannot be told of (a large first NID) fail at once, by
      // their positions; the rest go, their failures mapped back to theirs.
      std::vector<uint32_t> sent, cut;
      std::vector<Nid> targets;
      for (uint32_t i = 0; i < o.targets.size(); ++i) {
        if (!large && o.targets[i].is_large()) {
          cut.push_back(i);
          continue;
        }
        sent.push_back(i);
        targets.push_back(o.targets[i]);
      }
      if (targets.empty()) {
        after_notification(token, true, std::move(cut));
        continue;
      }
      co.attempt_timeout = co.timeout;  // the server rightly holds it while a client is slow
      call_async(
          rpc_, kMgsRelayRpc, o.nids[0], RelayReq{std::move(o.req), std::move(targets)},
          [this, token, via = o.nids[0], sent = std::move(sent),
           cut = std::move(cut)](Result<RelayRep> r) mutable {
            if (!r.ok())
              PFS_LOG_LIMITED(spdlog::level::info, "membership: relay failed",
                              "membership: relaying through {} failed: {}", via.to_string(),
                              r.status().to_string());
            std::vector<uint32_t> failed = std::move(cut);
            if (r.ok())
              for (uint32_t k : r->failed)
                if (k < sent.size()) failed.push_back(sent[k]);
            std::sort(failed.begin(), failed.end());
            after_notification(token, r.ok(), r.ok() ? std::move(failed) : std::vector<uint32_t>{});
          },
          co);
      continue;
    }
    call_async(
        rpc_, kMgsNotifyRpc, o.nids[0], o.req,
        [this, token, to = o.nids[0]](Result<Empty> r) {
          if (!r.ok())  // retried (or given up, which says so); shown, at most 1 in 10 s
            PFS_LOG_LIMITED(spdlog::level::info, "membership: notify failed",
                            "membership: notifying {} failed: {}", to.to_string(),
                            r.status().to_string());
          after_notification(token, r.ok(), {});
        },
        co);
  }
}

void MembershipService::after_notification(uint64_t token, bool ok, std::vector<uint32_t> failed) {
  std::vector<MgsCore::Outgoing> more;
  {
    MutexLock lk(mu_);
    TimePoint now = clock_.now();
    mgs_->notification_done(token, ok, now, failed);
    more = mgs_->take_notifications(now);  // the window has room again
    for (MgsCore::Outgoing& o : more) o.req.epoch = table_epoch_;
  }
  send_notifications(std::move(more));
}

ReleasesPage MembershipService::releases_locked(uint32_t offset, uint32_t limit) const {
  ReleasesPage p;
  p.offset = offset;
  for (const NodeRecord& n : mgs_->nodes()) {  // the table's order, as table_locked's
    if (n.name.empty()) continue;
    if (p.total++ < offset || p.nodes.size() >= limit) continue;
    auto rel = wires_.find(n.id);
    p.nodes.push_back({n.id, rel == wires_.end() ? std::string() : rel->second.release});
  }
  return p;
}

Result<StatusTable> MembershipService::status(Duration timeout) {
  if (mgs_) {
    MutexLock lk(mu_);
    Leadership l = leadership_locked();
    if (!l.not_leader) return table_locked(0, UINT32_MAX);
    // An MGS that does not lead has no table to show: the leader's, through its agent.
    if (!agent_) return not_leading(l);
  }
  if (!agent_) return Status(Code::kNotFound, "no MGS configured (node.mgs is empty)");
  Nid mgs;
  {
    MutexLock lk(mu_);
    mgs = agent_->current_mgs();
  }
  StatusTable all;
  for (uint32_t offset = 0;;) {
    CallOptions co;
    co.timeout = timeout;
    Result<StatusTable> page = call(rpc_, kMgsStatusRpc, mgs, StatusReq{offset, 2000}, co);
    if (!page.ok())
      return Status(page.status().code(),
                    "asking MGS " + mgs.to_string() + ": " + page.status().message(),
                    page.status().health_kind());
    size_t got = page->nodes.size();
    if (offset == 0) {
      all = std::move(*page);
    } else {
      for (StatusNode& n : page->nodes) all.nodes.push_back(std::move(n));
      all.total = page->total;
    }
    offset += static_cast<uint32_t>(got);
    if (got == 0 || offset >= all.total) break;
  }
  all.mgs = mgs;
  all.offset = 0;
  // Each node's release, asked apart: an MGS before MGS_RELEASES does not know it.
  std::unordered_map<uint32_t, std::string> releases;
  for (uint32_t offset = 0;;) {
    CallOptions co;
    co.timeout = timeout;
    Result<ReleasesPage> page = call(rpc_, kMgsReleasesRpc, mgs, PageReq{offset, 2000}, co);
    if (!page.ok()) {
      all.releases_error = "MGS " + mgs.to_string() + " does not say (" +
                           page.status().message().substr(0, 120) + ")";
      break;
    }
    for (NodeRelease& r : page->nodes) releases[r.id] = std::move(r.release);
    offset += static_cast<uint32_t>(page->nodes.size());
    if (page->nodes.empty() || offset >= page->total) break;
  }
  for (StatusNode& n : all.nodes)
    if (auto it = releases.find(n.id); it != releases.end()) n.release = it->second;
  return all;
}

Result<UpgradeRep> MembershipService::upgrade(const UpgradeReq& q, Duration timeout) {
  if (leads()) {
    // Answered at once, or by etcd's worker once the level is kept: waited for, bounded.
    auto out = std::make_shared<std::promise<Result<UpgradeRep>>>();
    std::future<Result<UpgradeRep>> f = out->get_future();
    upgrade_here(
        q, cfg_.node.name + " (" + (cfg_.nets.empty() ? "" : cfg_.nets[0].nid.to_string()) + ")",
        [out](Result<UpgradeRep> r) { out->set_value(std::move(r)); });
    if (f.wait_for(timeout) != std::future_status::ready)
      return Status(Code::kTimeout, "the MGS did not keep the level within the timeout");
    return f.get();
  }
  if (!agent_) return Status(Code::kNotFound, "no MGS configured (node.mgs is empty)");
  Nid mgs;
  {
    MutexLock lk(mu_);
    mgs = agent_->current_mgs();
  }
  CallOptions co;
  co.timeout = timeout;
  Result<UpgradeRep> r = call(rpc_, kMgsUpgradeRpc, mgs, q, co);
  if (r.ok()) return r;
  if (r.status().code() == Code::kNotFound)  // "no handler": a release before levels
    return Status(Code::kNotFound,
                  "MGS " + mgs.to_string() +
                      " keeps no release level (its release is from before levels: " +
                      r.status().message().substr(0, 120) + "); upgrade the MGS first");
  return Status(r.status().code(), "asking MGS " + mgs.to_string() + ": " + r.status().message(),
                r.status().health_kind());
}

bool MembershipService::leads() {
  if (!mgs_) return false;
  if (!leadership_) return true;
  MutexLock lk(mu_);
  return !leadership_locked().not_leader;
}

std::optional<Nid> MembershipService::current_mgs() {
  MutexLock lk(mu_);
  if (!agent_) return std::nullopt;
  return agent_->current_mgs();
}

MembershipCounters MembershipService::counters() {
  MutexLock lk(mu_);
  MembershipCounters out;
  if (agent_)
    out.agent = MembershipCounters::Agent{agent_->current_mgs(), agent_->registered(),
                                          agent_->epoch(), agent_->counters(), agent_level_};
  if (mgs_) out.mgs = mgs_->counters();
  if (mgs_ && !leadership_locked().not_leader) out.level = level_;
  if (leadership_)
    out.leadership = {leadership_->view(), leadership_->counters(), leadership_->table_counters()};
  return out;
}

}  // namespace pfsnet
