#include "pfsnetd/daemon.h"

#include <pfsnet/version.h>

#include "admin/dashboard.h"
#include "base/log.h"
#include "rpc/ping.h"
#include "selftest/selftest.h"
#include "transport/lnd_switch.h"

namespace pfsnet {

namespace {
// The transport's options as the config says; a bad [tls] setting is kept in `init`
// (start() returns it) and the core built plaintext meanwhile, never to run.
TransportOptions options(const Config& cfg, ClusterKeys keys, Status& init) {
  auto opts = transport_options(cfg, std::move(keys));
  init = opts.status();
  return opts.ok() ? *opts : TransportOptions{};
}

std::unique_ptr<NodeCore> make_core(const Config& cfg, const TransportOptions& transport) {
  NodeCoreOptions o;
  o.cfg = cfg;
  o.transport = transport;  // the key ring shared
  return std::make_unique<NodeCore>(std::move(o));
}

// "current 1a2b3c4d5e6f7a8b, next ..." (fingerprints: nothing of the keys themselves).
std::string keys_string(const ClusterKeys& k) {
  std::string s = "current " + key_fingerprint(k.current);
  if (!k.next.empty()) s += ", next " + key_fingerprint(k.next);
  if (!k.previous.empty()) s += ", previous " + key_fingerprint(k.previous);
  return s;
}
}  // namespace

Daemon::Daemon(Config cfg, ClusterKeys keys)
    : cfg_(cfg),
      transport_(options(cfg, std::move(keys), init_)),
      core_(make_core(cfg, transport_)),
      clock_(core_->clock()),
      stats_(*core_->stats()),
      net_(core_->net()),
      rpc_(core_->rpc()) {
  membership_ = std::make_unique<MembershipService>(cfg, net_, rpc_, clock_);
  mesh_ = std::make_unique<MeshService>(MeshOptions::from(cfg), net_, rpc_, &stats_, *membership_,
                                        clock_);
  cluster_health_ = std::make_unique<ClusterHealthService>(cfg, rpc_, *membership_, clock_);
  netverify_ = std::make_unique<NetverifyService>(net_, rpc_, cfg_, clock_, membership_.get());
  serve_selftest(rpc_, clock_);
  serve_tune_probe(rpc_, clock_);
  tune_ = std::make_unique<TuneService>(net_, rpc_, stats_, cfg_, clock_);
  BlockServiceOptions bo = BlockServiceOptions::from(cfg);
  bo.fence = &membership_->fence();  // an evicted client's I/O refused
  storage_ = std::make_unique<BlockService>(bo, rpc_, &stats_, clock_, core_->timer_queue());
  tokens_ =
      std::make_unique<TokenService>(rpc_, std::chrono::seconds(cfg.lnet.transaction_timeout));
  tokens_->follow(membership_->fence());  // a dead client's tokens dropped at the verdict
  iobench_ = std::make_unique<IobenchService>(rpc_, clock_, [this] {
    Config c = cfg_.get();
    StripedFileOptions o = StripedFileOptions::from(c);
    if (c.storage.tokens) o.tokens = tokens_.get();
    return o;
  });
  // What a change of the run-time keys does (config set, SIGHUP, tune --apply, auto-tune).
  cfg_.on_apply([this](const Config& before, const Config& after) {
    stats_.set_config(after.stats);
    (void)init_logging(after.node.log_level, after.node.log_format, after.node.name);
    if (after.lnet.credits != before.lnet.credits ||
        after.lnet.peer_credits != before.lnet.peer_credits)
      net_.set_credits(after.lnet.credits, after.lnet.peer_credits);
    if (after.rpc.max_rpcs_in_flight != before.rpc.max_rpcs_in_flight)
      rpc_.set_max_rpcs_in_flight(after.rpc.max_rpcs_in_flight);
    if (after.rpc.peer_rpcs_in_flight != before.rpc.peer_rpcs_in_flight)
      rpc_.set_peer_rpcs_in_flight(RpcOptions::from(after).peer_rpcs_in_flight);
    net_.set_checksum(after.lnet.checksum);
    net_.set_socket_buffers(static_cast<int>(after.lnet.tx_buffer_size),
                            static_cast<int>(after.lnet.rx_buffer_size));
    net_.set_conns_per_peer(after.lnet.conns_per_peer);
    if (after.rpc.nrs_policy != before.rpc.nrs_policy ||
        after.rpc.nrs_slots != before.rpc.nrs_slots ||
        after.rpc.nrs_idle_ms != before.rpc.nrs_idle_ms ||
        after.rpc.nrs_reserve != before.rpc.nrs_reserve ||
        after.rpc.nrs_client_weights != before.rpc.nrs_client_weights ||
        after.rpc.nrs_job_weights != before.rpc.nrs_job_weights) {
      const RpcOptions ro = RpcOptions::from(after);
      rpc_.set_request_policy(ro.nrs_policy, ro.nrs);
    }
  });
  parts_ = std::make_unique<NodeParts>(
      NodeParts{net_, rpc_, stats_, cfg_, clock_, membership_.get(), tune_.get(), core_->health(),
                mesh_.get(), netverify_.get(), cluster_health_.get(), storage_.get(), tokens_.get(),
                transport_.tls.get()});
  cluster_health_->report_from([this] { return local_problems(*parts_); });
  // The MGS judges the cluster's list where the mesh's rows and every node's list are.
  if (membership_->is_mgs()) serve_health_list(rpc_, [this] { return health_view(*parts_); });
  // Opened, started and stopped (in reverse) by the core, in this order. The block
  // targets open before the NIs listen: from its first connection the daemon serves every
  // message type it ever will (a block request that came before the targets were open was
  // told NOT_FOUND, "no block targets here", which its client does not resend). Every
  // handler was registered above, as each service was built.
  for (NodePart* p : std::initializer_list<NodePart*>{
           storage_.get(), membership_.get(), mesh_.get(), netverify_.get(), cluster_health_.get(),
           tune_.get(), tokens_.get(), iobench_.get()})
    core_->add_part(*p);
  add_node_commands(commands_, *parts_);
  admin_ = std::make_unique<AdminServer>(commands_);
}

Daemon::~Daemon() { stop(); }

Status Daemon::start() {
  if (!init_.ok()) return init_;
  if (ClusterKeys k = transport_.cluster_key.get(); k.rotating())
    PFS_LOG_WARN("cluster key rotation under way: {}", keys_string(k));
  Status s = check_lnds(cfg_.get());
  if (!s.ok()) return s;
  s = core_->start(std::chrono::milliseconds(100));  // the parts too
  if (!s.ok()) return s;
  watch_links();
  Config cfg = cfg_.get();
  s = admin_->start(cfg.node.admin_socket);
  if (!s.ok()) return s;
  if (!cfg.node.http.empty()) {
    HttpRoutes routes;
    routes.metrics = [this] { return prometheus_text(metrics_snapshot(*parts_)); };
    routes.api = [this](
                     const std::string& name,
                     const std::multimap<std::string, std::string>& params) -> Result<std::string> {
      auto r = commands_.http_get(name, params);
      if (!r.ok()) return r.status();
      return admin_line(*r);
    };
    routes.files = dashboard_files();
    std::string token;
    if (!cfg.node.http_token_file.empty()) {
      auto t = load_http_token(cfg.node.http_token_file);
      if (!t.ok()) return t.status();
      token = *t;
    }
    http_ = std::make_unique<HttpServer>(std::move(routes));
    s = http_->start(cfg.node.http, token);
    if (!s.ok()) return s;
  }
  std::string nids;
  for (const Nid& n : net_.local_nids()) nids += (nids.empty() ? "" : " ") + n.to_string();
  PFS_LOG_INFO(
      "pfsnetd started: node {} NIDs {} admin socket {}; ready: every service serves; release {} "
      "(commit {})",
      cfg.node.name, nids, cfg.node.admin_socket, version(), build_commit());
  return Status::Ok();
}

void Daemon::watch_links() {
  // Large NIDs (IPv6) travel in wire version 2 only: say which NIs an older node cannot use.
  const std::vector<Nid> mine = net_.local_nids();
  size_t large = 0;
  for (const Nid& n : mine)
    if (n.is_large()) {
      ++large;
      PFS_LOG_INFO(
          "NI {} is IPv6 (a large NID): nodes that speak only wire version 1 (releases "
          "before large NIDs, such as 8827b49) cannot reach this node on it",
          n.to_string());
    }
  if (large > 0 && large == mine.size())
    PFS_LOG_WARN(
        "every NI of this node is IPv6: nodes that speak only wire version 1 cannot "
        "reach it at all (give it an IPv4 NI for them)");
  for (const Nid& n : mine) {
    auto ifname = LinkMonitor::interface_of(n);
    if (!ifname.ok()) {
      PFS_LOG_WARN("NI {}: no interface holds {}; its link state is not followed", n.to_string(),
                   n.address_string());
      continue;
    }
    ni_ifaces_[*ifname].push_back(n);
    auto up = LinkMonitor::link_up(*ifname);
    PFS_LOG_INFO("NI {} is on interface {} (link {})", n.to_string(), *ifname,
                 up.ok() ? (*up ? "up" : "down") : "unknown");
    if (up.ok() && !*up) net_.set_link_state(n, false, /*penalize=*/false);
  }
  Status s = links_.start([this](const std::string& ifname, bool up) {
    auto it = ni_ifaces_.find(ifname);
    if (it == ni_ifaces_.end()) return;
    for (const Nid& n : it->second) net_.set_link_state(n, up);
  });
  if (!s.ok())
    PFS_LOG_WARN("link monitor not started: {}; link events are not followed", s.message());
}

void Daemon::stop() {
  if (stopped_) return;
  stopped_ = true;
  links_.stop();
  // The parts in reverse (iobench's jobs end after the request under way; block requests
  // waiting for a buffer get kCancelled while the engine runs), then pending RPCs fail, so
  // admin sessions end.
  core_->stop();
  if (http_) http_->stop();
  admin_->stop();
}

Status Daemon::reload(const std::string& path) {
  auto next = load_config(path);
  if (!next.ok()) {
    PFS_LOG_ERROR("config reload refused, the old settings stay: {}", next.status().message());
    return next.status();
  }
  cfg_.reload(*next);
  PFS_LOG_INFO("config reloaded from {}", path);
  // The cluster keys, from the file the daemon started with (node.cluster_key_file is
  // read at startup only).
  const std::string key_file = cfg_.get().node.cluster_key_file;
  auto keys = load_cluster_keys(key_file);
  if (!keys.ok()) {
    PFS_LOG_ERROR("cluster keys not re-read, the old ones stay: {}", keys.status().message());
    return keys.status();
  }
  ClusterKeys before = transport_.cluster_key.get();
  if (*keys != before) {
    transport_.cluster_key.set(*keys);
    PFS_LOG_WARN("cluster keys changed ({} was {}): new connections prove with the current one",
                 keys_string(*keys), keys_string(before));
  }
  return Status::Ok();
}

}  // namespace pfsnet
