// LiveConfig: the configuration in force in a running node, and its changes at run time
// (`pfsnet config set`, SIGHUP, `pfsnet tune --apply`, auto-tune). Which keys may change
// at run time is decided here (runtime_key); the components that act on a change
// register an Applier, called with the settings before and after.
//
// Threads: every function from any thread. Changes are serialised: appliers run one
// change at a time, under the lock, on the thread that made the change; an applier must
// not call back into this LiveConfig.
#pragma once

#include <pfsnet/config.h>
#include <pfsnet/status.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"

namespace pfsnet {

// Keys that take effect at run time: stats.*, tune.*, node.log_level,
// rpc.max_rpcs_in_flight, rpc.peer_rpcs_in_flight, lnet.credits, lnet.peer_credits, lnet.checksum,
// lnet.tx_buffer_size, lnet.rx_buffer_size, lnet.conns_per_peer (new connections),
// health.slow_ops_s, health.slow_ops_p99_factor, health.slow_ops_p99_min_s, rpc.nrs_*. Every other
// key needs a restart.
bool runtime_key(std::string_view key);

struct ConfigChange {
  std::string key, from, to;
  bool operator==(const ConfigChange&) const = default;
};

// What a change did: the run-time keys now in force, and the restart-only keys that
// changed in the file and wait for the next start.
struct ConfigApplied {
  std::vector<ConfigChange> changed;
  std::vector<std::string> at_restart;
};

// The keys whose values differ between `before` and `after` (config_entries order).
std::vector<ConfigChange> config_diff(const Config& before, const Config& after);

class LiveConfig {
 public:
  using Applier = std::function<void(const Config& before, const Config& after)>;

  explicit LiveConfig(Config initial) : cfg_(std::move(initial)) {}

  // A copy of the settings in force.
  Config get() const;
  // Reads under the lock without copying the whole Config: f(const Config&).
  template <class F>
  auto read(F&& f) const EXCLUDES(mu_) {
    MutexLock lk(mu_);
    return f(cfg_);
  }
  // REQUIRES: before the first change.
  void on_apply(Applier a) { appliers_.push_back(std::move(a)); }

  // `config set KEY=VALUE ...`: validates every assignment as the file parser does and
  // refuses restart-only keys; on any error nothing changes.
  Result<ConfigApplied> set(const std::vector<std::string>& assignments);
  // Edits a copy of the settings with `edit` and applies it like set() (restart-only
  // keys refused).
  Result<ConfigApplied> update(const std::function<void(Config&)>& edit);
  // SIGHUP: the run-time keys of `next` take effect; restart-only keys that differ are
  // listed in at_restart (and logged) and stay as they are.
  ConfigApplied reload(const Config& next);

 private:
  Result<ConfigApplied> apply_locked(const Config& next, bool refuse_restart_keys) REQUIRES(mu_);

  mutable Mutex mu_;
  Config cfg_ GUARDED_BY(mu_);
  std::vector<Applier> appliers_;  // set before the first change, then read only
};

}  // namespace pfsnet
