// The one list of `pfsnet health` (issue 70 item 7): what the rules (health/rules.h) make of
// this node's own findings and of what the MGS holds -- its table, the probe mesh's rows,
// every node's own list, the mutes -- judged at the MGS (HEALTH_LIST, judged_for) or, where
// the MGS cannot, fetched in parallel under one deadline and judged here. Every consumer
// shows what it yields: the CLI and the HTTP API (list), /metrics (on the MGS list(), all of
// it local; elsewhere scrape: the node's own findings by the same rules, no RPC), and the
// MGS's board (own_findings: what this node reports for everyone else's list). Admin only
// renders.
//
// Threads: any thread; the sources are thread-safe. list() runs each fetch on a thread of
// its own (std::async) and waits for all of them: each takes its deadline.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/status.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/live_config.h"
#include "health/rules.h"
#include "membership/service.h"
#include "net/net.h"
#include "probe/cluster_health_service.h"
#include "probe/health_list.h"
#include "probe/health_mutes.h"
#include "probe/mesh_service.h"
#include "rpc/health_monitor.h"
#include "rpc/rpc_engine.h"
#include "stats/rpc_stats.h"
#include "transport/tls.h"
#include "tune/tune_service.h"

namespace pfsnet {

// What a node's problems are found in; all must outlive the view. Null: not on this node.
struct HealthSources {
  Net& net;
  RpcEngine& rpc;
  RpcStats& stats;
  LiveConfig& cfg;
  Clock& clock;
  MembershipService* membership = nullptr;
  TuneService* tune = nullptr;
  HealthMonitor* health = nullptr;
  MeshService* mesh = nullptr;
  ClusterHealthService* cluster_health = nullptr;
  const TlsContext* tls = nullptr;
};

// What list() asks of the MGS, each within the time it is given. By default the sources'
// own calls; a test gives its own. Null: not asked.
struct HealthFetchers {
  // The list judged at the MGS for this node's own findings (HEALTH_LIST): one question
  // instead of the four below. An MGS that does not know it answers kNotFound, and the four
  // are asked. Set on a node whose MGS is another (the MGS judges with the four).
  std::function<Result<HealthListReply>(const HealthReport&, Duration)> judged;
  std::function<Result<StatusTable>(Duration)> table;
  std::function<Result<std::vector<MeshRow>>(Duration)> mesh;
  std::function<Result<std::vector<NodeProblems>>(Duration)> others;
  std::function<Result<std::vector<HealthMute>>(Duration)> mutes;
  // How the asks run. Null: each on a thread of its own, all at once, list() waiting for
  // them all. The in-process cluster runs them one after another on the thread that drives
  // it (rpc/waiter.h: a wait there drives the cluster, and only that thread may).
  std::function<void(const std::vector<std::function<void()>>&)> run;
};

// The MGS's table in brief, as `pfsnet health` shows it.
struct TableSummary {
  Nid mgs;
  size_t nodes = 0, up = 0;
};

// The cluster's problems as this node sees them, ready to render.
struct HealthList {
  std::string node;
  std::optional<TableSummary> table;  // none: not had
  std::vector<Problem> problems;      // judge()'s, the muted ones marked
  size_t left_off = 0;                // more than a HEALTH_LIST reply carries, not listed
  std::vector<MuteState> mutes;       // the cluster's mutes, with what each covers now
  bool mgs_ok = false;                // the MGS was asked, and answered
  bool judged_at_mgs = false;         // judged there (HEALTH_LIST); false: on this node
  std::string mutes_error;            // why the mutes could not be had ("": they could)
};

class HealthView {
 public:
  explicit HealthView(const HealthSources& s) : HealthView(s, fetchers_of(s)) {}
  HealthView(const HealthSources& s, HealthFetchers f) : s_(s), f_(std::move(f)) {}
  // The sources' own calls: the MGS's table, mesh rows, board and mutes, where this node
  // has an MGS (and a mesh, a cluster-health service).
  static HealthFetchers fetchers_of(const HealthSources& s);

  // This node's own findings' inputs now, from its NIs and peers as the caller took them.
  ProblemInputs own_inputs(std::vector<NiInfo> nis, std::vector<NiInfo> peers) const;
  // This node's own findings: what it reports to the MGS.
  std::vector<Problem> own_findings() const;
  // The cluster's list: judged at the MGS (one question, within `deadline`), or -- this
  // node the MGS, or the MGS of a release before HEALTH_LIST -- the four fetches at once,
  // each within `deadline`, then judged here.
  HealthList list(Duration deadline) const;
  // On the MGS: the list for the node that sent `asker` (its own findings), judged from what
  // the MGS holds (the four fetches, local there) -- HEALTH_LIST's answer.
  HealthList judged_for(const HealthReport& asker, Duration deadline) const;
  // A node's list without an RPC (a scrape, on a node that is not the MGS): its own findings
  // from `nis` and `peers`, judged by the same rules, the mutes as last learnt. (The MGS's
  // scrape is list(): everything it is judged from is the MGS's own.)
  std::vector<Problem> scrape(std::vector<NiInfo> nis, std::vector<NiInfo> peers) const;

 private:
  struct Fetched;
  // The four fetches at once, each within `deadline`.
  Fetched fetch(Duration deadline) const;
  // judge() over `in` and what was fetched, the mutes applied.
  HealthList finish(ClusterInputs in, Fetched got) const;

  HealthSources s_;
  HealthFetchers f_;
};

// Serves HEALTH_LIST on the MGS: each request judged by a view `view()` makes (a worker
// runs it). REQUIRES: this node is an MGS; before any traffic; what `view` uses outlives
// the engine's handlers.
void serve_health_list(RpcEngine& rpc, std::function<HealthView()> view);
HealthListReply health_list_reply(const HealthList& l);

}  // namespace pfsnet
