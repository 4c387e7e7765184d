// pfsnet diag rpc [node[=NID]|size|message|mesh|all] [N{s|m|h|d}] [-Y] [--json]: the RPC
// statistics as mmdiag --rpc shows them. diag ops: the RPCs in flight and the slowest lately.
// diag jobs [--by bytes|rpcs|time] [--top K] [--interval S]: per job and per client.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <thread>

#include "cli.h"

namespace pfsnet::cli {

namespace {

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
  static const char* kProbeStats[] = {"mesh_rtt", "mesh_write", "mesh_read", "mesh_lost"};
  for (const json& p : r.value("probes", json::array()))
    for (const char* k : kProbeStats)
      if (p["stats"].contains(k))
        f("path", p["local"].get<std::string>() + " -> " + p["peer"].get<std::string>(), p["node"],
          k, p["stats"][k]);
}

constexpr const char* kGranularities[] = {"second", "minute", "hour", "day"};

void print_diag_rpc(const json& r) {
  std::printf(
      "RPC statistics: average, minimum and maximum in milliseconds, and count, per interval\n");
  std::printf("raw records dropped: stat %llu, exec %llu\n",
              r["dropped"]["stat"].get<unsigned long long>(),
              r["dropped"]["exec"].get<unsigned long long>());
  if (r.contains("reply_cache")) {
    const json& c = r["reply_cache"];
    auto u = [&](const char* k) { return c[k].get<unsigned long long>(); };
    std::printf("reply cache: %llu clients, %llu requests remembered, %llu bytes\n", u("clients"),
                u("entries"), u("bytes"));
    std::printf(
        "  resent copies: %llu answered from the cache, %llu while running, %llu after "
        "the client finished\n",
        u("replayed"), u("running_copies"), u("finished_copies"));
    std::printf("  unacknowledged: at most %llu of one client (window %llu), %llu DONE messages\n",
                u("max_entries"), u("window"), u("done_acks"));
    std::printf("  refused over the window: %llu; outcome unknown (client's state gone): %llu\n",
                u("over_window"), u("unknown"));
    std::printf("  outcome unknown (a copy that may have come before this server started): %llu\n",
                c.value("before_start", 0ULL));
  }
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
        // The percentiles of the newest minute, below it (the JSON has them for each).
        bool quantiles = std::string(g) == "minute" && &i == &v[g].back() && i.contains("p50_ms");
        std::printf("    %-6s %s  avg/min/max = %9s/%9s/%9s  cnt = %lld", g,
                    utc(i["start"].get<int64_t>()).c_str(),
                    fmt_ms(i["avg_ms"].get<double>()).c_str(),
                    fmt_ms(i["min_ms"].get<double>()).c_str(),
                    fmt_ms(i["max_ms"].get<double>()).c_str(), i["count"].get<long long>());
        if (quantiles)
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

struct DiagArgs {
  std::vector<std::string> args;
  bool colon = false;
};

int diag_rpc(Invocation& inv, const DiagArgs& a) {
  json req = {{"cmd", "diag_rpc"}};
  bool have_what = false, have_interval = false;
  for (const std::string& arg : a.args) {
    bool is_interval = !arg.empty() && std::isdigit(static_cast<unsigned char>(arg[0]));
    if (is_interval) {
      if (have_interval) return fail("diag rpc takes one interval (e.g. 60s)");
      req["interval"] = arg;
      have_interval = true;
      continue;
    }
    if (have_what) return fail("diag rpc takes one of node[=NAME], size, message, mesh, all");
    have_what = true;
    if (arg.rfind("node=", 0) == 0) {
      req["what"] = "node";
      req["node"] = arg.substr(5);
    } else {
      req["what"] = arg;
    }
  }
  return request(inv, req, std::chrono::seconds(10), [&](const json& r) {
    if (a.colon)
      print_diag_rpc_y(r);
    else
      print_diag_rpc(r);
  });
}

// `pfsnet diag ops`: one line per RPC, oldest first, like mmdiag --waiters; --history: the
// slowest that ended lately, each with its timeline.
void print_op(const json& o) {
  std::string who = o["side"] == "client" ? "to " : "from ";
  std::string tags;
  if (!o["job"].get<std::string>().empty()) tags += " job " + o["job"].get<std::string>();
  if (!o["trace"].get<std::string>().empty()) tags += " trace " + o["trace"].get<std::string>();
  if (o.contains("duration_ms")) {
    std::printf("%-6s %-18s xid %-8llu %s%s%s: %.3f s, %s\n", o["side"].get<std::string>().c_str(),
                o["type"].get<std::string>().c_str(), o["xid"].get<unsigned long long>(),
                who.c_str(), o["peer"].get<std::string>().c_str(), tags.c_str(),
                o["duration_ms"].get<double>() / 1000, o["status"].get<std::string>().c_str());
    if (o.contains("blame"))
      std::printf("    %s\n", o["blame"]["verdict"].get<std::string>().c_str());
    for (const json& e : o["events"])
      std::printf("    +%10.3f ms  %s\n", e["at_ms"].get<double>(),
                  e["what"].get<std::string>().c_str());
    return;
  }
  std::printf("%-6s %-18s xid %-8llu %s%s%s: %.3f s old, %s for %.3f s: %s\n",
              o["side"].get<std::string>().c_str(), o["type"].get<std::string>().c_str(),
              o["xid"].get<unsigned long long>(), who.c_str(), o["peer"].get<std::string>().c_str(),
              tags.c_str(), o["age_ms"].get<double>() / 1000, o["phase"].get<std::string>().c_str(),
              o["in_phase_ms"].get<double>() / 1000, o["detail"].get<std::string>().c_str());
}

void print_diag_ops(const json& r) {
  const json& now = r["in_flight"];
  std::printf("%zu RPC(s) in flight on %s%s\n", now.size(), r["node"].get<std::string>().c_str(),
              now.empty() ? "" : ", oldest first:");
  for (const json& o : now) print_op(o);
  if (r.contains("history")) {
    std::printf("the %zu slowest RPC(s) that ended lately, slowest first:\n", r["history"].size());
    for (const json& o : r["history"]) print_op(o);
  }
}

// `pfsnet diag jobs`: the top jobs and clients of this node as a server, like lljobstat.
// With --interval S: what each did in those S seconds (two samples' difference), per second.
struct JobsArgs {
  std::string by = "bytes";
  int64_t top = 10;
  double interval = 0;
};

// b - a for every job (client) of b, per second over `seconds`; the `other` entries too.
json job_rates(const json& a, const json& b, double seconds) {
  auto rate = [&](const json& now, const json* before) {
    json r = now;
    for (const char* k : {"rpcs", "bytes_in", "bytes_out"}) {
      double d = now[k].get<double>() - (before ? (*before)[k].get<double>() : 0.0);
      r[k] = std::max(0.0, d) / seconds;
    }
    for (const char* k : {"exec_ms", "queue_ms"})
      r[k] = std::max(0.0, now[k].get<double>() - (before ? (*before)[k].get<double>() : 0.0)) /
             seconds;
    return r;
  };
  json out = b;
  for (const char* table : {"jobs", "clients"}) {
    std::map<std::string, const json*> prev;
    for (const json& e : a[table]["top"]) prev[e["key"].get<std::string>()] = &e;
    json top = json::array();
    for (const json& e : b[table]["top"]) {
      auto it = prev.find(e["key"].get<std::string>());
      top.push_back(rate(e, it == prev.end() ? nullptr : it->second));
    }
    out[table]["top"] = top;
    out[table]["other"] = rate(b[table]["other"], &a[table]["other"]);
  }
  out["interval_s"] = seconds;
  return out;
}

void print_job_table(const char* what, const json& t, const std::string& by, int64_t top,
                     bool rates) {
  // Largest first by `by` (rates change the order the daemon sorted the totals in).
  std::vector<json> rows(t["top"].begin(), t["top"].end());
  const char* key = by == "rpcs" ? "rpcs" : by == "time" ? "exec_ms" : nullptr;
  auto measure = [&](const json& e) {
    return key ? e[key].get<double>() : e["bytes_in"].get<double>() + e["bytes_out"].get<double>();
  };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const json& x, const json& y) { return measure(x) > measure(y); });
  const json& other = t["other"];
  if (top > 0 && rows.size() > size_t(top)) rows.resize(size_t(top));
  std::printf("%s (%zu kept, %llu more in other%s):\n", what, t["kept"].get<size_t>(),
              other["keys"].get<unsigned long long>(), rates ? "; per second" : "");
  std::printf("  %-24s %12s %12s %12s %10s %10s %12s\n", what, rates ? "rpcs/s" : "rpcs",
              rates ? "in/s" : "in", rates ? "out/s" : "out", "p50 ms", "p99 ms",
              rates ? "queued ms/s" : "queued ms");
  auto row = [&](const json& e, const std::string& name) {
    std::printf("  %-24s %12.*f %12s %12s %10.3f %10.3f %12.3f\n", name.c_str(), rates ? 1 : 0,
                e["rpcs"].get<double>(), human_bytes(uint64_t(e["bytes_in"].get<double>())).c_str(),
                human_bytes(uint64_t(e["bytes_out"].get<double>())).c_str(),
                e["p50_ms"].get<double>(), e["p99_ms"].get<double>(), e["queue_ms"].get<double>());
  };
  for (const json& e : rows) row(e, e["key"].get<std::string>().empty() ? "-" : e["key"]);
  if (other["rpcs"].get<double>() > 0) row(other, "other");
}

