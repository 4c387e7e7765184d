// pfsnet tune [--probe] [--peer NID] [--size S] [--apply]; pfsnet fault add|list|del.
#include <cctype>
#include <cstdio>

#include "cli.h"

namespace pfsnet::cli {

namespace {

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
    if (p.value("probe_segments", 0) > 0)
      std::printf(
          "  %s: the probe carried %lld TCP segments, %lld retransmitted; the path "
          "retransmits %.4f%% of its segments%s\n",
          p["peer"].get<std::string>().c_str(), p["probe_segments"].get<long long>(),
          p["probe_retransmits"].get<long long>(), 100 * p["retransmit_ratio"].get<double>(),
          p["lossy"].get<bool>() ? " (lossy)" : "");
  }
  for (const auto& [peer, err] : r["probe_errors"].items())
    std::printf("  probe of %s failed: %s\n", peer.c_str(), err.get<std::string>().c_str());
  if (r.contains("warmed_bytes"))
    for (const auto& [peer, bytes] : r["warmed_bytes"].items())
      std::printf(
          "  %s: %.0f MiB sent over its bulk connections after the probe, to open them and "
          "bring their windows up\n",
          peer.c_str(), bytes.get<double>() / (1 << 20));
  std::printf("\n%-20s %8s %12s  %s\n", "setting", "now", "recommended", "why");
  auto value = [](const json& v) { return v.is_null() ? std::string("-") : v.dump(); };
  bool own_changed = false;
  for (const char* k : {"max_rpcs_in_flight", "peer_credits", "credits", "conns_per_peer"}) {
    const json& s = r["settings"][k];
    std::printf("%-20s %8lld %12lld  %s\n", k, s["current"].get<long long>(),
                s["recommended"].get<long long>(), s["why"].get<std::string>().c_str());
    if (std::string(k) != "max_rpcs_in_flight") continue;
    // A peer's own value (rpc.peer_rpcs_in_flight), under the node's.
    for (const json& o : r["settings"]["peer_rpcs_in_flight"]) {
      std::printf("  for %-14s %8s %12s  %s\n", o["peer"].get<std::string>().c_str(),
                  value(o["current"]).c_str(), value(o["recommended"]).c_str(),
                  o["why"].get<std::string>().c_str());
      own_changed = own_changed || o["current"] != o["recommended"];
    }
  }
  if (!r["problems"].empty()) std::printf("\nwhat is wrong now:\n");
  for (const json& p : r["problems"]) std::printf("  - %s\n", p["text"].get<std::string>().c_str());
  if (r.contains("applied")) {
    std::printf("\napplied:\n");
    for (const json& c : r["applied"])
      std::printf("  %s: %s -> %s\n", c["key"].get<std::string>().c_str(),
                  c["from"].get<std::string>().c_str(), c["to"].get<std::string>().c_str());
    if (r["applied"].empty()) std::printf("  nothing changed\n");
  } else if (own_changed ||
             r["settings"]["max_rpcs_in_flight"]["current"] !=
                 r["settings"]["max_rpcs_in_flight"]["recommended"] ||
             r["settings"]["peer_credits"]["current"] !=
                 r["settings"]["peer_credits"]["recommended"] ||
             r["settings"]["credits"]["current"] != r["settings"]["credits"]["recommended"] ||
             r["settings"]["conns_per_peer"]["current"] !=
                 r["settings"]["conns_per_peer"]["recommended"]) {
    std::printf("\npfsnet tune --apply sets the recommended values now\n");
  }
}

struct TuneArgs {
  bool probe = false, apply = false;
  std::vector<std::string> peers;
  std::string size, request_size;
  double storage_mbyte = 0, turnaround_ms = 0;
};

// The block service's part of `pfsnet tune`: the GPFS paper's rules with their reasons.
void print_storage_advice(const json& s) {
  std::printf("\nblock service (the GPFS paper's rules):\n");
  auto row = [](const char* key, const json& v, const json& why) {
    std::printf("  %-15s %10s -> %-10s %s\n", key, v["current"].dump().c_str(),
                v["recommended"].dump().c_str(), why.get<std::string>().c_str());
  };
  row("block_size", s["block_size"], s["why_block_size"]);
  row("buffers", s["buffers"], s["why_buffers"]);
  row("prefetch_depth", s["prefetch_depth"], s["why_prefetch"]);
  auto from = [](const char* what, const json& v, const char* unit, const json& src) {
    if (!src.get<std::string>().empty())
      std::printf("  %s %.1f %s from %s\n", what, v.get<double>(), unit,
                  src.get<std::string>().c_str());
  };
  from("throughput", s["throughput_mbyte"], "MB/s", s["throughput_from"]);
  from("turnaround", s["turnaround_ms"], "ms", s["turnaround_from"]);
  for (const json& p : s["problems"]) std::printf("  ! %s\n", p["text"].get<std::string>().c_str());
}

int tune(Invocation& inv, const TuneArgs& a) {
  json req = {{"cmd", "tune"}, {"probe", a.probe}, {"apply", a.apply}};
  if (!a.peers.empty()) req["peers"] = a.peers;
  if (!a.size.empty()) {
    auto size = size_with_unit(a.size);
    if (!size) return fail("--size: a number with an optional K or M");
    req["size"] = *size;
  }
  if (!a.request_size.empty()) {
    auto size = size_with_unit(a.request_size);
    if (!size) return fail("--request-size: a number with an optional K or M");
    req["request_size"] = *size;
  }
  if (a.storage_mbyte > 0) req["storage_mbyte"] = a.storage_mbyte;
  if (a.turnaround_ms > 0) req["turnaround_ms"] = a.turnaround_ms;
  return request(inv, req, std::chrono::seconds(300), [](const json& r) {
    print_tune(r);
    if (r.contains("storage")) print_storage_advice(r["storage"]);
  });
}

