#include "base/live_config.h"

#include <algorithm>
#include <map>
#include <set>

#include "base/log.h"
#include "base/mutex.h"

namespace pfsnet {

bool runtime_key(std::string_view key) {
  return key.starts_with("stats.") || key.starts_with("tune.") || key == "node.log_level" ||
         key == "node.log_format" || key == "rpc.max_rpcs_in_flight" ||
         key == "rpc.peer_rpcs_in_flight" || key == "lnet.credits" || key == "lnet.peer_credits" ||
         key == "lnet.checksum" || key == "lnet.tx_buffer_size" || key == "lnet.rx_buffer_size" ||
         key == "lnet.conns_per_peer" || key == "health.slow_ops_s" ||
         key == "health.slow_ops_p99_factor" || key == "health.slow_ops_p99_min_s" ||
         key.starts_with("rpc.nrs_");
}

std::vector<ConfigChange> config_diff(const Config& before, const Config& after) {
  // Keys repeat in [[net]] and [[emulation]] tables, and the tables may differ in number:
  // the n-th occurrence of a key is compared with the n-th occurrence on the other side.
  using Entries = std::vector<std::pair<std::string, std::string>>;
  auto occurrences = [](const Entries& e) {
    std::map<std::string, std::vector<std::string>> m;
    for (const auto& [k, v] : e) m[k].push_back(v);
    return m;
  };
  Entries a = config_entries(before), b = config_entries(after);
  auto ma = occurrences(a), mb = occurrences(b);
  std::vector<ConfigChange> out;
  std::set<std::string> done;
  for (const Entries* side : {&b, &a})
    for (const auto& [key, v] : *side) {
      if (!done.insert(key).second) continue;
      const std::vector<std::string>& va = ma[key];
      const std::vector<std::string>& vb = mb[key];
      for (size_t n = 0; n < std::max(va.size(), vb.size()); ++n) {
        std::string from = n < va.size() ? va[n] : "", to = n < vb.size() ? vb[n] : "";
        if (n >= va.size() || n >= vb.size() || from != to) out.push_back({key, from, to});
      }
    }
  return out;
}

Config LiveConfig::get() const {
  MutexLock lk(mu_);
  return cfg_;
}

Result<ConfigApplied> LiveConfig::set(const std::vector<std::string>& assignments) {
  if (assignments.empty()) return Status(Code::kInvalidArgument, "nothing to set (KEY=VALUE ...)");
  MutexLock lk(mu_);
  Config next = cfg_;
  Status s = apply_config_assignments(&next, assignments);
  if (!s.ok()) return s;
  return apply_locked(next, true);
}

Result<ConfigApplied> LiveConfig::update(const std::function<void(Config&)>& edit) {
  MutexLock lk(mu_);
  Config next = cfg_;
  edit(next);
  return apply_locked(next, true);
}

ConfigApplied LiveConfig::reload(const Config& next) {
  MutexLock lk(mu_);
  return *apply_locked(next, false);
}

Result<ConfigApplied> LiveConfig::apply_locked(const Config& next, bool refuse_restart_keys) {
  ConfigApplied out;
  for (ConfigChange& c : config_diff(cfg_, next)) {
    if (runtime_key(c.key)) {
      out.changed.push_back(std::move(c));
      continue;
    }
    if (refuse_restart_keys)
      return Status(Code::kInvalidArgument,
                    "key '" + c.key +
                        "' cannot change at run time: edit the config file and restart pfsnetd");
    if (std::find(out.at_restart.begin(), out.at_restart.end(), c.key) == out.at_restart.end())
      out.at_restart.push_back(c.key);
  }
  // What is in force: the run-time keys of `next`, everything else as it was.
  Config in_force = cfg_;
  in_force.stats = next.stats;
  in_force.tune = next.tune;
  in_force.node.log_level = next.node.log_level;
  in_force.node.log_format = next.node.log_format;
  in_force.lnet.credits = next.lnet.credits;
  in_force.lnet.peer_credits = next.lnet.peer_credits;
  in_force.lnet.checksum = next.lnet.checksum;
  in_force.lnet.tx_buffer_size = next.lnet.tx_buffer_size;
  in_force.lnet.rx_buffer_size = next.lnet.rx_buffer_size;
  in_force.lnet.conns_per_peer = next.lnet.conns_per_peer;

  in_force.rpc.max_rpcs_in_flight = next.rpc.max_rpcs_in_flight;
  in_force.rpc.peer_rpcs_in_flight = next.rpc.peer_rpcs_in_flight;
  in_force.rpc.nrs_policy = next.rpc.nrs_policy;
  in_force.rpc.nrs_slots = next.rpc.nrs_slots;
  in_force.rpc.nrs_idle_ms = next.rpc.nrs_idle_ms;
  in_force.rpc.nrs_reserve = next.rpc.nrs_reserve;
  in_force.rpc.nrs_client_weights = next.rpc.nrs_client_weights;
  in_force.rpc.nrs_job_weights = next.rpc.nrs_job_weights;
  in_force.health.slow_ops_s = next.health.slow_ops_s;
  in_force.health.slow_ops_p99_factor = next.health.slow_ops_p99_factor;
  in_force.health.slow_ops_p99_min_s = next.health.slow_ops_p99_min_s;
  for (const Applier& a : appliers_) a(cfg_, in_force);
  for (const ConfigChange& c : out.changed)
    PFS_LOG_INFO("config: {} changed from {} to {}", c.key, c.from, c.to);
  for (const std::string& k : out.at_restart)
    PFS_LOG_WARN("config: {} changed in the file; it takes effect at the next restart", k);
  cfg_ = std::move(in_force);
  return out;
}

}  // namespace pfsnet