int diag_jobs(Invocation& inv, const JobsArgs& a) {
  if (a.by != "bytes" && a.by != "rpcs" && a.by != "time")
    return fail("--by takes bytes, rpcs or time");
  if (a.top < 0) return fail("--top must be 0 or more");
  if (a.interval < 0 || a.interval > 3600) return fail("--interval must be 0..3600 seconds");
  auto human = [a](const json& r) {
    const bool rates = r.contains("interval_s");
    std::printf("node %s, by %s%s\n", r["node"].get<std::string>().c_str(), a.by.c_str(),
                rates ? (", over " + fmt_ms(r["interval_s"].get<double>()) + " s").c_str() : "");
    print_job_table("job", r["jobs"], a.by, a.top, rates);
    print_job_table("client", r["clients"], a.by, a.top, rates);
  };
  const json req = {{"cmd", "diag_jobs"}, {"by", a.by}, {"top", a.interval > 0 ? 0 : a.top}};
  if (a.interval <= 0) return request(inv, req, std::chrono::seconds(10), human);
  // Two samples of every entry kept, `interval` apart.
  Invocation quiet = inv;
  quiet.json = false;
  json first, second;
  int rc = request(quiet, req, std::chrono::seconds(10), [&](const json& r) { first = r; });
  if (rc != 0) return rc;
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(a.interval));
  rc = request(quiet, req, std::chrono::seconds(10), [&](const json& r) { second = r; });
  if (rc != 0) return rc;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json rates = job_rates(first, second, seconds);
  if (inv.json)
    std::printf("%s\n", rates.dump().c_str());
  else
    human(rates);
  return 0;
}

}  // namespace

