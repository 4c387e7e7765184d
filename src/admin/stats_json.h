// The JSON of `pfsnet diag rpc --json` (docs/interfaces.md), built from a StatsReport, and the
// parsing of its arguments. Shared by the admin socket and, later, the HTTP API.
// Thread safety: pure functions.
#pragma once

#include <pfsnet/status.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "stats/rpc_stats.h"

namespace pfsnet {

// Names a node key (packed NID) or a message type for display.
using NodeNamer = std::function<std::string(const Nid& node)>;
using TypeNamer = std::function<std::string(uint32_t type)>;

// {"dropped": {...}, "nodes": [...], "sizes": [...], "messages": [...]}; only the lists
// the query asked for. Milliseconds are rounded to 3 decimals (1 us). Every interval
// with a count carries "p50_ms" and "p99_ms" of that interval.
nlohmann::json stats_report_json(const StatsReport& rep, const StatsQuery& q,
                                 const NodeNamer& node_name, const NodeNamer& node_nid,
                                 const TypeNamer& type_name);

// Parses the request {"what": "node"|"size"|"message"|"all", "node": NID?,
// "interval": "60s"?} into a query; `resolve` maps a node argument to its key.
Result<StatsQuery> parse_stats_query(const nlohmann::json& req,
                                     const std::function<Result<Nid>(const std::string&)>& resolve);

}  // namespace pfsnet
