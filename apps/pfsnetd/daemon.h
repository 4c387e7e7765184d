// Daemon: one pfsnet node as pfsnetd runs it -- NIs over TCP, the RPC engine serving
// PING, and the admin socket. Wires objects explicitly; no globals.
// Threads: start() and stop() from the main thread; admin requests on session threads.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "admin/admin_server.h"
#include "admin/http_server.h"
#include "base/clock.h"
#include "base/config.h"
#include "membership/service.h"
#include "net/net.h"
#include "rpc/rpc_engine.h"
#include "stats/rpc_stats.h"
#include "transport/link_monitor.h"

namespace pfsnet {

class Daemon {
 public:
  Daemon(Config cfg, std::string cluster_key);
  ~Daemon();

  Status start();
  // Cancels new and pending RPCs, finishes admin sessions, closes connections, removes the
  // admin socket. Bounded by transaction_timeout.
  void stop();

  Result<nlohmann::json> handle_admin(const nlohmann::json& req, const AdminEmit& emit);

  // SIGHUP: re-reads `path`. A broken file is refused (logged) and the old settings stay;
  // otherwise the keys that can change at run time are applied and the others are logged
  // as waiting for a restart.
  Status reload(const std::string& path);

 private:
  Result<nlohmann::json> ping(const nlohmann::json& req, const AdminEmit& emit);
  Result<nlohmann::json> diag_rpc(const nlohmann::json& req);
  Result<nlohmann::json> config_show();
  Result<nlohmann::json> config_set(const nlohmann::json& req);
  Result<nlohmann::json> fault(const nlohmann::json& req);
  // Maps each local NI to its interface and follows their link state.
  void watch_links();
  std::string metrics_text();
  // REQUIRES: cfg_mu_ held. Applies the run-time keys of `next`; returns what changed.
  nlohmann::json apply_locked(Config next, bool refuse_restart_keys, Status* err);
  nlohmann::json nis_json() const;
  nlohmann::json peers_json() const;

  std::mutex cfg_mu_;  // guards cfg_ against concurrent admin sessions
  Config cfg_;
  std::string key_;
  MonotonicClock clock_;
  std::unique_ptr<RpcStats> stats_;
  std::unique_ptr<Net> net_;
  std::unique_ptr<RpcEngine> rpc_;
  std::unique_ptr<MembershipService> membership_;
  std::unique_ptr<AdminServer> admin_;
  std::unique_ptr<HttpServer> http_;
  LinkMonitor links_;
  std::map<std::string, std::vector<Nid>> ni_ifaces_;  // interface -> local NIs on it
  bool stopped_ = false;
};

// Prometheus text exposition of NIs, peers and the RPC statistics of the last 60 seconds.
std::string prometheus_metrics(const std::vector<NiInfo>& nis, const std::vector<NiInfo>& peers,
                               const StatsReport& rep,
                               const std::function<std::string(uint32_t)>& type_name);

// JSON of the counters of an NI or peer NI (shared by nis and peers).
nlohmann::json ni_info_json(const NiInfo& i);

}  // namespace pfsnet
