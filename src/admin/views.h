// JSON views of the node's typed snapshots, as the admin socket, the HTTP API and the
// CLI's --json carry them (docs/interfaces.md). Only shapes here: no I/O, no locks.
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "base/live_config.h"
#include "health/view.h"
#include "membership/service.h"
#include "net/net.h"
#include "probe/health_mutes.h"
#include "probe/mesh_service.h"
#include "probe/netverify_service.h"
#include "stats/job_stats.h"
#include "tune/tune_service.h"

namespace pfsnet {

// The kernel's TCP figures of a path's connection (peers -v, JSON).
nlohmann::json tcp_kernel_info_json(const TcpKernelInfo& k);
// The counters of an NI or peer NI (shared by `nis` and `peers`).
nlohmann::json ni_info_json(const NiInfo& i);
nlohmann::json fault_json(const FaultRule& r);
// {"changed": [{"key", "from", "to"}...], "at_restart": [KEY...]}.
nlohmann::json config_applied_json(const ConfigApplied& a);
nlohmann::json config_changes_json(const std::vector<ConfigChange>& c);
// The `tune` result: peers with their measures, settings now/recommended/why, problems.
nlohmann::json tune_report_json(const TuneReport& r);
// The `status` result: {"mgs", "generation", "total", "nodes": [...], "counters": {...}}.
nlohmann::json status_table_json(const StatusTable& t);
// MGS_UPGRADE's answer, with the features between its level and target (release_level.h)
// and this build's own level.
nlohmann::json upgrade_json(const UpgradeRep& r);
// The op tracker's ops (rpc/op_tracker.h) as `pfsnet diag ops` shows them, at `now` (the
// node's clock) and `wall_now`: {"side", "xid", "type", "peer", "job", "trace", "age_ms",
// "phase", "in_phase_ms", "attempts", "detail"} and, for ended ones, "duration_ms",
// "status", "ended_unix_ms" and "events": [{"at_ms" (from its start), "what"}].
nlohmann::json ops_json(const std::vector<Op>& ops, const TypeNames& names, TimePoint now,
                        int64_t wall_now_unix_ms);

// A job statistics table's view (pfsnet diag jobs): {"top": [E...], "other": E, "kept",
// "overflow_keys", "memory_bytes"} with E = {"key", "rpcs", "bytes_in", "bytes_out",
// "exec_ms", "queue_ms", "p50_ms", "p99_ms", "first_unix_ms", "last_unix_ms", "types":
// [{"type", "rpcs", "bytes_in", "bytes_out"}]} ("other" has "keys": how many it sums).
nlohmann::json job_view_json(const JobStats::View& v, const TypeNames& names, TimePoint now,
                             int64_t wall_now_unix_ms);
nlohmann::json membership_counters_json(const MembershipCounters& c);
// The `health` result: {"node", "mgs", "nodes", "nodes_up", "problems": [{"kind",
// "subject", "cause", "since", "since_unix_ms", "seen_by", "evidence", "code", "muted"}...],
// "muted": N, "mutes": [{"cause", "subject", "until", "until_unix_ms", "sticky", "by",
// "covers", "matched", "hides", "reason"}...]}; "mgs" is "" and the node counts 0 when the
// MGS's table was not had; "mutes_error" when the mutes could not be had; "judged_at":
// "mgs" (HEALTH_LIST) or "node" (this node judged: it is the MGS, or the MGS is of a
// release before HEALTH_LIST, or could not be asked); "problems_left_off" when the list
// was longer than a HEALTH_LIST reply carries.
nlohmann::json health_json(const HealthList& h);
// The mutes' part of it: [{"cause", "subject", "until", ...}...].
nlohmann::json mutes_json(const std::vector<MuteState>& mutes);
// The `mesh` result: {"mgs", "epoch", "rows": [{"from", "updated_unix_ms", "cells": [{"to",
// "local", "peer", "sent", "lost", "rtt_count", "p50_ms", "p99_ms", "write_mib_s",
// "read_mib_s", "outlier"}...]}...], "outliers", "local": {this node's counters and
// settings}}; "outlier" is "" or why the cell stands out.
nlohmann::json mesh_json(const MeshMatrix& m, const std::vector<std::vector<MeshMark>>& marks,
                         const MeshService::Counters& c, const MeshOptions& o);

// The `netverify` result: {"node", "limits": {...}, "passed", "failed", "nodes": [{"name",
// "state", "error", "paths": [{"local", "peer", "local_if", "failed", "checks": [{"check",
// "result" (PASS|FAIL|SKIP), "detail"}...], "figures": {rtt_ms, clock_offset_ms,
// clock_error_ms, write_mib_s, read_mib_s, mtu_out, mtu_back, local_mtu, peer_mtu}}...]}...]};
// "passed"/"failed" count paths (a path fails when any check does).
nlohmann::json netverify_json(const NetverifyReport& r);

}  // namespace pfsnet
