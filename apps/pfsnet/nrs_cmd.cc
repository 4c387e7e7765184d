// pfsnet nrs: the request scheduling policy this node serves by (Lustre's
// `lctl get_param ost.OSS.ost_io.nrs_policies`) and, under fair, what each client and job
// got and was held; --policy changes it (as config set rpc.nrs_policy does).
#include <cinttypes>

#include "cli.h"

namespace pfsnet::cli {

namespace {

void print_nrs(const json& r) {
  std::printf("policy %s", r["policy"].get<std::string>().c_str());
  if (r.contains("changed"))
    std::printf(" (%s)", r["changed"].get<bool>() ? "changed" : "as it was");
  if (r["policy"] == "fifo") {
    std::printf(": each request to its handler as it arrives\n");
    return;
  }
  std::printf(": turns across clients and jobs, %" PRId64
              " slot(s) kept for those heard from in %" PRId64 " ms\n",
              r["reserve"].get<int64_t>(), r["idle_ms"].get<int64_t>());
  for (const json& c : r["classes"]) {
    std::printf("%s handlers: %d of %d slots in service, %zu waiting\n",
                c["handlers"].get<std::string>().c_str(), c["active"].get<int>(),
                c["slots"].get<int>(), c["waiting"].get<size_t>());
    if (c["flows"].empty()) continue;
    std::printf("  %-24s %-16s %6s %10s %10s %10s %10s %11s %11s\n", "client", "job", "weight",
                "requests", "bytes", "held", "held_bytes", "held_ms", "held_max_ms");
    for (const json& f : c["flows"])
      std::printf("  %-24s %-16s %6" PRId64 " %10" PRIu64 " %10s %10" PRIu64
                  " %10s %11.1f %11.1f\n",
                  f["client"].get<std::string>().c_str(),
                  f["job"].get<std::string>().empty() ? "-" : f["job"].get<std::string>().c_str(),
                  f["weight"].get<int64_t>(), f["requests"].get<uint64_t>(),
                  human_bytes(f["bytes"].get<uint64_t>()).c_str(), f["held"].get<uint64_t>(),
                  human_bytes(f["held_bytes"].get<uint64_t>()).c_str(), f["held_ms"].get<double>(),
                  f["held_max_ms"].get<double>());
  }
}

}  // namespace

void add_nrs(CLI::App& app, Invocation& inv) {
  auto policy = std::make_shared<std::string>();
  auto* nrs = app.add_subcommand(
      "nrs",
      "the request scheduling policy this node serves by (fifo, fair) and, under fair, what "
      "each client and job was held");
  nrs->add_option("--policy", *policy, "change it: fifo or fair (as config set rpc.nrs_policy)")
      ->check(CLI::IsMember({"fifo", "fair"}));
  add_json_flag(nrs, inv);
  nrs->callback([&inv, policy] {
    json req =
        policy->empty() ? json{{"cmd", "nrs"}} : json{{"cmd", "nrs_set"}, {"policy", *policy}};
    inv.rc = request(inv, req, std::chrono::seconds(10), print_nrs);
  });
}

}  // namespace pfsnet::cli
