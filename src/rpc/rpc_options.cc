#include "rpc/rpc_options.h"

#include <algorithm>
#include <cassert>

#include "base/job_id.h"
#include "rpc/msg_types.h"

namespace pfsnet {

RpcOptions RpcOptions::from(const Config& cfg) {
  RpcOptions ro;
  ro.max_rpcs_in_flight = cfg.rpc.max_rpcs_in_flight;
  for (const auto& [nid, n] : cfg.rpc.peer_rpcs_in_flight)
    if (auto parsed = Nid::parse(nid); parsed.ok()) ro.peer_rpcs_in_flight.emplace_back(*parsed, n);
  ro.default_timeout = std::chrono::seconds(cfg.lnet.transaction_timeout);
  ro.max_bulk = static_cast<uint32_t>(cfg.max_bulk());
  ro.retry_count = cfg.lnet.retry_count;
  ro.workers = static_cast<int>(cfg.rpc.workers);
  ro.replay.window = static_cast<size_t>(cfg.rpc.reply_cache_entries);
  ro.replay.idle = std::chrono::seconds(cfg.rpc.reply_cache_idle);
  ro.ops_history.capacity = static_cast<size_t>(cfg.rpc.ops_history);
  ro.ops_history.window = std::chrono::seconds(cfg.rpc.ops_history_window);
  ro.ops_history.min_duration = std::chrono::milliseconds(cfg.rpc.ops_history_min_ms);
  ro.default_job_id = resolve_job_id(JobIdRule{cfg.rpc.jobid_var, cfg.rpc.jobid_name});
  ro.nrs_policy = parse_nrs_policy(cfg.rpc.nrs_policy).value_or(NrsPolicyKind::kFifo);
  ro.nrs.slots = static_cast<int>(cfg.rpc.nrs_slots);
  ro.nrs.idle = std::chrono::milliseconds(cfg.rpc.nrs_idle_ms);
  ro.nrs.reserve = static_cast<int>(cfg.rpc.nrs_reserve);
  ro.nrs.client_weights = cfg.rpc.nrs_client_weights;
  ro.nrs.job_weights = cfg.rpc.nrs_job_weights;
  return ro;
}

TypeNames::TypeNames() {
  for (const MsgType& t : kMsgTypes) names_[t.id] = std::string(t.name);
}

void TypeNames::define(uint32_t type, std::string name) {
  assert(msg_type_name(type).empty() || msg_type_name(type) == name);
  names_[type] = std::move(name);
}

std::string TypeNames::name(uint32_t type) const {
  auto it = names_.find(type);
  if (it != names_.end() && !it->second.empty()) return it->second;
  return "type-" + std::to_string(type);
}

uint32_t TypeNames::by_name(std::string_view name) const {
  for (const auto& [type, n] : names_)
    if (n == name) return type;
  return 0;
}

}  // namespace pfsnet
