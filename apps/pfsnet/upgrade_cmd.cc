// pfsnet upgrade check|commit [--level N] [--force]: the cluster's minimum release level, as
// Storage Scale's `mmchconfig release=LATEST` (docs/operator.md, "Upgrading").
#include <cstdio>
#include <memory>
#include <string>

#include "admin/admin_client.h"
#include "cli.h"

namespace pfsnet::cli {

namespace {

std::string level_text(const json& n) {
  int level = n["level"].get<int>();
  return level == 0 ? std::string("?") : std::to_string(level);
}

void print_upgrade(const json& r) {
  const int level = r["level"], target = r["target"];
  const bool commit = r.value("commit", false);
  std::printf("cluster release level %d (MGS %s; its release speaks up to %d, this node's %d)\n",
              level, r.value("mgs", std::string("?")).c_str(), r["mgs_level"].get<int>(),
              r["this_level"].get<int>());
  if (commit) {
    if (r["committed"].get<bool>())
      std::printf("raised to %d: every node refuses peers below it from now on\n", level);
    else if (r["refusal"].get<std::string>().empty())
      std::printf("already at level %d: nothing changed\n", level);
    else
      std::printf("commit refused: %s\n", r["refusal"].get<std::string>().c_str());
  } else if (!r["refusal"].get<std::string>().empty()) {
    std::printf("level %d cannot be committed: %s\n", target,
                r["refusal"].get<std::string>().c_str());
  }
  if (!r["features"].empty()) {
    std::printf("%s %d turns on:\n", r["committed"].get<bool>() ? "level" : "raising it to",
                target);
    for (const json& f : r["features"])
      std::printf("  %s (level %d): %s\n    below it: %s\n", f["name"].get<std::string>().c_str(),
                  f["level"].get<int>(), f["what"].get<std::string>().c_str(),
                  f["breaks"].get<std::string>().c_str());
  }
  const size_t below = r["below"], total = r["total"];
  if (below == 0) {
    std::printf("all %zu node(s) run level %d or above%s\n", total, target,
                !commit && target > level ? ": pfsnet upgrade commit raises the level" : "");
    return;
  }
  std::printf("%zu of %zu node(s) below level %d or not heard from yet (?):\n", below, total,
              target);
  std::printf("  %-6s %-16s %-8s %-5s %s\n", "id", "name", "state", "level", "release");
  for (const json& n : r["nodes"]) {
    std::string rel = n["release"].get<std::string>();
    if (rel.empty()) rel = n["level"].get<int>() == 1 ? "(wire version 1)" : "(not said)";
    std::printf("  %-6u %-16.16s %-8s %-5s %s\n", n["id"].get<unsigned>(),
                n["name"].get<std::string>().c_str(), n["state"].get<std::string>().c_str(),
                level_text(n).c_str(), rel.c_str());
  }
  if (r["nodes"].size() < below) std::printf("  ... and %zu more\n", below - r["nodes"].size());
  std::printf(
      "those not dead hold a commit back: upgrade them (a dead one is refused when it "
      "returns below the level)\n");
}

}  // namespace

void add_upgrade(CLI::App& app, Invocation& inv) {
  auto* up = app.add_subcommand(
      "upgrade",
      "the cluster's minimum release level (kept by the MGS): what holds it back, "
      "and raising it once every node runs a release of that level");
  up->require_subcommand(1);
  auto level = std::make_shared<int>(0);
  auto force = std::make_shared<bool>(false);
  auto* check = up->add_subcommand(
      "check", "the level in force, the features the next one turns on, and the nodes below it");
  auto* commit = up->add_subcommand(
      "commit",
      "raise the level (never lowered): refused while a node that is not dead runs below it");
  for (CLI::App* sub : {check, commit}) {
    sub->add_option("--level", *level,
                    "the level to check or commit (default: the latest the "
                    "MGS's release speaks)")
        ->check(CLI::Range(1, 65535));
    add_json_flag(sub, inv);
  }
  commit->add_flag("--force", *force,
                   "commit even though nodes below the level are up: their connections are "
                   "refused from then on");
  auto run = [&inv, level, force](bool is_commit) {
    json req = {{"cmd", "upgrade"}, {"commit", is_commit}, {"level", *level}};
    if (*force) req["force"] = true;
    auto r = admin_request(inv.socket, req, std::chrono::seconds(30));
    if (!r.ok()) {
      inv.rc = fail(r.status().message());
      return;
    }
    if (inv.json)
      std::printf("%s\n", r->dump().c_str());
    else
      print_upgrade(*r);
    // A refused commit ran but did not do what was asked.
    inv.rc = is_commit && !(*r)["refusal"].get<std::string>().empty() ? 1 : 0;
  };
  check->callback([run] { run(false); });
  commit->callback([run] { run(true); });
}

}  // namespace pfsnet::cli
