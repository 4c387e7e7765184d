// pfsnet nis|peers [-v], pfsnet status, pfsnet health [-v], pfsnet config show|set: the
// daemon's tables.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cli.h"

namespace pfsnet::cli {

namespace {

// The kernel's figures of one TCP connection (peers -v).
void print_tcp(const json& t) {
  std::printf("      tcp: rtt %s ms (var %s, min %s), cwnd %u x %u B, pmtu %u\n",
              fmt_ms(t["rtt_ms"].get<double>()).c_str(),
              fmt_ms(t["rttvar_ms"].get<double>()).c_str(),
              fmt_ms(t["min_rtt_ms"].get<double>()).c_str(), t["cwnd"].get<unsigned>(),
              t["mss"].get<unsigned>(), t["pmtu"].get<unsigned>());
  std::printf("      tcp: retransmits %llu of %llu segments (%.3f%%), lost %u, delivery %s/s\n",
              t["retransmits"].get<unsigned long long>(),
              t["segments_out"].get<unsigned long long>(),
              100.0 * t["retransmit_ratio"].get<double>(), t["lost"].get<unsigned>(),
              human_bytes(t["delivery_rate_bytes_s"].get<uint64_t>()).c_str());
  std::printf("      tcp: buffers send %s, receive %s; the peer's window %s\n",
              human_bytes(t["sndbuf_bytes"].get<uint64_t>()).c_str(),
              human_bytes(t["rcvbuf_bytes"].get<uint64_t>()).c_str(),
              human_bytes(t["peer_window_bytes"].get<uint64_t>()).c_str());
  std::printf(
      "      tcp: busy %s ms, of it limited by the peer's window %s ms, by the send "
      "buffer %s ms\n",
      fmt_ms(t["busy_ms"].get<double>()).c_str(),
      fmt_ms(t["rwnd_limited_ms"].get<double>()).c_str(),
      fmt_ms(t["sndbuf_limited_ms"].get<double>()).c_str());
}

// An aligned table within 100 columns; -v adds the errors by kind, timeouts, drops,
// connections and (peers) every NID the peer announced.
void print_ni_table(const json& list, const char* title, bool verbose) {
  // The NID column: 20 wide, or the widest NID (an IPv6 one may be up to 45 bytes).
  int w = 20;
  for (const json& n : list) w = std::max(w, static_cast<int>(n["nid"].get<std::string>().size()));
  std::printf("%-*s %-5s %6s %9s %5s %6s %8s %8s %8s %8s %6s\n", w, title, "state", "health",
              "credits", "min", "queued", "sent", "sent", "recv", "recv", "errors");
  for (const json& n : list) {
    uint64_t errs = 0;
    for (auto& [k, v] : n["errors"].items()) errs += v.get<uint64_t>();
    std::string credits = std::to_string(n["credits"].get<long long>()) + "/" +
                          std::to_string(n["credits_max"].get<long long>());
    std::printf("%-*s %-5s %6d %9s %5lld %6lld %8llu %8s %8llu %8s %6llu\n", w,
                n["nid"].get<std::string>().c_str(), n["state"].get<std::string>().c_str(),
                n["health"].get<int>(), credits.c_str(), n["credits_min"].get<long long>(),
                n["queued"].get<long long>(), n["send_count"].get<unsigned long long>(),
                human_bytes(n["send_bytes"].get<uint64_t>()).c_str(),
                n["recv_count"].get<unsigned long long>(),
                human_bytes(n["recv_bytes"].get<uint64_t>()).c_str(),
                static_cast<unsigned long long>(errs));
    // Health that sees slowness: shown without -v, it is what the operator looks for.
    if (!n.value("degraded", std::string()).empty()) {
      int penalty = n["degraded_penalty"].get<int>();
      std::printf("    degraded (%s) since %s: %s; %s\n", n["degraded"].get<std::string>().c_str(),
                  n["degraded_since"].get<std::string>().c_str(),
                  n["degraded_evidence"].get<std::string>().c_str(),
                  penalty
                      ? ("selection takes " + std::to_string(penalty) + " off its health").c_str()
                      : "no penalty");
    }
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
    if (n.contains("connects"))
      std::printf(
          "    connects %llu, failed %llu; sends that waited for a backed-off reconnect %llu\n",
          n["connects"].get<unsigned long long>(), n["connect_failures"].get<unsigned long long>(),
          n["reconnect_waits"].get<unsigned long long>());
    if (n.contains("peer_nids")) {
      std::string nids;
      for (const json& x : n["peer_nids"]) nids += (nids.empty() ? "" : " ") + x.get<std::string>();
      std::printf("    peer %s, NIDs: %s\n", n["peer"].get<std::string>().c_str(), nids.c_str());
      // The wire its connection speaks: version, the features both ends use, the peer's
      // release (a version-1 peer -- pfsnet before wire negotiation -- names none).
      if (n.value("wire_version", 0) > 0) {
        std::string release = n.value("release", std::string());
        std::string features = n.value("features", std::string());
        std::printf("    wire version %d (peer speaks %s), features %s\n    peer release %s\n",
                    n["wire_version"].get<int>(), n.value("wire_versions", std::string()).c_str(),
                    features.empty() ? "none" : features.c_str(),
                    release.empty() ? "unknown (before wire negotiation)" : release.c_str());
        // During a key rotation: whether the peer proves with this node's next key (it
        // committed first) or its previous one (it has not committed yet).
        std::string key = n.value("cluster_key", std::string("current"));
        if (key != "current")
          std::printf("    cluster key: the peer proves with this node's %s key\n", key.c_str());
      }
    }
    if (n.contains("paths"))
      for (const json& p : n["paths"]) {
        std::printf("    path from %s (%s): sent %llu (%s), received %llu (%s), connections %d\n",
                    p["local"].get<std::string>().c_str(), p["kind"].get<std::string>().c_str(),
                    p["send_count"].get<unsigned long long>(),
                    human_bytes(p["send_bytes"].get<uint64_t>()).c_str(),
                    p["recv_count"].get<unsigned long long>(),
                    human_bytes(p["recv_bytes"].get<uint64_t>()).c_str(),
                    p["connections"].get<int>());
        if (p.value("next_connect_s", -1.0) >= 0)
          std::printf("      backing off: next connect in %s s (interval %lld ms)\n",
                      fmt_ms(p["next_connect_s"].get<double>()).c_str(),
                      p["reconnect_interval_ms"].get<long long>());
        // What TCP hides: its retransmissions and losses, its own RTT and window (of the
        // open connection that sent the most), and the totals, closed connections included.
        if (p.contains("tcp")) print_tcp(p["tcp"]);
        if (p.contains("tcp_total")) {
          const json& tt = p["tcp_total"];
          uint64_t segs = tt["segments_out"].get<uint64_t>(),
                   re = tt["retransmits"].get<uint64_t>();
          std::printf(
              "      tcp: over all its connections, retransmits %llu of %llu segments "
              "(%.3f%%)\n",
              static_cast<unsigned long long>(re), static_cast<unsigned long long>(segs),
              segs ? 100.0 * double(re) / double(segs) : 0.0);
        }
      }
    for (auto& [k, v] : n["errors"].items())
      std::printf("    %-28s %llu\n", k.c_str(), v.get<unsigned long long>());
  }
}

void print_status(const json& t) {
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
  // The cluster's minimum release level: the MGS's own, or as the MGS told this node.
  const json local = t.value("local", json::object());
  int level = 0;
  if (local.contains("level")) level = local["level"]["level"].get<int>();
  if (local.contains("agent")) level = std::max(level, local["agent"].value("cluster_level", 0));
  if (level > 0)
    std::printf("cluster release level %d (pfsnet upgrade check: what a higher one needs)\n",
                level);
  // The releases the nodes run, each with its nodes: what a rolling upgrade has reached.
  std::string why = t.value("releases_error", std::string());
  if (!why.empty()) {
    std::printf("releases: unknown: %s\n", why.c_str());
    return;
  }
  std::map<std::string, std::vector<std::string>> by_release;
  for (const json& n : t["nodes"])
    by_release[n.value("release", std::string())].push_back(n["name"].get<std::string>());
  for (const auto& [release, names] : by_release) {
    std::string list;
    for (const std::string& name : names) {
      if (list.size() > 60) {
        list += " ...";
        break;
      }
      list += (list.empty() ? "" : " ") + name;
    }
    std::printf("release %s: %zu node(s): %s\n",
                release.empty() ? "unnamed (wire version 1)" : release.c_str(), names.size(),
                list.c_str());
  }
}

// The mutes in force, and those lifted because their problem grew worse (always shown:
// what was hidden is back).
void print_mutes(const json& mutes, bool all) {
  for (const json& m : mutes) {
    if (m["hides"].get<bool>() && !all) continue;
    std::string what =
        m["cause"].get<std::string>() + (m["subject"].get<std::string>().empty()
                                             ? " (every subject)"
                                             : " " + m["subject"].get<std::string>());
    std::printf(
        "mute %s until %s by %s%s: %s\n", what.c_str(), m["until"].get<std::string>().c_str(),
        m["by"].get<std::string>().c_str(), m["sticky"].get<bool>() ? ", sticky" : "",
        m["hides"].get<bool>() ? ("hides " + std::to_string(m["covers"].get<size_t>())).c_str()
                               : ("lifted, " + m["reason"].get<std::string>()).c_str());
  }
}

// `pfsnet health`: one line per problem, severest first; -v adds the evidence; muted
// problems only with --all.
void print_health(const json& h, bool verbose, bool all) {
  std::string mgs = h["mgs"].get<std::string>();
  std::string where = mgs.empty()
                          ? std::string("without the MGS's table")
                          : "MGS " + mgs + ": " + std::to_string(h["nodes_up"].get<size_t>()) +
                                " of " + std::to_string(h["nodes"].get<size_t>()) + " nodes up";
  if (h.value("judged_at", std::string()) == "mgs") where += ", judged there";
  json list = json::array();
  for (const json& p : h["problems"])
    if (all || !p.value("muted", false)) list.push_back(p);
  const size_t muted = h.value("muted", size_t(0));
  const std::string muted_note =
      muted && !all ? "; " + std::to_string(muted) + " muted (--all lists them)" : "";
  if (h.contains("mutes_error"))
    std::printf("mutes could not be had: %s\n", h["mutes_error"].get<std::string>().c_str());
  if (h.contains("mutes")) print_mutes(h["mutes"], all);
  if (list.empty()) {
    std::printf("no problems seen from %s (%s%s)\n", h["node"].get<std::string>().c_str(),
                where.c_str(), muted_note.c_str());
    return;
  }
  std::printf("%zu problem(s) seen from %s (%s%s)\n", list.size(),
              h["node"].get<std::string>().c_str(), where.c_str(), muted_note.c_str());
  // The cause column fits its widest entry (a SETTINGS problem names its code too).
  auto cause_of = [](const json& p) {
    std::string cause = p["cause"].get<std::string>();
    if (!p["code"].get<std::string>().empty()) cause += " " + p["code"].get<std::string>();
    return cause;
  };
  int width = 11;
  for (const json& p : list)
    width =
        std::max(width, static_cast<int>(cause_of(p).size()) + (p.value("muted", false) ? 8 : 0));
  std::printf("%-24s %-*s %-8s %-24s %s\n", "since", width, "cause", "what", "subject", "seen by");
  for (const json& p : list) {
    std::string cause = cause_of(p) + (p.value("muted", false) ? " (muted)" : "");
    std::printf("%-24s %-*s %-8s %-24s %s\n",
                p["since"].get<std::string>().empty() ? "-" : p["since"].get<std::string>().c_str(),
                width, cause.c_str(), p["kind"].get<std::string>().c_str(),
                p["subject"].get<std::string>().c_str(), p["seen_by"].get<std::string>().c_str());
    if (verbose) std::printf("    %s\n", p["evidence"].get<std::string>().c_str());
  }
  if (const size_t more = h.value("problems_left_off", size_t(0)))
    std::printf("... and %zu more, not listed (more than the MGS's answer carries)\n", more);
}

void print_config(const json& r) {
  std::printf("%-38s %-24s %s\n", "key", "value", "changes");
  for (const json& e : r["config"]) {
    std::string value = e["value"].get<std::string>();
    if (e.contains("in_force")) value += " (" + e["in_force"].get<std::string>() + " in force)";
    std::printf("%-38s %-24s %s\n", e["key"].get<std::string>().c_str(), value.c_str(),
                e["runtime"].get<bool>() ? "at run time" : "at restart");
  }
}

void print_changes(const json& r) {
  for (const json& c : r["changed"])
    std::printf("%s: %s -> %s\n", c["key"].get<std::string>().c_str(),
                c["from"].get<std::string>().c_str(), c["to"].get<std::string>().c_str());
  if (r["changed"].empty()) std::printf("nothing changed\n");
}

}  // namespace

void add_nis_and_peers(CLI::App& app, Invocation& inv) {
  struct Table {
    const char* cmd;
    const char* help;
    const char* title;
    const char* verbose_help;
  };
  for (const Table& t :
       {Table{"nis", "local NIs: state, credits, counters", "NI",
              "also last state change, recovery, resends, timeouts, drops, errors by kind"},
        Table{"peers", "peer NIs: state, credits, counters", "peer NI",
              "also last state change, recovery, resends, timeouts, errors by kind, NIDs, "
              "and what each path (local NI to it) carried"}}) {
    auto* sub = app.add_subcommand(t.cmd, t.help);
    auto verbose = std::make_shared<bool>(false);
    add_json_flag(sub, inv);
    sub->add_flag("-v,--verbose", *verbose, t.verbose_help);
    sub->callback([&inv, t, verbose] {
      inv.rc = request(inv, {{"cmd", t.cmd}}, std::chrono::seconds(10),
                       [&](const json& r) { print_ni_table(r[t.cmd], t.title, *verbose); });
    });
  }
}

void add_status(CLI::App& app, Invocation& inv) {
  auto* sub = app.add_subcommand("status",
                                 "the MGS's table of every node (asked through the "
                                 "local daemon): name, roles, NIDs, state, last heard");
  add_json_flag(sub, inv);
  sub->callback([&inv] {
    inv.rc = request(inv, {{"cmd", "status"}}, std::chrono::seconds(30), print_status);
  });
}

void add_health(CLI::App& app, Invocation& inv) {
  auto* sub = app.add_subcommand(
      "health",
      "what is wrong, and where: dead or suspect nodes (the MGS's table), NIs down, unhealthy "
      "or degraded (SLOW, LOSSY), slow servers and settings that do not fit, as this node "
      "sees them");
  auto verbose = std::make_shared<bool>(false);
  auto all = std::make_shared<bool>(false);
  add_json_flag(sub, inv);
  sub->add_flag("-v,--verbose", *verbose, "also the evidence: the figures that made each call");
  sub->add_flag("--all", *all, "also the muted problems, and every mute in force");
  // `pfsnet health mute CAUSE [SUBJECT] --ttl 2h [--sticky]`, `unmute CAUSE [SUBJECT]`
  // (Ceph's health mute): for the whole cluster, kept by the MGS.
  struct MuteArgs {
    std::string cause, subject, ttl = "1h";
    bool sticky = false;
  };
  auto args = std::make_shared<MuteArgs>();
  auto* mute = sub->add_subcommand(
      "mute",
      "hide a problem known and being handled from what alerts (the default list, /metrics' "
      "muted=\"0\" series), for the whole cluster, until the TTL ends or -- unless --sticky -- "
      "it grows worse");
  mute->add_option("cause", args->cause, "the cause, as pfsnet health lists it (LOSSY, ...)")
      ->required();
  mute->add_option("subject", args->subject, "only this subject (default: every one)");
  mute->add_option("--ttl", args->ttl, "how long: 90s, 30m, 2h, 1d (default 1h)");
  mute->add_flag("--sticky", args->sticky, "stay muted when the problem grows worse");
  add_json_flag(mute, inv);
  auto* unmute = sub->add_subcommand("unmute", "end a mute before its TTL");
  unmute->add_option("cause", args->cause, "the cause it names")->required();
  unmute->add_option("subject", args->subject, "the subject it names (default: none)");
  add_json_flag(unmute, inv);
  auto print = [](const json& r) {
    if (r["mutes"].empty()) std::printf("no mutes\n");
    print_mutes(r["mutes"], true);
  };
  mute->callback([&inv, args, print] {
    std::optional<double> ttl = seconds_with_unit(args->ttl);
    if (!ttl) {
      inv.rc = fail("--ttl '" + args->ttl + "': a duration such as 90s, 30m, 2h or 1d");
      return;
    }
    inv.rc = request(inv,
                     {{"cmd", "health_mute"},
                      {"cause", args->cause},
                      {"subject", args->subject},
                      {"ttl_s", *ttl},
                      {"sticky", args->sticky}},
                     std::chrono::seconds(30), print);
  });
  unmute->callback([&inv, args, print] {
    inv.rc = request(inv,
                     {{"cmd", "health_mute"},
                      {"cause", args->cause},
                      {"subject", args->subject},
                      {"clear", true}},
                     std::chrono::seconds(30), print);
  });
  sub->callback([&inv, verbose, all, sub] {
    if (!sub->get_subcommands().empty()) return;  // mute or unmute ran
    inv.rc = request(inv, {{"cmd", "health"}}, std::chrono::seconds(30),
                     [&](const json& h) { print_health(h, *verbose, *all); });
  });
}

void add_config(CLI::App& app, Invocation& inv) {
  auto* config = app.add_subcommand("config", "the daemon's effective settings");
  config->require_subcommand(1);
  auto* show =
      config->add_subcommand("show", "every setting and whether it can change at run time");
  add_json_flag(show, inv);
  show->callback([&inv] {
    inv.rc = request(inv, {{"cmd", "config_show"}}, std::chrono::seconds(10), print_config);
  });
  auto* set = config->add_subcommand("set", "change settings at run time where the key allows it");
  auto assignments = std::make_shared<std::vector<std::string>>();
  set->add_option("KEY=VALUE", *assignments, "e.g. stats.rpcPerfNumberSecondIntervals=120")
      ->required();
  add_json_flag(set, inv);
  set->callback([&inv, assignments] {
    inv.rc = request(inv, {{"cmd", "config_set"}, {"set", *assignments}}, std::chrono::seconds(10),
                     print_changes);
  });
}

}  // namespace pfsnet::cli
