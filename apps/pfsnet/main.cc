// pfsnet: the operator's command-line tool. Talks to the local pfsnetd over its admin
// socket (--socket, or PFSNET_SOCKET, default /run/pfsnet/pfsnetd.sock).
// Exit status: 0 success, 1 the operation ran but failed (e.g. a ping got no reply),
// 2 a bad argument or no daemon.
#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>

#include "admin/admin_client.h"
#include "base/nid.h"
#include "selftest/selftest.h"

using nlohmann::json;

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "pfsnet: %s\n", msg.c_str());
  return 2;
}

std::string fmt_ms(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f", v);
  return b;
}

std::string human_bytes(uint64_t v) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double d = double(v);
  int i = 0;
  while (d >= 1024 && i < 4) {
    d /= 1024;
    ++i;
  }
  char b[32];
  std::snprintf(b, sizeof(b), i ? "%.1f%s" : "%.0f%s", d, u[i]);
  return b;
}

int keygen(const std::string& path, bool json_out) {
  unsigned char key[32];
  if (RAND_bytes(key, sizeof(key)) != 1) return fail("cannot get random bytes");
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return fail("cannot create " + path + ": " + std::strerror(errno) + " (it must not exist)");
  bool ok = write(fd, key, sizeof(key)) == static_cast<ssize_t>(sizeof(key));
  fchmod(fd, 0600);
  close(fd);
  if (!ok) return fail("cannot write " + path);
  if (json_out)
    std::cout << json{{"path", path}, {"bytes", 32}, {"mode", "0600"}}.dump() << "\n";
  else
    std::printf("wrote a 32-byte cluster key to %s (mode 0600); copy it to every node\n",
                path.c_str());
  return 0;
}