void add_diag(CLI::App& app, Invocation& inv) {
  auto* diag = app.add_subcommand("diag", "daemon diagnostics");
  diag->require_subcommand(1);
  auto* sub = diag->add_subcommand(
      "rpc", "RPC statistics, like mmdiag --rpc: [node[=NAME]|size|message|mesh|all] [N{s|m|h|d}]");
  auto a = std::make_shared<DiagArgs>();
  sub->add_option("ARGS", a->args,
                  "node (default), node=NID, size, message, mesh (the probe mesh's paths) or all; "
                  "and/or 60s, 5m, 2h, 30d");
  sub->add_flag("-Y", a->colon, "colon-separated rows with a header row");
  add_json_flag(sub, inv);
  sub->callback([&inv, a] { inv.rc = diag_rpc(inv, *a); });
  auto* ops = diag->add_subcommand(
      "ops",
      "the RPCs in flight now, as client and as server, oldest first, each in its phase "
      "(like mmdiag --waiters); --history: the slowest that ended lately, with timelines");
  auto history = std::make_shared<bool>(false);
  ops->add_flag("--history", *history, "also the slowest RPCs that ended lately (rpc.ops_history)");
  add_json_flag(ops, inv);
  ops->callback([&inv, history] {
    inv.rc = request(inv, {{"cmd", "diag_ops"}, {"history", *history}}, std::chrono::seconds(10),
                     print_diag_ops);
  });
  auto* jobs = diag->add_subcommand(
      "jobs",
      "what each job and each client asked of this node as a server (RPCs, bytes, execution "
      "p50/p99, time queued), the top by bytes, rpcs or time, like lljobstat");
  auto ja = std::make_shared<JobsArgs>();
  jobs->add_option("--by", ja->by, "bytes (default), rpcs or time (execution)");
  jobs->add_option("--top", ja->top, "how many of each (default 10; 0: every one kept)");
  jobs->add_option("--interval", ja->interval,
                   "seconds: what each did over that long, per second (two samples)");
  add_json_flag(jobs, inv);
  jobs->callback([&inv, ja] { inv.rc = diag_jobs(inv, *ja); });
}

}  // namespace pfsnet::cli
