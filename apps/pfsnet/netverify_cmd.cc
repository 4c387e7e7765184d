// pfsnet netverify [NODE|NID...] [-v] [--no-bandwidth] [--size S] [--max-clock-offset MS]
// [--max-rtt MS] [--min-bandwidth MIB] [--timeout S] [--json]: every path from this node to
// the nodes named (default: every node of the MGS's table), checked -- port, handshake,
// MTU each way, routing, RTT, bandwidth each way, clock, settings -- PASS or FAIL per check
// with the reason. One line per path; the failed checks under it (-v: every check). Exit
// status 1 when a check failed.
#include <cstdio>

#include "admin/admin_client.h"
#include "cli.h"

namespace pfsnet::cli {

namespace {

struct NetverifyArgs {
  std::vector<std::string> nodes;
  bool verbose = false, no_bandwidth = false;
  std::string size;
  std::optional<double> max_clock_offset, max_rtt, min_bandwidth, timeout;
};

void print_netverify(const json& r, bool verbose) {
  std::printf("netverify from %s: %d path(s) passed, %d failed\n",
              r["node"].get<std::string>().c_str(), r["passed"].get<int>(), r["failed"].get<int>());
  for (const json& n : r["nodes"]) {
    std::string name = n["name"].get<std::string>();
    std::string state = n["state"].get<std::string>();
    if (!n["error"].get<std::string>().empty()) {
      std::printf("%-12s FAIL  %s\n", name.c_str(), n["error"].get<std::string>().c_str());
      continue;
    }
    for (const json& p : n["paths"]) {
      const json& f = p["figures"];
      std::string peer = p["peer"].get<std::string>();
      if (p.contains("via") && !p["via"].empty()) {  // through routers
        std::string via;
        for (const json& g : p["via"]) via += (via.empty() ? "" : ",") + g.get<std::string>();
        peer += " (via " + via + ")";
      }
      std::printf("%-12s %s -> %s  %s  rtt %s ms, mtu %u/%u, out %.1f back %.1f MiB/s%s\n",
                  name.empty() ? "-" : name.c_str(), p["local"].get<std::string>().c_str(),
                  peer.c_str(), p["failed"].get<bool>() ? "FAIL" : "PASS",
                  fmt_ms(f["rtt_ms"].get<double>()).c_str(), f["mtu_out"].get<unsigned>(),
                  f["mtu_back"].get<unsigned>(), f["write_mib_s"].get<double>(),
                  f["read_mib_s"].get<double>(),
                  state.empty() || state == "up" ? "" : ("  (MGS: " + state + ")").c_str());
      for (const json& c : p["checks"]) {
        std::string res = c["result"].get<std::string>();
        if (!verbose && res != "FAIL") continue;
        std::printf("    %-9s %s  %s\n", c["check"].get<std::string>().c_str(), res.c_str(),
                    c["detail"].get<std::string>().c_str());
      }
    }
  }
}

int netverify(Invocation& inv, const NetverifyArgs& a) {
  json req = {{"cmd", "netverify"}, {"bandwidth", !a.no_bandwidth}};
  if (!a.nodes.empty()) req["nodes"] = a.nodes;
  if (!a.size.empty()) {
    auto s = size_with_unit(a.size);
    if (!s || *s <= 0) return fail("--size: a byte count such as 1M or 65536");
    req["size"] = *s;
  }
  if (a.max_clock_offset) req["max_clock_offset_ms"] = *a.max_clock_offset;
  if (a.max_rtt) req["max_rtt_ms"] = *a.max_rtt;
  if (a.min_bandwidth) req["min_bandwidth_mib"] = *a.min_bandwidth;
  if (a.timeout) req["timeout"] = *a.timeout;
  // Every step of every path has its deadline in the daemon; this one only bounds a daemon
  // that stopped answering.
  auto r = admin_request(inv.socket, req, std::chrono::hours(1), {});
  if (!r.ok()) return fail(r.status().message());
  if (inv.json)
    std::printf("%s\n", r->dump().c_str());
  else
    print_netverify(*r, a.verbose);
  return r->value("failed", 0) > 0 ? 1 : 0;
}

}  // namespace

void add_netverify(CLI::App& app, Invocation& inv) {
  auto* sub = app.add_subcommand(
      "netverify",
      "check every path to other nodes (default: all the MGS knows): port, handshake, MTU each "
      "way, routing, RTT, bandwidth each way, clock, settings; PASS/FAIL per check with the "
      "reason");
  auto a = std::make_shared<NetverifyArgs>();
  add_json_flag(sub, inv);
  sub->add_option("nodes", a->nodes, "node names (of the MGS's table) or NIDs");
  sub->add_flag("-v,--verbose", a->verbose, "every check with its figures, not only failures");
  sub->add_flag("--no-bandwidth", a->no_bandwidth, "skip the bandwidth trains (the slow part)");
  sub->add_option("--size", a->size, "bulk RPC size of the bandwidth trains (default 1M)");
  sub->add_option("--max-clock-offset", a->max_clock_offset,
                  "fail a clock further apart than this, ms (default 250)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-rtt", a->max_rtt, "fail a round trip above this, ms (default: none)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--min-bandwidth", a->min_bandwidth,
                  "fail a direction below this, MiB/s (default: none)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--timeout", a->timeout, "seconds each step may take (default 5)")
      ->check(CLI::Range(0.1, 600.0));
  sub->callback([&inv, a] { inv.rc = netverify(inv, *a); });
}

}  // namespace pfsnet::cli