std::string utc(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

// Calls f(kind, name, nid, statistic, stat-json) for every statistic of a diag rpc reply.
void for_each_stat(
    const json& r,
    const std::function<void(const std::string&, const std::string&, const std::string&,
                             const std::string&, const json&)>& f) {
  // In the order GPFS lists them.
  static const char* kNodeStats[] = {"channel_wait",     "send_time_tcp", "send_time_verbs",
                                     "receive_time_tcp", "latency_tcp",   "latency_verbs",
                                     "latency_mixed"};
  for (const json& n : r.value("nodes", json::array()))
    for (const char* k : kNodeStats)
      if (n["stats"].contains(k)) f("node", n["node"], n["nid"], k, n["stats"][k]);
  for (const json& s : r.value("sizes", json::array()))
    f("size",
      std::to_string(s["low"].get<uint64_t>()) + "-" + std::to_string(s["high"].get<uint64_t>()),
      "", "latency", s["latency"]);
  for (const json& m : r.value("messages", json::array()))
    f("message", m["type"], "", "execution", m["execution"]);
}

constexpr const char* kGranularities[] = {"second", "minute", "hour", "day"};

void print_diag_rpc(const json& r) {
  std::printf(
      "RPC statistics: average, minimum and maximum in milliseconds, and count, per interval\n");
  std::printf("raw records dropped: stat %llu, exec %llu\n",
              r["dropped"]["stat"].get<unsigned long long>(),
              r["dropped"]["exec"].get<unsigned long long>());
  std::string last_owner;
  for_each_stat(r, [&](const std::string& kind, const std::string& name, const std::string& nid,
                       const std::string& stat, const json& v) {
    std::string owner = kind + " " + name + (nid.empty() || nid == name ? "" : " (" + nid + ")");
    if (owner != last_owner) {
      std::printf("\n%s %s\n", kind == "size" ? "size range" : kind.c_str(),
                  (name + (nid.empty() || nid == name ? "" : " (" + nid + ")")).c_str());
      last_owner = owner;
    }
    std::printf("  %s\n", stat.c_str());
    for (const char* g : kGranularities) {
      if (!v.contains(g)) continue;
      for (const json& i : v[g]) {
        std::printf("    %-6s %s  avg/min/max = %9s/%9s/%9s  cnt = %lld", g,
                    utc(i["start"].get<int64_t>()).c_str(),
                    fmt_ms(i["avg_ms"].get<double>()).c_str(),
                    fmt_ms(i["min_ms"].get<double>()).c_str(),
                    fmt_ms(i["max_ms"].get<double>()).c_str(), i["count"].get<long long>());
        if (i.contains("p50_ms"))
          std::printf("\n    %-6s %20s  p50 = %s  p99 = %s", "", "",
                      fmt_ms(i["p50_ms"].get<double>()).c_str(),
                      fmt_ms(i["p99_ms"].get<double>()).c_str());
        std::printf("\n");
      }
    }
  });
}

void print_diag_rpc_y(const json& r) {
  std::printf(
      "pfsnet:diag_rpc:HEADER:version:reserved:reserved:kind:name:nid:statistic:granularity:"
      "start:count:avgMs:minMs:maxMs:\n");
  for_each_stat(r, [&](const std::string& kind, const std::string& name, const std::string& nid,
                       const std::string& stat, const json& v) {
    for (const char* g : kGranularities) {
      if (!v.contains(g)) continue;
      for (const json& i : v[g])
        std::printf("pfsnet:diag_rpc:0:1:::%s:%s:%s:%s:%s:%lld:%lld:%s:%s:%s:\n", kind.c_str(),
                    name.c_str(), nid.c_str(), stat.c_str(), g, i["start"].get<long long>(),
                    i["count"].get<long long>(), fmt_ms(i["avg_ms"].get<double>()).c_str(),
                    fmt_ms(i["min_ms"].get<double>()).c_str(),
                    fmt_ms(i["max_ms"].get<double>()).c_str());
    }
  });
}

// An aligned table within 100 columns; -v adds the errors by kind, timeouts, drops,
// connections and (peers) every NID the peer announced.
void print_ni_table(const json& list, const char* title, bool verbose) {
  std::printf("%-20s %-5s %6s %9s %5s %6s %8s %8s %8s %8s %6s\n", title, "state", "health",
              "credits", "min", "queued", "sent", "sent", "recv", "recv", "errors");
  for (const json& n : list) {
    uint64_t errs = 0;
    for (auto& [k, v] : n["errors"].items()) errs += v.get<uint64_t>();
    std::string credits = std::to_string(n["credits"].get<long long>()) + "/" +
                          std::to_string(n["credits_max"].get<long long>());
    std::printf("%-20s %-5s %6d %9s %5lld %6lld %8llu %8s %8llu %8s %6llu\n",
                n["nid"].get<std::string>().c_str(), n["state"].get<std::string>().c_str(),
                n["health"].get<int>(), credits.c_str(), n["credits_min"].get<long long>(),
                n["queued"].get<long long>(), n["send_count"].get<unsigned long long>(),
                human_bytes(n["send_bytes"].get<uint64_t>()).c_str(),
                n["recv_count"].get<unsigned long long>(),
                human_bytes(n["recv_bytes"].get<uint64_t>()).c_str(),
                static_cast<unsigned long long>(errs));
    if (!verbose) continue;
    std::printf("    last state change %s (%s s ago)\n",
                n["last_change"].get<std::string>().c_str(),
                fmt_ms(n["since_change_s"].get<double>()).c_str());
    if (n["next_recovery_s"].get<double>() >= 0)
      std::printf("    in recovery: %d ping(s) unanswered, next in %s s\n",
                  n["recovery_pings"].get<int>(),
                  fmt_ms(n["next_recovery_s"].get<double>()).c_str());
    std::printf(
        "    connections %lld, resends %llu, timeouts local %llu remote %llu, "
        "drops %llu, faults %llu\n",
        n["connections"].get<long long>(), n["resends"].get<unsigned long long>(),
        n["local_timeouts"].get<unsigned long long>(),
        n["remote_timeouts"].get<unsigned long long>(), n["drops"].get<unsigned long long>(),
        n["faults"].get<unsigned long long>());
    if (n.contains("peer_nids")) {
      std::string nids;
      for (const json& x : n["peer_nids"]) nids += (nids.empty() ? "" : " ") + x.get<std::string>();
      std::printf("    peer %s, NIDs: %s\n", n["peer"].get<std::string>().c_str(), nids.c_str());
    }
    for (auto& [k, v] : n["errors"].items())
      std::printf("    %-28s %llu\n", k.c_str(), v.get<unsigned long long>());
  }
}

// "64K", "1M", "4096" -> bytes; nullopt when malformed.
std::optional<int64_t> size_with_unit(const std::string& text) {
  try {
    size_t used = 0;
    int64_t size = std::stoll(text, &used);
    std::string unit = text.substr(used);
    if (size < 0) return std::nullopt;
    if (unit == "K" || unit == "k") return size << 10;
    if (unit == "M" || unit == "m") return size << 20;
    if (unit.empty()) return size;
  } catch (...) {
  }
  return std::nullopt;
}

void print_tune(const json& r) {
  std::printf("%-22s %9s %11s %10s %10s %6s %12s\n", "peer", "RTT ms", "bw MiB/s", "BDP MiB",
              "now MiB/s", "RPCs", "ceiling MiB/s");
  for (const json& p : r["peers"])
    std::printf("%-22s %9.3f %11.1f %10.2f %10.1f %6lld %12.1f\n",
                p["peer"].get<std::string>().c_str(), p["rtt_ms"].get<double>(),
                p["bandwidth_mib_s"].get<double>(), p["bdp_mib"].get<double>(),
                p["throughput_mib_s"].get<double>(), p["rpcs_needed"].get<long long>(),
                p["ceiling_mib_s"].get<double>());
  if (r["peers"].empty()) std::printf("no peers\n");
  for (const json& p : r["peers"]) {
    std::printf("  %s: RTT from %s; bandwidth from %s\n", p["peer"].get<std::string>().c_str(),
                p["rtt_source"].get<std::string>().empty()
                    ? "nowhere (no RPCs yet)"
                    : p["rtt_source"].get<std::string>().c_str(),
                p["bandwidth_source"].get<std::string>().empty()
                    ? "nowhere (no traffic; try --probe)"
                    : p["bandwidth_source"].get<std::string>().c_str());
  }
  for (const auto& [peer, err] : r["probe_errors"].items())
    std::printf("  probe of %s failed: %s\n", peer.c_str(), err.get<std::string>().c_str());
  std::printf("\n%-20s %8s %12s  %s\n", "setting", "now", "recommended", "why");
  for (const char* k : {"max_rpcs_in_flight", "peer_credits", "credits"}) {
    const json& s = r["settings"][k];
    std::printf("%-20s %8lld %12lld  %s\n", k, s["current"].get<long long>(),
                s["recommended"].get<long long>(), s["why"].get<std::string>().c_str());
  }
  if (!r["problems"].empty()) std::printf("\nwhat is wrong now:\n");
  for (const json& p : r["problems"]) std::printf("  - %s\n", p["text"].get<std::string>().c_str());
  if (r.contains("applied")) {
    std::printf("\napplied:\n");
    for (const json& c : r["applied"])
      std::printf("  %s: %s -> %s\n", c["key"].get<std::string>().c_str(),
                  c["from"].get<std::string>().c_str(), c["to"].get<std::string>().c_str());
    if (r["applied"].empty()) std::printf("  nothing changed\n");
  } else if (r["settings"]["max_rpcs_in_flight"]["current"] !=
                 r["settings"]["max_rpcs_in_flight"]["recommended"] ||
             r["settings"]["peer_credits"]["current"] !=
                 r["settings"]["peer_credits"]["recommended"] ||
             r["settings"]["credits"]["current"] != r["settings"]["credits"]["recommended"]) {
    std::printf("\npfsnet tune --apply sets the recommended values now\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pfsnet: operate and observe a pfsnet cluster through the local pfsnetd"};
  app.require_subcommand(1);
  const char* env = std::getenv("PFSNET_SOCKET");
  std::string socket = env && *env ? env : "/run/pfsnet/pfsnetd.sock";
  app.add_option("--socket", socket, "admin socket of the local pfsnetd (env PFSNET_SOCKET)");

  // ping
  auto* ping = app.add_subcommand("ping", "RPC round trips to a NID through the local daemon");
  std::string nid_text;
  int64_t count = 4, size = 0;
  double timeout = 5;
  bool json_out = false;
  ping->add_option("NID", nid_text, "target, e.g. 127.0.0.3@tcp")->required();
  ping->add_option("--count,-c", count, "round trips (default 4)")
      ->check(CLI::Range(int64_t(1), int64_t(1000000)));
  ping->add_option("--size,-s", size, "bulk bytes sent and echoed back (default 0)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  ping->add_option("--timeout", timeout, "seconds to wait for each reply (default 5)")
      ->check(CLI::PositiveNumber);
  std::string mode = "echo";
  ping->add_option("--mode", mode,
                   "echo: PING carries --size bytes both ways (default); write: BRW_WRITE "
                   "sends them; read: BRW_READ fetches them")
      ->check(CLI::IsMember({"echo", "write", "read"}));
  double interval = 0;
  ping->add_option("--interval,-i", interval, "seconds between round trips (default 0)")
      ->check(CLI::Range(0.0, 60.0));
  ping->add_flag("--json", json_out, "print the summary as JSON");

  auto* keygen_cmd =
      app.add_subcommand("keygen", "write a new random 32-byte cluster key (mode 0600)");
  std::string key_path;
  keygen_cmd->add_option("FILE", key_path, "where to write the key; must not exist")->required();
  keygen_cmd->add_flag("--json", json_out, "print JSON");

  auto* diag = app.add_subcommand("diag", "daemon diagnostics");
  diag->require_subcommand(1);
  auto* diag_rpc = diag->add_subcommand(
      "rpc", "RPC statistics, like mmdiag --rpc: [node[=NAME]|size|message|all] [N{s|m|h|d}]");
  std::vector<std::string> diag_args;
  bool colon = false;
  diag_rpc->add_option("ARGS", diag_args,
                       "node (default), node=NID, size, message or all; and/or 60s, 5m, 2h, 30d");
  diag_rpc->add_flag("-Y", colon, "colon-separated rows with a header row");
  diag_rpc->add_flag("--json", json_out, "print JSON");

  auto* config = app.add_subcommand("config", "the daemon's effective settings");
  config->require_subcommand(1);
  auto* config_show =
      config->add_subcommand("show", "every setting and whether it can change at run time");
  config_show->add_flag("--json", json_out, "print JSON");
  auto* config_set =
      config->add_subcommand("set", "change settings at run time where the key allows it");
  std::vector<std::string> assignments;
  config_set->add_option("KEY=VALUE", assignments, "e.g. stats.rpcPerfNumberSecondIntervals=120")
      ->required();
  config_set->add_flag("--json", json_out, "print JSON");

  bool verbose = false;
  auto* nis = app.add_subcommand("nis", "local NIs: state, credits, counters");
  nis->add_flag("--json", json_out, "print JSON");
  nis->add_flag("-v,--verbose", verbose,
                "also last state change, recovery, resends, timeouts, drops, errors by kind");
  auto* peers = app.add_subcommand("peers", "peer NIs: state, credits, counters");
  peers->add_flag("--json", json_out, "print JSON");
  peers->add_flag("-v,--verbose", verbose,
                  "also last state change, recovery, resends, timeouts, errors by kind, NIDs");

  auto* status = app.add_subcommand("status",
                                    "the MGS's table of every node (asked through the "
                                    "local daemon): name, roles, NIDs, state, last heard");
  status->add_flag("--json", json_out, "print JSON");

  auto* selftest = app.add_subcommand(
      "selftest", "lnet_selftest-style test from a group of clients to a group of servers");
  std::vector<std::string> st_groups;
  std::string st_from, st_to, st_test = "brw", st_mode = "write", st_size = "1M",
                              st_conc = "1,2,4,8", st_dist = "1:1", st_plot;
  double st_duration = 5, st_link = 0;
  bool st_csv = false;
  selftest->add_option("--group", st_groups, "NAME=NID,NID,... (repeat for each group)");
  selftest->add_option("--from", st_from, "clients: a group name or NID,NID,...")->required();
  selftest->add_option("--to", st_to, "servers: a group name or NID,NID,...")->required();
  selftest->add_option("--test", st_test, "ping or brw (default brw)")
      ->check(CLI::IsMember({"ping", "brw"}));
  selftest->add_option("--mode", st_mode, "brw: write (default) or read")
      ->check(CLI::IsMember({"write", "read"}));
  selftest->add_option("--size", st_size, "bytes per RPC, with K or M (default 1M)");
  selftest->add_option("--concurrency", st_conc,
                       "RPCs in flight per client: 1,2,4 or a sweep 1-256 (powers of two)");
  selftest->add_option("--distribute", st_dist, "1:1 (default) or 1:N")
      ->check(CLI::IsMember({"1:1", "1:N"}));
  selftest->add_option("--duration", st_duration, "seconds per step (default 5)")
      ->check(CLI::Range(0.1, 3600.0));
  selftest->add_option("--link-mbit", st_link, "link rate per client for the theory column");
  selftest->add_flag("--json", json_out, "print JSON");
  selftest->add_flag("--csv", st_csv, "print CSV");
  selftest->add_option("--plot", st_plot, "write an SVG chart of throughput and theory");

  auto* tune = app.add_subcommand(
      "tune",
      "per peer: measured RTT and bandwidth, the bandwidth-delay product, and the "
      "max_rpcs_in_flight, peer_credits and credits they call for, with the reasons");
  bool tune_probe = false, tune_apply = false;
  std::vector<std::string> tune_peers;
  std::string tune_size;
  tune->add_flag("--probe", tune_probe,
                 "measure each peer now: 3 empty PINGs and 3 trains of bulk RPCs (default: "
                 "statistics, traffic, earlier probes and tune.link_mbit)");
  tune->add_option("--peer", tune_peers, "only this peer NID (repeat for more)");
  tune->add_option("--size", tune_size, "bulk RPC size, with K or M (default maxBlockSize)");
  tune->add_flag("--apply", tune_apply, "apply the recommended settings at run time");
  tune->add_flag("--json", json_out, "print JSON");

  auto* fault = app.add_subcommand(
      "fault", "fault injection, like lnetctl fault: drop or delay messages leaving this node");
  fault->require_subcommand(1);
  auto* fault_add =
      fault->add_subcommand("add", "add a rule: drop|delay with --rate or --interval");
  std::string fault_action, fault_src = "*", fault_dst = "*", fault_type = "any",
                            fault_health = "NONE";
  uint64_t fault_rate = 0;
  double fault_interval = 0, fault_latency = 0;
  fault_add->add_option("ACTION", fault_action, "drop or delay")
      ->required()
      ->check(CLI::IsMember({"drop", "delay"}));
  fault_add->add_option("--src", fault_src, "source NID (a local NI), or * (default)");
  fault_add->add_option("--dst", fault_dst, "destination NID (a peer NI), or * (default)");
  fault_add->add_option("--type", fault_type,
                        "message type: a number, a name (PING, BRW_WRITE, BRW_READ) or any");
  fault_add->add_option("--rate", fault_rate, "act on every N-th matching message (1 = all)")
      ->check(CLI::Range(uint64_t(1), uint64_t(1) << 40));
  fault_add
      ->add_option("--interval", fault_interval,
                   "or act on the first matching message in every SECONDS")
      ->check(CLI::PositiveNumber);
  fault_add->add_option("--latency", fault_latency, "delay: how long to hold a message (seconds)")
      ->check(CLI::PositiveNumber);
  fault_add->add_option("--health", fault_health,
                        "drop: report this health error to the sender (LOCAL_NI_DOWN, "
                        "LOCAL_NI_SEND_TIMEOUT, PEER_NI_UNREACHABLE, ...); NONE (default) "
                        "drops silently, like a black hole");
  fault_add->add_flag("--json", json_out, "print JSON");
  auto* fault_list = fault->add_subcommand("list", "the rules in force and their counters");
  fault_list->add_flag("--json", json_out, "print JSON");
  auto* fault_del = fault->add_subcommand("del", "remove a rule by id, or --all");
  uint64_t fault_id = 0;
  bool fault_all = false;
  fault_del->add_option("ID", fault_id, "rule id (from fault list)");
  fault_del->add_flag("--all", fault_all, "remove every rule");
  fault_del->add_flag("--json", json_out, "print JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (*keygen_cmd) return keygen(key_path, json_out);

  if (*ping) {
    auto nid = pfsnet::Nid::parse(nid_text);
    if (!nid.ok()) return fail(nid.status().message());
    json req = {{"cmd", "ping"},       {"nid", nid->to_string()}, {"count", count},
                {"size", size},        {"timeout", timeout},      {"mode", mode},
                {"interval", interval}};
    auto limit = std::chrono::milliseconds(
        static_cast<int64_t>((timeout + interval + 1) * 1000 * double(count)) + 5000);
    if (!json_out)
      std::printf("PING %s: %lld bytes of bulk, %lld round trips\n", nid->to_string().c_str(),
                  (long long)size, (long long)count);
    auto r = pfsnet::admin_request(socket, req, limit, [&](const json& ev) {
      if (json_out) return;
      if (ev["event"] == "reply")
        std::printf("reply from %s: seq=%lld bytes=%lld rtt=%s ms\n",
                    ev["nid"].get<std::string>().c_str(), ev["seq"].get<long long>(),
                    ev["bytes"].get<long long>(), fmt_ms(ev["rtt_ms"].get<double>()).c_str());
      else
        std::printf("no reply from %s: seq=%lld %s: %s\n", ev["nid"].get<std::string>().c_str(),
                    ev["seq"].get<long long>(), ev["kind"].get<std::string>().c_str(),
                    ev["error"].get<std::string>().c_str());
      std::fflush(stdout);
    });
    if (!r.ok()) return fail(r.status().message());
    const json& s = *r;
    if (json_out) {
      std::cout << s.dump() << "\n";
    } else {
      std::printf("--- %s ping statistics ---\n%lld sent, %lld ok, %lld failed\n",
                  s["target"].get<std::string>().c_str(), s["count"].get<long long>(),
                  s["ok"].get<long long>(), s["failed"].get<long long>());
      if (s["ok"].get<int64_t>() > 0)
        std::printf("rtt min/avg/max = %s/%s/%s ms\n",
                    fmt_ms(s["rtt_ms"]["min"].get<double>()).c_str(),
                    fmt_ms(s["rtt_ms"]["avg"].get<double>()).c_str(),
                    fmt_ms(s["rtt_ms"]["max"].get<double>()).c_str());
      for (auto& [k, v] : s["errors"].items())
        std::printf("errors %s: %lld\n", k.c_str(), v.get<long long>());
    }
    return s["failed"].get<int64_t>() == 0 ? 0 : 1;
  }

  if (*diag_rpc) {
    json req = {{"cmd", "diag_rpc"}};
    bool have_what = false, have_interval = false;
    for (const std::string& a : diag_args) {
      bool is_interval = !a.empty() && std::isdigit(static_cast<unsigned char>(a[0]));
      if (is_interval) {
        if (have_interval) return fail("diag rpc takes one interval (e.g. 60s)");
        req["interval"] = a;
        have_interval = true;
        continue;
      }
      if (have_what) return fail("diag rpc takes one of node[=NAME], size, message, all");
      have_what = true;
      if (a.rfind("node=", 0) == 0) {
        req["what"] = "node";
        req["node"] = a.substr(5);
      } else {
        req["what"] = a;
      }
    }
    auto r = pfsnet::admin_request(socket, req, std::chrono::seconds(10));
    if (!r.ok()) return fail(r.status().message());
    if (json_out)
      std::cout << r->dump() << "\n";
    else if (colon)
      print_diag_rpc_y(*r);
    else
      print_diag_rpc(*r);
    return 0;
  }

  if (*config_show || *config_set) {
    json req = *config_show ? json{{"cmd", "config_show"}}
                            : json{{"cmd", "config_set"}, {"set", assignments}};
    auto r = pfsnet::admin_request(socket, req, std::chrono::seconds(10));
    if (!r.ok()) return fail(r.status().message());
    if (json_out) {
      std::cout << r->dump() << "\n";
    } else if (*config_show) {
      std::printf("%-38s %-24s %s\n", "key", "value", "changes");
      for (const json& e : (*r)["config"])
        std::printf("%-38s %-24s %s\n", e["key"].get<std::string>().c_str(),
                    e["value"].get<std::string>().c_str(),
                    e["runtime"].get<bool>() ? "at run time" : "at restart");
    } else {
      for (const json& c : (*r)["changed"])
        std::printf("%s: %s -> %s\n", c["key"].get<std::string>().c_str(),
                    c["from"].get<std::string>().c_str(), c["to"].get<std::string>().c_str());
      if ((*r)["changed"].empty()) std::printf("nothing changed\n");
    }
    return 0;
  }

  if (*selftest) {
    std::map<std::string, std::string> groups;
    for (const std::string& g : st_groups) {
      auto eq = g.find('=');
      if (eq == std::string::npos || eq == 0) return fail("--group wants NAME=NID,NID,...");
      groups[g.substr(0, eq)] = g.substr(eq + 1);
    }
    auto members = [&](const std::string& what) {
      std::string list = groups.count(what) ? groups[what] : what;
      json a = json::array();
      size_t pos = 0;
      while (pos <= list.size()) {
        size_t c = list.find(',', pos);
        std::string item = list.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
        if (!item.empty()) a.push_back(item);
        if (c == std::string::npos) break;
        pos = c + 1;
      }
      return a;
    };
    auto size = size_with_unit(st_size);
    if (!size) return fail("--size: a number with an optional K or M");
    json conc = json::array();
    auto dash = st_conc.find('-');
    try {
      if (dash != std::string::npos) {
        int lo = std::stoi(st_conc.substr(0, dash)), hi = std::stoi(st_conc.substr(dash + 1));
        if (lo < 1 || hi < lo || hi > 4096) return fail("--concurrency: LOW-HIGH within 1-4096");
        for (int c = lo; c <= hi; c *= 2) conc.push_back(c);
      } else {
        for (const json& c : members(st_conc)) conc.push_back(std::stoi(c.get<std::string>()));
      }
    } catch (...) {
      return fail("--concurrency: a list 1,2,4 or a sweep 1-256");
    }
    json req = {{"cmd", "selftest"},   {"from", members(st_from)}, {"to", members(st_to)},
                {"test", st_test},     {"mode", st_mode},          {"size", *size},
                {"concurrency", conc}, {"distribute", st_dist},    {"duration", st_duration},
                {"link_mbit", st_link}};
    auto limit = std::chrono::milliseconds(
        static_cast<int64_t>((st_duration + 70) * 1000 * double(std::max<size_t>(1, conc.size()))));
    auto r = pfsnet::admin_request(socket, req, limit);
    if (!r.ok()) return fail(r.status().message());
    if (!st_plot.empty()) {
      std::ofstream out(st_plot);
      out << pfsnet::selftest_svg(*r);
      if (!out) return fail("cannot write " + st_plot);
    }
    if (json_out) {
      std::cout << r->dump() << "\n";
    } else if (st_csv) {
      std::printf("concurrency,mib_s,rpc_s,p50_ms,p99_ms,rtt_ms,theory_mib_s,efficiency,errors\n");
      for (const json& s : (*r)["steps"])
        std::printf("%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%llu\n", s["concurrency"].get<int>(),
                    s["mib_s"].get<double>(), s["rpc_s"].get<double>(), s["p50_ms"].get<double>(),
                    s["p99_ms"].get<double>(), s["rtt_ms"].get<double>(),
                    s["theory_mib_s"].get<double>(), s["efficiency"].get<double>(),
                    s["errors"].get<unsigned long long>());
    } else {
      std::printf("%6s %10s %10s %9s %9s %8s %12s %6s\n", "conc", "MiB/s", "RPC/s", "p50 ms",
                  "p99 ms", "RTT ms", "theory MiB/s", "eff");
      for (const json& s : (*r)["steps"]) {
        std::printf("%6d %10.1f %10.1f %9.3f %9.3f %8.3f %12.1f %6.2f\n",
                    s["concurrency"].get<int>(), s["mib_s"].get<double>(), s["rpc_s"].get<double>(),
                    s["p50_ms"].get<double>(), s["p99_ms"].get<double>(), s["rtt_ms"].get<double>(),
                    s["theory_mib_s"].get<double>(), s["efficiency"].get<double>());
        if (s["errors"].get<uint64_t>() > 0)
          std::printf("       %llu errors, first: %s\n", s["errors"].get<unsigned long long>(),
                      s["first_error"].get<std::string>().c_str());
      }
    }
    return 0;
  }

  if (*status) {
    auto r = pfsnet::admin_request(socket, json{{"cmd", "status"}}, std::chrono::seconds(30));
    if (!r.ok()) return fail(r.status().message());
    if (json_out) {
      std::cout << r->dump() << "\n";
      return 0;
    }
    const json& t = *r;
    std::printf("MGS %s, generation %llu, %zu node(s)\n", t["mgs"].get<std::string>().c_str(),
                t["generation"].get<unsigned long long>(), t["nodes"].size());
    std::printf("%-16s %-14s %-8s %10s %-6s  %s\n", "name", "roles", "state", "heard(s)", "via",
                "NIDs");
    for (const json& n : t["nodes"]) {
      std::string nids;
      for (const json& x : n["nids"]) nids += (nids.empty() ? "" : " ") + x.get<std::string>();
      if (nids.size() > 40) nids = nids.substr(0, 37) + "...";
      std::printf("%-16.16s %-14.14s %-8s %10s %-6s  %s\n", n["name"].get<std::string>().c_str(),
                  n["roles"].get<std::string>().c_str(), n["state"].get<std::string>().c_str(),
                  fmt_ms(n["last_heard_s_ago"].get<double>()).c_str(),
                  n["heard_via"].get<std::string>().c_str(), nids.c_str());
    }
    return 0;
  }

  if (*fault_add || *fault_list || *fault_del) {
    json req;
    if (*fault_add) {
      req = {{"cmd", "fault_add"},       {"action", fault_action}, {"src", fault_src},
             {"dst", fault_dst},         {"rate", fault_rate},     {"interval", fault_interval},
             {"latency", fault_latency}, {"health", fault_health}};
      if (!fault_type.empty() && std::isdigit(static_cast<unsigned char>(fault_type[0])))
        req["type"] = std::stoul(fault_type);
      else if (fault_type != "any")
        req["type"] = fault_type;
    } else if (*fault_list) {
      req = {{"cmd", "fault_list"}};
    } else {
      if (!fault_all && fault_id == 0) return fail("fault del needs a rule ID or --all");
      req = {{"cmd", "fault_del"}, {"id", fault_id}, {"all", fault_all}};
    }
    auto r = pfsnet::admin_request(socket, req, std::chrono::seconds(10));
    if (!r.ok()) return fail(r.status().message());
    if (json_out) {
      std::cout << r->dump() << "\n";
    } else if (*fault_add) {
      std::printf("rule %llu: %s\n", (*r)["added"]["id"].get<unsigned long long>(),
                  (*r)["added"]["rule"].get<std::string>().c_str());
    } else if (*fault_list) {
      std::printf("%4s %10s %10s  %s\n", "id", "matched", "injected", "rule");
      for (const json& f : (*r)["faults"])
        std::printf("%4llu %10llu %10llu  %s\n", f["id"].get<unsigned long long>(),
                    f["matched"].get<unsigned long long>(), f["injected"].get<unsigned long long>(),
                    f["rule"].get<std::string>().c_str());
      if ((*r)["faults"].empty()) std::printf("no fault rules\n");
    } else {
      std::printf("%llu rule(s) deleted\n", (*r)["deleted"].get<unsigned long long>());
    }
    return 0;
  }

  if (*tune) {
    json req = {{"cmd", "tune"}, {"probe", tune_probe}, {"apply", tune_apply}};
    if (!tune_peers.empty()) req["peers"] = tune_peers;
    if (!tune_size.empty()) {
      auto size = size_with_unit(tune_size);
      if (!size) return fail("--size: a number with an optional K or M");
      req["size"] = *size;
    }
    auto r = pfsnet::admin_request(socket, req, std::chrono::seconds(300));
    if (!r.ok()) return fail(r.status().message());
    if (json_out) {
      std::cout << r->dump() << "\n";
      return 0;
    }
    print_tune(*r);
    return 0;
  }

  if (*nis || *peers) {
    json req = {{"cmd", *nis ? "nis" : "peers"}};
    auto r = pfsnet::admin_request(socket, req, std::chrono::seconds(10));
    if (!r.ok()) return fail(r.status().message());
    if (json_out) {
      std::cout << r->dump() << "\n";
    } else {
      print_ni_table((*r)[*nis ? "nis" : "peers"], *nis ? "NI" : "peer NI", verbose);
    }
    return 0;
  }
  return 0;
}
