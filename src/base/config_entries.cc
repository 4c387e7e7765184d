// The running config as key = value entries (pfsnet config show), and `config set`: the
// entries re-rendered with the assignments in them, parsed like a config file.
#include <fmt/format.h>
#include <pfsnet/config.h>
#include <toml++/toml.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace pfsnet {

std::vector<std::pair<std::string, std::string>> config_entries(const Config& c) {
  // A TOML basic string: quotes, backslashes and control characters escaped, so the
  // rendering parses back to the same value (config set re-parses it; found by
  // fuzz/config_fuzz, which saw "a\\b" come back as "a\b").
  auto str = [](const std::string& v) {
    std::string out = "\"";
    for (unsigned char ch : v) {
      if (ch == '"' || ch == '\\') {
        out += '\\';
        out += static_cast<char>(ch);
      } else if (ch < 0x20 || ch == 0x7f) {
        out += fmt::format("\\u{:04X}", ch);
      } else {
        out += static_cast<char>(ch);
      }
    }
    return out + "\"";
  };
  auto list = [&](const std::vector<std::string>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + str(v[i]);
    return s + "]";
  };
  std::vector<std::string> mgs;
  for (const Nid& n : c.node.mgs) mgs.push_back(n.to_string());
  std::vector<std::pair<std::string, std::string>> e = {
      {"node.name", str(c.node.name)},
      {"node.roles", list(c.node.roles)},
      {"node.mgs", list(mgs)},
      {"node.cluster_key_file", str(c.node.cluster_key_file)},
      {"node.admin_socket", str(c.node.admin_socket)},
      {"node.http", str(c.node.http)},
      {"node.http_token_file", str(c.node.http_token_file)},
      {"node.log_level", str(c.node.log_level)},
      {"node.log_format", str(c.node.log_format)},
  };
  for (const NetConfig& n : c.nets) {
    e.emplace_back("net.nid", str(n.nid.to_string()));
    e.emplace_back("net.port", std::to_string(n.port));
    e.emplace_back("net.speed_mbit", std::to_string(n.speed_mbit));
    if (!n.nid.is_verbs()) continue;
    e.emplace_back("net.provider", str(n.provider));
    e.emplace_back("net.domain", str(n.domain));
    e.emplace_back("net.rx_depth", std::to_string(n.rx_depth));
    e.emplace_back("net.msg_size", std::to_string(n.msg_size));
  }
  auto i = [](int64_t v) { return std::to_string(v); };
  // Shortest text that reads back as the same double (and as a TOML float).
  auto num = [](double v) {
    char b[32] = "";
    // A whole number as one ("30.0", not the shortest "%g" form "3e+01").
    if (v == static_cast<double>(static_cast<int64_t>(v)) && std::abs(v) < 1e15) {
      std::snprintf(b, sizeof(b), "%.1f", v);
      return std::string(b);
    }
    for (int p = 1; p <= 17; ++p) {
      std::snprintf(b, sizeof(b), "%.*g", p, v);
      if (std::strtod(b, nullptr) == v) break;
    }
    std::string t = b;
    if (t.find_first_of(".en") == std::string::npos) t += ".0";
    return t;
  };
  auto peer_table = [&](const std::map<std::string, int64_t>& m) {
    std::string t = "{";
    for (const auto& [nid, n] : m) t += (t.size() > 1 ? ", " : " ") + str(nid) + " = " + i(n);
    return t + (m.empty() ? "}" : " }");
  };
  std::vector<std::pair<std::string, std::string>> rest = {
      {"tls.enabled", c.tls.enabled ? "true" : "false"},
      {"tls.cert_file", str(c.tls.cert_file)},
      {"tls.key_file", str(c.tls.key_file)},
      {"tls.ca_file", str(c.tls.ca_file)},
      {"tls.records", str(c.tls.records)},
      {"lnet.credits", i(c.lnet.credits)},
      {"lnet.peer_credits", i(c.lnet.peer_credits)},
      {"lnet.transaction_timeout", i(c.lnet.transaction_timeout)},
      {"lnet.retry_count", i(c.lnet.retry_count)},
      {"lnet.health_sensitivity", i(c.lnet.health_sensitivity)},
      {"lnet.recovery_interval", i(c.lnet.recovery_interval)},
      {"lnet.min_reconnect_ms", i(c.lnet.min_reconnect_ms)},
      {"lnet.max_reconnect_ms", i(c.lnet.max_reconnect_ms)},
      {"lnet.busy_poll_us", i(c.lnet.busy_poll_us)},
      {"lnet.checksum", c.lnet.checksum ? "true" : "false"},
      {"lnet.tx_buffer_size", i(c.lnet.tx_buffer_size)},
      {"lnet.rx_buffer_size", i(c.lnet.rx_buffer_size)},
      {"lnet.conns_per_peer", i(c.lnet.conns_per_peer)},
      {"lnet.io_threads", i(c.lnet.io_threads)},
      {"lnet.zc_min_payload", i(c.lnet.zc_min_payload)},
      {"lnet.routing", c.lnet.routing ? "true" : "false"},
      {"lnet.tiny_router_buffers", i(c.lnet.tiny_router_buffers)},
      {"lnet.small_router_buffers", i(c.lnet.small_router_buffers)},
      {"lnet.large_router_buffers", i(c.lnet.large_router_buffers)},
      {"lnet.peer_buffer_credits", i(c.lnet.peer_buffer_credits)},
      {"lnet.router_ping_interval", i(c.lnet.router_ping_interval)},
      {"lnet.router_ping_timeout", i(c.lnet.router_ping_timeout)},
      {"lnet.avoid_asym_router_failure", c.lnet.avoid_asym_router_failure ? "true" : "false"},
      {"rpc.max_rpcs_in_flight", i(c.rpc.max_rpcs_in_flight)},
      {"rpc.peer_rpcs_in_flight", peer_table(c.rpc.peer_rpcs_in_flight)},
      {"rpc.workers", i(c.rpc.workers)},
      {"rpc.reply_cache_entries", i(c.rpc.reply_cache_entries)},
      {"rpc.reply_cache_idle", i(c.rpc.reply_cache_idle)},
      {"rpc.ops_history", i(c.rpc.ops_history)},
      {"rpc.ops_history_window", i(c.rpc.ops_history_window)},
      {"rpc.ops_history_min_ms", i(c.rpc.ops_history_min_ms)},
      {"rpc.jobid_var", str(c.rpc.jobid_var)},
      {"rpc.jobid_name", str(c.rpc.jobid_name)},
      {"rpc.nrs_policy", str(c.rpc.nrs_policy)},
      {"rpc.nrs_slots", i(c.rpc.nrs_slots)},
      {"rpc.nrs_idle_ms", i(c.rpc.nrs_idle_ms)},
      {"rpc.nrs_reserve", i(c.rpc.nrs_reserve)},
      {"rpc.nrs_client_weights", peer_table(c.rpc.nrs_client_weights)},
      {"rpc.nrs_job_weights", peer_table(c.rpc.nrs_job_weights)},
      {"stats.rpcPerfRawStatBufferSize", i(c.stats.rpcPerfRawStatBufferSize)},
      {"stats.rpcPerfRawExecBufferSize", i(c.stats.rpcPerfRawExecBufferSize)},
      {"stats.rpcPerfNumberSecondIntervals", i(c.stats.rpcPerfNumberSecondIntervals)},
      {"stats.rpcPerfNumberMinuteIntervals", i(c.stats.rpcPerfNumberMinuteIntervals)},
      {"stats.rpcPerfNumberHourIntervals", i(c.stats.rpcPerfNumberHourIntervals)},
      {"stats.rpcPerfNumberDayIntervals", i(c.stats.rpcPerfNumberDayIntervals)},
      {"stats.maxBlockSize", i(c.stats.maxBlockSize)},
      {"stats.job_stats", c.stats.job_stats ? "true" : "false"},
      {"stats.job_stats_max", i(c.stats.job_stats_max)},
      {"stats.job_cleanup_interval", i(c.stats.job_cleanup_interval)},
      {"stats.metrics_top_jobs", i(c.stats.metrics_top_jobs)},
      {"membership.client_ping_interval", i(c.membership.client_ping_interval)},
      {"membership.server_ping_interval", i(c.membership.server_ping_interval)},
      {"membership.ping_miss_limit", i(c.membership.ping_miss_limit)},
      {"membership.heard_from_reports", c.membership.heard_from_reports ? "true" : "false"},
      {"membership.notify_rate", i(c.membership.notify_rate)},
      {"membership.notify_relay_fanout", i(c.membership.notify_relay_fanout)},
      {"membership.notify_relay_above", i(c.membership.notify_relay_above)},
      {"membership.unreachable_reports", c.membership.unreachable_reports ? "true" : "false"},
      {"membership.verify_timeout", i(c.membership.verify_timeout)},
      {"membership.etcd", list(c.membership.etcd)},
      {"membership.etcd_lease", i(c.membership.etcd_lease)},
      {"membership.etcd_key", str(c.membership.etcd_key)},
      {"membership.state_dir", str(c.membership.state_dir)},
      {"health.slowness", c.health.slowness ? "true" : "false"},
      {"health.slow_factor", num(c.health.slow_factor)},
      {"health.slow_min_excess_ms", num(c.health.slow_min_excess_ms)},
      {"health.loss_ratio", num(c.health.loss_ratio)},
      {"health.degraded_penalty", i(c.health.degraded_penalty)},
      {"health.quiet_bytes", i(c.health.quiet_bytes)},
      {"health.report_interval", num(c.health.report_interval)},
      {"health.cpu_starved_ms", num(c.health.cpu_starved_ms)},
      {"health.slow_ops_s", num(c.health.slow_ops_s)},
      {"health.slow_ops_p99_factor", num(c.health.slow_ops_p99_factor)},
      {"health.slow_ops_p99_min_s", num(c.health.slow_ops_p99_min_s)},
      {"mesh.enabled", c.mesh.enabled ? "true" : "false"},
      {"mesh.peers", i(c.mesh.peers)},
      {"mesh.interval", num(c.mesh.interval)},
      {"mesh.bulk_interval", num(c.mesh.bulk_interval)},
      {"mesh.bulk_bytes", i(c.mesh.bulk_bytes)},
      {"mesh.rotate_interval", i(c.mesh.rotate_interval)},
      {"mesh.report_interval", num(c.mesh.report_interval)},
      {"mesh.mgs_sync_rate", i(c.mesh.mgs_sync_rate)},
      {"mesh.outlier_factor", num(c.mesh.outlier_factor)},
      {"mesh.outlier_min_excess_ms", num(c.mesh.outlier_min_excess_ms)},
      {"mesh.throttled_min_excess_ms", num(c.mesh.throttled_min_excess_ms)},
      {"mesh.loss_ratio", num(c.mesh.loss_ratio)},
      {"mesh.window", i(c.mesh.window)},
      {"tune.auto", c.tune.auto_tune ? "true" : "false"},
      {"tune.interval", num(c.tune.interval)},
      {"tune.check_interval", i(c.tune.check_interval)},
      {"tune.min_rpcs_in_flight", i(c.tune.min_rpcs_in_flight)},
      {"tune.max_rpcs_in_flight", i(c.tune.max_rpcs_in_flight)},
      {"tune.min_peer_credits", i(c.tune.min_peer_credits)},
      {"tune.max_peer_credits", i(c.tune.max_peer_credits)},
      {"tune.max_credits", i(c.tune.max_credits)},
      {"tune.link_mbit", num(c.tune.link_mbit)},
      {"storage.targets", list(c.storage.targets)},
      {"storage.block_size", i(c.storage.block_size)},
      {"storage.buffers", i(c.storage.buffers)},
      {"storage.threads", i(c.storage.threads)},
      {"storage.disk_mbyte", num(c.storage.disk_mbyte)},
      {"storage.capacity", i(c.storage.capacity)},
      {"storage.pagepool", i(c.storage.pagepool)},
      {"storage.prefetch_depth", i(c.storage.prefetch_depth)},
      {"storage.tokens", c.storage.tokens ? "true" : "false"},
  };
  e.insert(e.end(), rest.begin(), rest.end());
  for (const EmulationConfig& m : c.emulation) {
    e.emplace_back("emulation.ni", str(m.ni));
    e.emplace_back("emulation.peer", str(m.peer));
    e.emplace_back("emulation.delay_ms", num(m.delay_ms));
    e.emplace_back("emulation.rate_mbit", num(m.rate_mbit));
    e.emplace_back("emulation.shared", m.shared ? "true" : "false");
  }
  for (const RouteConfig& r : c.routes) {
    e.emplace_back("route.net", str(lnet_net_name(r.net)));
    e.emplace_back("route.gateway", str(r.gateway.to_string()));
    e.emplace_back("route.hops", i(r.hops));
    e.emplace_back("route.priority", i(r.priority));
  }
  return e;
}

