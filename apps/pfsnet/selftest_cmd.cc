// pfsnet selftest --from CLIENTS --to SERVERS [--test ping|brw] ...: lnet_selftest-style
// tests between groups, driven by the local daemon.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "admin/admin_client.h"
#include "cli.h"
#include "selftest/selftest.h"

namespace pfsnet::cli {

namespace {

struct SelftestArgs {
  std::vector<std::string> groups;
  std::string from, to, test = "brw", mode = "write", size = "1M", conc = "1,2,4,8", dist = "1:1",
                        plot;
  double duration = 5, link_mbit = 0;
  bool csv = false;
};

int selftest(Invocation& inv, const SelftestArgs& a) {
  std::map<std::string, std::string> groups;
  for (const std::string& g : a.groups) {
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
  auto size = size_with_unit(a.size);
  if (!size) return fail("--size: a number with an optional K or M");
  json conc = json::array();
  auto dash = a.conc.find('-');
  try {
    if (dash != std::string::npos) {
      int lo = std::stoi(a.conc.substr(0, dash)), hi = std::stoi(a.conc.substr(dash + 1));
      if (lo < 1 || hi < lo || hi > 4096) return fail("--concurrency: LOW-HIGH within 1-4096");
      for (int c = lo; c <= hi; c *= 2) conc.push_back(c);
    } else {
      for (const json& c : members(a.conc)) conc.push_back(std::stoi(c.get<std::string>()));
    }
  } catch (...) {
    return fail("--concurrency: a list 1,2,4 or a sweep 1-256");
  }
  json req = {{"cmd", "selftest"},       {"from", members(a.from)}, {"to", members(a.to)},
              {"test", a.test},          {"mode", a.mode},          {"size", *size},
              {"concurrency", conc},     {"distribute", a.dist},    {"duration", a.duration},
              {"link_mbit", a.link_mbit}};
  auto limit = std::chrono::milliseconds(
      static_cast<int64_t>((a.duration + 70) * 1000 * double(std::max<size_t>(1, conc.size()))));
  auto r = admin_request(inv.socket, req, limit);
  if (!r.ok()) return fail(r.status().message());
  if (!a.plot.empty()) {
    std::ofstream out(a.plot);
    out << selftest_svg(*r);
    if (!out) return fail("cannot write " + a.plot);
  }
  if (inv.json) {
    std::cout << r->dump() << "\n";
  } else if (a.csv) {
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
      std::printf("%6d %10.1f %10.1f %9.3f %9.3f %8.3f %12.1f %6.2f\n", s["concurrency"].get<int>(),
                  s["mib_s"].get<double>(), s["rpc_s"].get<double>(), s["p50_ms"].get<double>(),
                  s["p99_ms"].get<double>(), s["rtt_ms"].get<double>(),
                  s["theory_mib_s"].get<double>(), s["efficiency"].get<double>());
      if (s["errors"].get<uint64_t>() > 0)
        std::printf("       %llu errors, first: %s\n", s["errors"].get<unsigned long long>(),
                    s["first_error"].get<std::string>().c_str());
    }
  }
  return 0;
}

}  // namespace

void add_selftest(CLI::App& app, Invocation& inv) {
  auto* sub = app.add_subcommand(
      "selftest", "lnet_selftest-style test from a group of clients to a group of servers");
  auto a = std::make_shared<SelftestArgs>();
  sub->add_option("--group", a->groups, "NAME=NID,NID,... (repeat for each group)");
  sub->add_option("--from", a->from, "clients: a group name or NID,NID,...")->required();
  sub->add_option("--to", a->to, "servers: a group name or NID,NID,...")->required();
  sub->add_option("--test", a->test, "ping or brw (default brw)")
      ->check(CLI::IsMember({"ping", "brw"}));
  sub->add_option("--mode", a->mode, "brw: write (default) or read")
      ->check(CLI::IsMember({"write", "read"}));
  sub->add_option("--size", a->size, "bytes per RPC, with K or M (default 1M)");
  sub->add_option("--concurrency", a->conc,
                  "RPCs in flight per client: 1,2,4 or a sweep 1-256 (powers of two)");
  sub->add_option("--distribute", a->dist, "1:1 (default) or 1:N")
      ->check(CLI::IsMember({"1:1", "1:N"}));
  sub->add_option("--duration", a->duration, "seconds per step (default 5)")
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--link-mbit", a->link_mbit, "link rate per client for the theory column");
  add_json_flag(sub, inv);
  sub->add_flag("--csv", a->csv, "print CSV");
  sub->add_option("--plot", a->plot, "write an SVG chart of throughput and theory");
  sub->callback([&inv, a] { inv.rc = selftest(inv, *a); });
}

}  // namespace pfsnet::cli
