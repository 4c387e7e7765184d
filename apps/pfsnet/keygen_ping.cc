// pfsnet keygen [--next|--commit|--retire] FILE; pfsnet ping NID [--count N] [--size B]
// [--mode M] [--interval S].
#include <fcntl.h>
#include <openssl/rand.h>
#include <pfsnet/nid.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "admin/admin_client.h"
#include "base/job_id.h"
#include "cli.h"

namespace pfsnet::cli {

namespace {

// 32 random bytes into `path`, which must not exist (mode 0600); "" or what went wrong.
std::string write_new_key(const std::string& path) {
  unsigned char key[32];
  if (RAND_bytes(key, sizeof(key)) != 1) return "cannot get random bytes";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create " + path + ": " + std::strerror(errno) + " (it must not exist)";
  bool ok = write(fd, key, sizeof(key)) == static_cast<ssize_t>(sizeof(key));
  fchmod(fd, 0600);
  ok = fsync(fd) == 0 && ok;
  close(fd);
  return ok ? "" : "cannot write " + path;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// A rotation of the cluster key with no downtime, as `mmauth genkey new` / `commit`
// (docs/security.md): --next writes FILE.next, which every node takes in (SIGHUP) and then
// accepts beside its key; --commit makes it FILE, the old one FILE.prev (still accepted);
// --retire removes FILE.prev once every node has committed. Files only: the daemon reads
// them when it starts and on SIGHUP.
enum class KeyStep { kNew, kNext, kCommit, kRetire };

int keygen(const std::string& path, KeyStep step, bool json_out) {
  const std::string next = path + ".next", prev = path + ".prev";
  std::string done;
  switch (step) {
    case KeyStep::kNew:
      if (std::string e = write_new_key(path); !e.empty()) return fail(e);
      done = "wrote a 32-byte cluster key to " + path + " (mode 0600); copy it to every node";
      break;
    case KeyStep::kNext:
      if (!exists(path)) return fail(path + " does not exist: a rotation starts from a key");
      if (exists(prev))
        return fail(prev + " exists: the last rotation was not retired (pfsnet keygen --retire " +
                    path + " on every node first)");
      if (std::string e = write_new_key(next); !e.empty()) return fail(e);
      done = "wrote the next cluster key to " + next + "; copy it to every node beside " + path +
             " and reload each pfsnetd (SIGHUP): each then accepts it, and still proves with " +
             path + "; then pfsnet keygen --commit " + path + " on every node";
      break;
    case KeyStep::kCommit:
      if (!exists(next))
        return fail(next + " does not exist: pfsnet keygen --next " + path +
                    " first, and copy it to every node");
      if (exists(prev)) return fail(prev + " exists: retire it first (pfsnet keygen --retire)");
      if (rename(path.c_str(), prev.c_str()) != 0)
        return fail("cannot rename " + path + " to " + prev + ": " + std::strerror(errno));
      if (rename(next.c_str(), path.c_str()) != 0) {
        std::string e = std::strerror(errno);
        (void)rename(prev.c_str(), path.c_str());
        return fail("cannot rename " + next + " to " + path + ": " + e);
      }
      done = "committed: " + path + " now holds the new key, the old one is " + prev +
             " (still accepted); reload pfsnetd (SIGHUP) to prove with the new key; once every "
             "node has committed, pfsnet keygen --retire " +
             path + " on every node";
      break;
    case KeyStep::kRetire:
      if (exists(next))
        return fail(next + " exists: this node has not committed (pfsnet keygen --commit " + path +
                    ")");
      if (!exists(prev)) return fail(prev + " does not exist: nothing to retire");
      if (unlink(prev.c_str()) != 0)
        return fail("cannot remove " + prev + ": " + std::strerror(errno));
      done = "removed " + prev + "; reload pfsnetd (SIGHUP): the old key is no longer accepted";
      break;
  }
  if (json_out) {
    json j = {{"path", path}, {"message", done}};
    j["step"] = step == KeyStep::kNew      ? "new"
                : step == KeyStep::kNext   ? "next"
                : step == KeyStep::kCommit ? "commit"
                                           : "retire";
    if (step == KeyStep::kNew || step == KeyStep::kNext) {  // a key was written
      j["written"] = step == KeyStep::kNew ? path : next;
      j["bytes"] = 32;
      j["mode"] = "0600";
    }
    std::cout << j.dump() << "\n";
  } else {
    std::printf("%s\n", done.c_str());
  }
  return 0;
}

struct PingArgs {
  std::string nid;
  int64_t count = 4, size = 0;
  double timeout = 5, interval = 0;
  std::string mode = "echo";
  std::string job, trace;  // empty: none
  bool wait = false;
};

int ping(Invocation& inv, const PingArgs& a) {
  auto nid = Nid::parse(a.nid);
  if (!nid.ok()) return fail(nid.status().message());
  json req = {{"cmd", "ping"},         {"nid", nid->to_string()}, {"count", a.count},
              {"size", a.size},        {"timeout", a.timeout},    {"mode", a.mode},
              {"interval", a.interval}};
  if (const std::string job = a.job.empty() ? own_job_id(inv) : a.job; !job.empty())
    req["job_id"] = job;
  if (!a.trace.empty()) req["trace"] = a.trace;
  if (a.wait) req["wait"] = true;
  auto limit = std::chrono::milliseconds(
      static_cast<int64_t>((a.timeout + a.interval + 1) * 1000 * double(a.count)) + 5000);
  if (!inv.json)
    std::printf("PING %s: %lld bytes of bulk, %lld round trips\n", nid->to_string().c_str(),
                (long long)a.size, (long long)a.count);
  auto r = admin_request(inv.socket, req, limit, [&](const json& ev) {
    if (inv.json) return;
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
  if (inv.json) {
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

}  // namespace

// This process's job id when --job names none: the daemon's rpc.jobid_var and
// rpc.jobid_name (base/job_id.h) resolved here -- a batch job's SLURM_JOB_ID is in the
// environment of the `pfsnet` it runs, not of the daemon. "" when the rule gives none or the
// daemon's settings cannot be had (the ping itself then says why).
std::string own_job_id(const Invocation& inv) {
  auto r = admin_request(inv.socket, {{"cmd", "config_show"}}, std::chrono::seconds(5));
  if (!r.ok()) return {};
  JobIdRule rule;
  for (const json& e : r->value("config", json::array())) {
    const std::string key = e.value("key", std::string());
    if (key != "rpc.jobid_var" && key != "rpc.jobid_name") continue;
    // The value as the config file writes it: a TOML string.
    std::string v;
    try {
      toml::table t = toml::parse("v = " + e.value("value", std::string()));
      v = t["v"].value_or(std::string());
    } catch (const toml::parse_error&) {
      return {};
    }
    (key == "rpc.jobid_var" ? rule.var : rule.name) = std::move(v);
  }
  return resolve_job_id(rule);
}

void add_keygen(CLI::App& app, Invocation& inv) {
  auto* sub = app.add_subcommand(
      "keygen", "write a new random 32-byte cluster key (mode 0600), or rotate one");
  auto path = std::make_shared<std::string>();
  auto flags = std::make_shared<std::array<bool, 3>>();
  sub->add_option("FILE", *path, "the key file (node.cluster_key_file); a new one must not exist")
      ->required();
  auto* next = sub->add_flag("--next", (*flags)[0],
                             "rotation, step 1: write FILE.next, to copy to every node");
  auto* commit = sub->add_flag("--commit", (*flags)[1],
                               "step 2, on every node: FILE.next becomes FILE, FILE becomes "
                               "FILE.prev (still accepted)");
  auto* retire = sub->add_flag("--retire", (*flags)[2],
                               "step 3, once every node has committed: remove FILE.prev");
  next->excludes(commit)->excludes(retire);
  commit->excludes(retire);
  add_json_flag(sub, inv);
  sub->callback([&inv, path, flags] {
    KeyStep step = (*flags)[0]   ? KeyStep::kNext
                   : (*flags)[1] ? KeyStep::kCommit
                   : (*flags)[2] ? KeyStep::kRetire
                                 : KeyStep::kNew;
    inv.rc = keygen(*path, step, inv.json);
  });
}

void add_ping(CLI::App& app, Invocation& inv) {
  auto* sub = app.add_subcommand("ping", "RPC round trips to a NID through the local daemon");
  auto a = std::make_shared<PingArgs>();
  sub->add_option("NID", a->nid, "target, e.g. 127.0.0.3@tcp")->required();
  sub->add_option("--count,-c", a->count, "round trips (default 4)")
      ->check(CLI::Range(int64_t(1), int64_t(1000000)));
  sub->add_option("--size,-s", a->size, "bulk bytes sent and echoed back (default 0)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  sub->add_option("--timeout", a->timeout, "seconds to wait for each reply (default 5)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--mode", a->mode,
                  "echo: PING carries --size bytes both ways (default); write: BRW_WRITE "
                  "sends them; read: BRW_READ fetches them")
      ->check(CLI::IsMember({"echo", "write", "read"}));
  sub->add_option("--interval,-i", a->interval, "seconds between round trips (default 0)")
      ->check(CLI::Range(0.0, 60.0));
  sub->add_option("--job", a->job,
                  "job id each RPC carries (1-64 printable bytes; wire version 2: the server "
                  "sees it)");
  sub->add_option("--trace", a->trace,
                  "W3C traceparent each RPC carries, 00-<32 hex>-<16 hex>-<2 hex>");
  sub->add_flag("--wait", a->wait,
                "wait for a peer that restarts (within --timeout), as a block write does, "
                "instead of failing after lnet.retry_count refused connects");
  sub->add_flag("--json", inv.json, "print the summary as JSON");
  sub->callback([&inv, a] { inv.rc = ping(inv, *a); });
}

}  // namespace pfsnet::cli
