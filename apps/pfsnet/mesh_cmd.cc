// pfsnet mesh [-v] [--local] [--json]: the probe mesh's matrix, who -> whom: p50 and p99
// of the small probes, probes lost of sent, bulk MiB/s each way; outliers marked with '*'
// and listed with the reason. One line per pair of nodes (the worst of their paths); -v
// one per path.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "cli.h"

namespace pfsnet::cli {

namespace {

struct Pair {
  double p50 = 0, p99 = 0, wr = 0, rd = 0;
  uint64_t sent = 0, lost = 0;
  bool outlier = false, any_rtt = false;
};

std::string mib(double v) { return v > 0 ? fmt::format("{:.1f}", v) : "-"; }

void print_mesh(const json& m, bool verbose) {
  const json& rows = m["rows"];
  std::string mgs = m["mgs"].get<std::string>();
  std::printf("probe mesh: %zu node(s) reporting%s, epoch %llu, %zu outlier(s)\n", rows.size(),
              mgs.empty() ? " (this node only)" : (" to MGS " + mgs).c_str(),
              m["epoch"].get<unsigned long long>(), m["outliers"].get<size_t>());
  std::printf("%-16s %-16s %s%9s %9s %11s %11s %11s%s\n", "from", "to",
              verbose ? "path                                        " : "", "p50 ms", "p99 ms",
              "lost/sent", "write MiB/s", "read MiB/s", verbose ? "  MTU here/peer" : "");
  std::vector<std::string> why;
  for (const json& r : rows) {
    std::string from = r["from"];
    std::map<std::string, Pair> pairs;  // to -> the worst of its paths
    for (const json& c : r["cells"]) {
      std::string to = c["to"], reason = c["outlier"];
      std::string path = c["local"].get<std::string>() + " -> " + c["peer"].get<std::string>();
      if (!reason.empty()) why.push_back(from + " -> " + to + " (" + path + "): " + reason);
      double p50 = c["p50_ms"], p99 = c["p99_ms"], wr = c["write_mib_s"], rd = c["read_mib_s"];
      uint64_t sent = c["sent"], lost = c["lost"];
      bool has_rtt = c["rtt_count"].get<uint64_t>() > 0;
      if (verbose) {
        unsigned here = c.value("local_mtu", 0u), there = c.value("peer_mtu", 0u);
        std::string mtu = here && there ? std::to_string(here) + "/" + std::to_string(there) : "-";
        std::printf("%-16.16s %-16.16s %-44.44s%9s %9s %11s %11s %11s %15s %s\n", from.c_str(),
                    to.c_str(), path.c_str(), has_rtt ? fmt_ms(p50).c_str() : "-",
                    has_rtt ? fmt_ms(p99).c_str() : "-",
                    (std::to_string(lost) + "/" + std::to_string(sent)).c_str(), mib(wr).c_str(),
                    mib(rd).c_str(), mtu.c_str(), reason.empty() ? "" : "*");
        continue;
      }
      Pair& p = pairs[to];
      if (has_rtt) {
        p.p50 = std::max(p.p50, p50);
        p.p99 = std::max(p.p99, p99);
        p.any_rtt = true;
      }
      p.sent += sent;
      p.lost += lost;
      if (wr > 0) p.wr = p.wr > 0 ? std::min(p.wr, wr) : wr;
      if (rd > 0) p.rd = p.rd > 0 ? std::min(p.rd, rd) : rd;
      p.outlier = p.outlier || !reason.empty();
    }
    for (const auto& [to, p] : pairs)
      std::printf("%-16.16s %-16.16s %9s %9s %11s %11s %11s %s\n", from.c_str(), to.c_str(),
                  p.any_rtt ? fmt_ms(p.p50).c_str() : "-", p.any_rtt ? fmt_ms(p.p99).c_str() : "-",
                  (std::to_string(p.lost) + "/" + std::to_string(p.sent)).c_str(),
                  mib(p.wr).c_str(), mib(p.rd).c_str(), p.outlier ? "*" : "");
  }
  if (!why.empty()) {
    std::printf("\noutliers:\n");
    for (const std::string& w : why) std::printf("  * %s\n", w.c_str());
  }
}

}  // namespace

void add_mesh(CLI::App& app, Invocation& inv) {
  auto* sub = app.add_subcommand(
      "mesh",
      "the probe mesh: who -> whom, p50/p99 of the small probes, probes lost, bulk MiB/s each "
      "way, outliers marked; every node's row as the MGS gathered them");
  auto verbose = std::make_shared<bool>(false);
  auto local = std::make_shared<bool>(false);
  add_json_flag(sub, inv);
  sub->add_flag("-v,--verbose", *verbose, "one line per path (local NI -> peer NI)");
  sub->add_flag("--local", *local, "only this node's row, from its own probes (no MGS asked)");
  sub->callback([&inv, verbose, local] {
    inv.rc = request(inv, {{"cmd", "mesh"}, {"local", *local}}, std::chrono::seconds(30),
                     [&](const json& m) { print_mesh(m, *verbose); });
  });
}

}  // namespace pfsnet::cli
