// pfsnetd: the pfsnet daemon. `pfsnetd --config FILE [--foreground] [--log-level L]`.
// Runs in the foreground (as systemd expects); SIGTERM or SIGINT stop it cleanly.
#include <pfsnet/buffer.h>
#include <pfsnet/config.h>
#include <pfsnet/version.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>

#include "base/heap.h"
#include "base/log.h"
#include "pfsnetd/daemon.h"

int main(int argc, char** argv) {
  CLI::App app{"pfsnetd: the pfsnet daemon (RPC fabric, statistics, admin socket)"};
  app.set_version_flag("--version", pfsnet::version_line("pfsnetd"));
  std::string config_path, level;
  bool foreground = false;
  app.add_option("--config", config_path, "TOML configuration file")->required();
  app.add_flag("--foreground", foreground, "stay in the foreground (the only mode; for systemd)");
  app.add_option("--log-level", level,
                 "trace, debug, info, warn, error or off (overrides node.log_level)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  CLI11_PARSE(app, argc, argv);
  pfsnet::keep_freed_buffers_in_heap();

  (void)pfsnet::init_logging(level.empty() ? "info" : level);
  auto cfg = pfsnet::load_config(config_path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "pfsnetd: %s\n", cfg.status().message().c_str());
    return 2;
  }
  if (cfg->nets.empty()) {
    std::fprintf(stderr, "pfsnetd: %s: no [[net]] configured: a node needs at least one NI\n",
                 config_path.c_str());
    return 2;
  }
  // Freed blocks kept for reuse (pfsnet/buffer.h): a client's pagepool turns over through
  // them, and a server's received blocks, beside what is in flight.
  pfsnet::detail::set_large_block_cache_limit(
      std::max<size_t>(256 << 20, static_cast<size_t>(cfg->storage.pagepool) + (128 << 20)));
  if (!level.empty()) cfg->node.log_level = level;
  if (pfsnet::Status s =
          pfsnet::init_logging(cfg->node.log_level, cfg->node.log_format, cfg->node.name);
      !s.ok()) {
    std::fprintf(stderr, "pfsnetd: %s\n", s.message().c_str());
    return 2;
  }
  auto key = pfsnet::load_cluster_keys(cfg->node.cluster_key_file);
  if (!key.ok()) {
    std::fprintf(stderr, "pfsnetd: %s\n", key.status().message().c_str());
    return 2;
  }

  // Signals go to sigwait below, not to any thread.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  pfsnet::Daemon daemon(std::move(*cfg), std::move(*key));
  pfsnet::Status s = daemon.start();
  if (!s.ok()) {
    std::fprintf(stderr, "pfsnetd: %s\n", s.to_string().c_str());
    return 1;
  }
  for (;;) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGTERM || sig == SIGINT) {
      PFS_LOG_INFO("pfsnetd: signal {} received, stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    }
    PFS_LOG_INFO("pfsnetd: SIGHUP received, re-reading {}", config_path);
    (void)daemon.reload(config_path);
  }
  daemon.stop();
  PFS_LOG_INFO("pfsnetd: stopped");
  return 0;
}