Status apply_config_assignments(Config* cfg, const std::vector<std::string>& assignments) {
  // Re-render the current values, then each assignment replaces its key; the result is
  // parsed exactly like a config file.
  std::vector<std::pair<std::string, std::string>> entries = config_entries(*cfg);
  for (const std::string& a : assignments) {
    auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status(Code::kInvalidArgument, "'" + a + "': expected KEY=VALUE");
    std::string key = a.substr(0, eq), value = a.substr(eq + 1);
    while (!key.empty() && key.back() == ' ') key.pop_back();
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    try {
      (void)toml::parse("v = " + value);
    } catch (const toml::parse_error&) {
      return Status(Code::kInvalidArgument,
                    "key '" + key + "': '" + value + "' is not a TOML value (strings need quotes)");
    }
    if (key.rfind("net.", 0) == 0 || key.rfind("emulation.", 0) == 0 || key.rfind("route.", 0) == 0)
      return Status(Code::kInvalidArgument,
                    "key '" + key +
                        "': [[net]], [[emulation]] and [[route]] tables are set in the config "
                        "file (routes at run time: pfsnet route add)");
    bool found = false;
    for (auto& [k, v] : entries)
      if (k == key) {
        v = value;
        found = true;
      }
    if (!found) return Status(Code::kInvalidArgument, "key '" + key + "': unknown key");
  }
  std::string text, section;
  for (const auto& [k, v] : entries) {
    std::string sec = k.substr(0, k.find('.')), name = k.substr(k.find('.') + 1);
    if (sec == "net" || sec == "emulation" || sec == "route") {
      if (name == (sec == "net" ? "nid" : sec == "route" ? "net" : "ni"))
        text += "[[" + sec + "]]\n";
      section.clear();
    } else if (sec != section) {
      text += "[" + sec + "]\n";
      section = sec;
    }
    text += name + " = " + v + "\n";
  }
  auto parsed = parse_config(text, "config set");
  if (!parsed.ok()) {
    // "config set:LINE: key 'x.y': reason" -> "key 'x.y': reason"
    std::string m = parsed.status().message();
    auto k = m.find("key '");
    return Status(Code::kInvalidArgument, k == std::string::npos ? m : m.substr(k));
  }
  *cfg = std::move(*parsed);
  return Status::Ok();
}

}  // namespace pfsnet