struct FaultArgs {
  std::string action, src = "*", dst = "*", type = "any", health = "NONE";
  uint64_t rate = 0, id = 0;
  double interval = 0, latency = 0;
  bool all = false;
};

void print_fault_list(const json& r) {
  std::printf("%4s %10s %10s  %s\n", "id", "matched", "injected", "rule");
  for (const json& f : r["faults"])
    std::printf("%4llu %10llu %10llu  %s\n", f["id"].get<unsigned long long>(),
                f["matched"].get<unsigned long long>(), f["injected"].get<unsigned long long>(),
                f["rule"].get<std::string>().c_str());
  if (r["faults"].empty()) std::printf("no fault rules\n");
}

int fault_add(Invocation& inv, const FaultArgs& a) {
  json req = {{"cmd", "fault_add"},   {"action", a.action}, {"src", a.src},
              {"dst", a.dst},         {"rate", a.rate},     {"interval", a.interval},
              {"latency", a.latency}, {"health", a.health}};
  if (!a.type.empty() && std::isdigit(static_cast<unsigned char>(a.type[0])))
    req["type"] = std::stoul(a.type);
  else if (a.type != "any")
    req["type"] = a.type;
  return request(inv, req, std::chrono::seconds(10), [](const json& r) {
    std::printf("rule %llu: %s\n", r["added"]["id"].get<unsigned long long>(),
                r["added"]["rule"].get<std::string>().c_str());
  });
}

int fault_del(Invocation& inv, const FaultArgs& a) {
  if (!a.all && a.id == 0) return fail("fault del needs a rule ID or --all");
  return request(inv, {{"cmd", "fault_del"}, {"id", a.id}, {"all", a.all}},
                 std::chrono::seconds(10), [](const json& r) {
                   std::printf("%llu rule(s) deleted\n", r["deleted"].get<unsigned long long>());
                 });
}

}  // namespace

void add_tune(CLI::App& app, Invocation& inv) {
  auto* sub = app.add_subcommand(
      "tune",
      "per peer: measured RTT and bandwidth, the bandwidth-delay product, and the "
      "max_rpcs_in_flight, peer_credits and credits they call for, with the reasons");
  auto a = std::make_shared<TuneArgs>();
  sub->add_flag("--probe", a->probe,
                "measure each peer now: 3 empty PINGs and 3-10 trains of bulk RPCs (default: "
                "statistics, traffic, earlier probes and tune.link_mbit)");
  sub->add_option("--peer", a->peers, "only this peer NID (repeat for more)");
  sub->add_option("--size", a->size, "bulk RPC size, with K or M (default maxBlockSize)");
  sub->add_flag("--apply", a->apply, "apply the recommended settings at run time");
  sub->add_option("--request-size", a->request_size,
                  "block service: the application's request size (K, M), against the block size");
  sub->add_option("--storage-mbyte", a->storage_mbyte,
                  "block service: a server's throughput in MB/s (default: its emulated disk, else "
                  "its busiest second of the last minute)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--turnaround-ms", a->turnaround_ms,
                  "block service: one block request's turnaround, for buffers and prefetch "
                  "(default: a server's measured buffer hold)")
      ->check(CLI::NonNegativeNumber);
  add_json_flag(sub, inv);
  sub->callback([&inv, a] { inv.rc = tune(inv, *a); });
}

void add_fault(CLI::App& app, Invocation& inv) {
  auto* fault = app.add_subcommand(
      "fault",
      "fault injection, like lnetctl fault: drop, delay or corrupt messages leaving this node");
  fault->require_subcommand(1);
  auto a = std::make_shared<FaultArgs>();
  auto* add =
      fault->add_subcommand("add", "add a rule: drop|delay|corrupt with --rate or --interval");
  add->add_option("ACTION", a->action,
                  "drop, delay, or corrupt (one byte of the data changed after its checksum)")
      ->required()
      ->check(CLI::IsMember({"drop", "delay", "corrupt"}));
  add->add_option("--src", a->src, "source NID (a local NI), or * (default)");
  add->add_option("--dst", a->dst, "destination NID (a peer NI), or * (default)");
  add->add_option("--type", a->type,
                  "message type: a number, a name (PING, BRW_WRITE, BRW_READ) or any");
  add->add_option("--rate", a->rate, "act on every N-th matching message (1 = all)")
      ->check(CLI::Range(uint64_t(1), uint64_t(1) << 40));
  add->add_option("--interval", a->interval,
                  "or act on the first matching message in every SECONDS")
      ->check(CLI::PositiveNumber);
  add->add_option("--latency", a->latency, "delay: how long to hold a message (seconds)")
      ->check(CLI::PositiveNumber);
  add->add_option("--health", a->health,
                  "drop: report this health error to the sender (LOCAL_NI_DOWN, "
                  "LOCAL_NI_SEND_TIMEOUT, PEER_NI_UNREACHABLE, ...); NONE (default) "
                  "drops silently, like a black hole");
  add_json_flag(add, inv);
  add->callback([&inv, a] { inv.rc = fault_add(inv, *a); });
  auto* list = fault->add_subcommand("list", "the rules in force and their counters");
  add_json_flag(list, inv);
  list->callback([&inv] {
    inv.rc = request(inv, {{"cmd", "fault_list"}}, std::chrono::seconds(10), print_fault_list);
  });
  auto* del = fault->add_subcommand("del", "remove a rule by id, or --all");
  del->add_option("ID", a->id, "rule id (from fault list)");
  del->add_flag("--all", a->all, "remove every rule");
  add_json_flag(del, inv);
  del->callback([&inv, a] { inv.rc = fault_del(inv, *a); });
}

}  // namespace pfsnet::cli
