// The admin commands of a pfsnet node (docs/interfaces.md "Command line"): what pfsnetd serves
// on its admin socket and, read-only, over HTTP. Each handler turns a request into calls
// on the node's parts and their typed answers into the JSON the CLI prints; the JSON
// shapes live in views.h.
//
//   nis, peers, diag_rpc, config_show, config_set, status, health, mesh, netverify, selftest,
//   selftest_last (the last sweep's result), tune, ping, fault_add, fault_list, fault_del,
//   storage, file_put, file_get
//
// Threads: handlers run on admin session threads, several at once; the parts are
// thread-safe.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/trace_context.h>

#include "admin/admin_commands.h"
#include "admin/prometheus.h"
#include "base/live_config.h"
#include "health/view.h"
#include "membership/service.h"
#include "net/net.h"
#include "probe/cluster_health_service.h"
#include "probe/mesh_service.h"
#include "probe/netverify_service.h"
#include "rpc/health_monitor.h"
#include "rpc/rpc_engine.h"
#include "stats/rpc_stats.h"
#include "storage/block_service.h"
#include "storage/tokens.h"
#include "tune/tune_service.h"

namespace pfsnet {

// The parts of a node the commands act on; all must outlive the commands.
struct NodeParts {
  Net& net;
  RpcEngine& rpc;
  RpcStats& stats;
  LiveConfig& cfg;
  Clock& clock;
  MembershipService* membership = nullptr;         // null: `status` answers "no membership"
  TuneService* tune = nullptr;                     // null: `tune` answers "no tuning service"
  HealthMonitor* health = nullptr;                 // null: no slowness counters in /metrics
  MeshService* mesh = nullptr;                     // null: `mesh` answers "no probe mesh"
  NetverifyService* netverify = nullptr;           // null: `netverify` answers "not running"
  ClusterHealthService* cluster_health = nullptr;  // null: `health` shows this node's view
  BlockService* storage = nullptr;                 // null: `storage` answers "no block service"
  TokenService* tokens = nullptr;                  // null: striped files take no write tokens
  const TlsContext* tls = nullptr;                 // null: plaintext (no certificates to watch)
};

void add_node_commands(AdminCommands& cmds, const NodeParts& node);
// route_add, route_del, route_show and routerstat (route_commands.cc).
void add_route_commands(AdminCommands& cmds, const NodeParts& node);
// nrs, nrs_set (nrs_commands.cc).
void add_nrs_commands(AdminCommands& cmds, const NodeParts& node);
// A router's figures as routerstat and /api/v1/routerstat show them.
nlohmann::json router_stats_json(const RouterStats& s);
// storage (the block server's figures), file_put and file_get (storage_commands.cc).
void add_storage_commands(AdminCommands& cmds, const NodeParts& node);
// The GPFS paper's block service rules (tune/storage_rules.h) for the `tune` command, from
// this node's [storage] settings and the request's request_size (bytes), storage_mbyte (a
// server's throughput, MB/s; default: an emulated disk's rate x its targets) and
// turnaround_ms (one block request's).
Result<nlohmann::json> storage_advice_json(const NodeParts& node, const nlohmann::json& req);

// The health view (health/view.h) over the node's parts: the one list every consumer shows.
HealthView health_view(const NodeParts& node);
// This node's own problems (its NIs, its peer NIs, its settings): what it sends to the MGS
// for everyone's `pfsnet health`.
std::vector<Problem> local_problems(const NodeParts& node);

// What /metrics shows of the node now.
MetricsSnapshot metrics_snapshot(const NodeParts& node);

// The `ping` command's arguments, each checked: nid, count 1..1000000, size 0..max_bulk,
// timeout > 0 (at most transaction_timeout), interval 0..60 s, mode echo|write|read, wait
// (a boolean).
struct PingArgs {
  Nid nid;
  int64_t count = 1, size = 0;
  double timeout_s = 0, interval_s = 0;
  std::string mode = "echo";
  std::string job_id;                 // empty: none
  std::optional<TraceContext> trace;  // none
  // Each ping waits for a peer that restarts, within its timeout (CallOptions::recover), as
  // a block write does, instead of failing after lnet.retry_count refused connects.
  bool wait = false;
};
Result<PingArgs> parse_ping_args(const nlohmann::json& req, int64_t max_bulk,
                                 int64_t transaction_timeout);

// The `tune` command's request: probe, apply, peers (NIDs), size.
Result<TuneRequest> parse_tune_request(const nlohmann::json& req);

// The `ping` command: `count` RPCs to `nid` one after another (echo, write or read),
// each reported through `emit` as it ends; a summary at the end. Stops early when the
// client goes away or the engine shuts down.
Result<nlohmann::json> run_ping(const NodeParts& node, const nlohmann::json& req,
                                const AdminEmit& emit);

// A fault rule from the `fault_add` request (drop|delay, src, dst, type, rate or
// interval, latency, health); every field checked, with the reason when refused.
Result<FaultRule> parse_fault_rule(const nlohmann::json& req, const RpcEngine& rpc);

}  // namespace pfsnet
