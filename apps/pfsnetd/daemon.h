// Daemon: one pfsnet node as pfsnetd runs it -- NIs over TCP, the RPC engine serving
// PING, and the admin socket. Wires objects explicitly; no globals.
// Threads: start() and stop() from the main thread; admin requests on session threads.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "admin/admin_server.h"
#include "admin/http_server.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/periodic.h"
#include "membership/service.h"
#include "net/net.h"
#include "rpc/rpc_engine.h"
#include "stats/rpc_stats.h"
#include "transport/link_monitor.h"
#include "tune/tune.h"

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
  Result<nlohmann::json> tune(const nlohmann::json& req);

  // ---- tuning (tune/): traffic sampling, auto-tune, the drift check ----
  struct PeerTraffic {
    uint64_t bytes = 0, sends = 0;  // counters at the last sample
    double rate = 0;                // bytes/s over the last sample
    double rpc_bytes = 0;           // bytes per message sent, over the last busy sample
    std::deque<std::pair<int64_t, double>> minute_peaks;  // (minute, peak bytes/s)
    TimePoint queued_at{};                                // RPCs to it last seen waiting for a slot
  };
  // Takes the counters' baseline and starts the tuning thread.
  void start_tuning();
  // One round of the tuning thread: traffic every second, auto-tune every tune.interval,
  // the drift check every tune.check_interval.
  void tune_round();
  // Peer nodes with a connection open.
  size_t active_peers();
  void sample_traffic(TimePoint now);
  void autotune_step(TimePoint now);
  void tune_check();
  // What is known of each peer node now (probes cached, statistics, traffic).
  std::vector<PeerMeasure> measure_peers(const std::vector<Nid>& only);
  TuneSettings settings();
  // Applies `s` as config set would; returns the keys changed.
  nlohmann::json apply_settings(const TuneSettings& s, Status* err);
  std::string tune_metrics();
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

  std::mutex tune_mu_;  // guards the tuning state below
  Periodic tune_ticker_;
  std::map<std::string, PeerTraffic> traffic_;  // peer node NID -> traffic
  std::map<std::string, ProbeResult> probes_;   // peer node NID -> its last probe
  std::unique_ptr<AutoTuner> autotune_;
  TuneWatch watch_;
  std::optional<Advice> last_advice_;
  RpcCounters last_rpc_;
  uint64_t last_credit_waits_ = 0;
  uint64_t autotune_changes_ = 0;
  TimePoint last_sample_{}, last_step_{}, last_check_{};
};

// Prometheus text exposition format: families (HELP and TYPE) and their samples.
class PromText {
 public:
  void family(const std::string& name, const char* type, const char* help);
  // `labels` without braces ("nid=\"...\""); empty: a sample without labels.
  void sample(const std::string& name, const std::string& labels, double v);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Prometheus text exposition of NIs, peers and the RPC statistics of the last 60 seconds.
std::string prometheus_metrics(const std::vector<NiInfo>& nis, const std::vector<NiInfo>& peers,
                               const StatsReport& rep,
                               const std::function<std::string(uint32_t)>& type_name);

// JSON of the counters of an NI or peer NI (shared by nis and peers).
nlohmann::json ni_info_json(const NiInfo& i);

}  // namespace pfsnet
