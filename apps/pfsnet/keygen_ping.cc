// pfsnet keygen FILE; pfsnet ping NID [--count N] [--size B] [--mode M] [--interval S].
#include <fcntl.h>
#include <openssl/rand.h>
#include <pfsnet/nid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "admin/admin_client.h"
#include "cli.h"

namespace pfsnet::cli {

namespace {

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
  if (!a.job.empty()) req["job_id"] = a.job;
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

void add_keygen(CLI::App& app, Invocation& inv) {
  auto* sub = app.add_subcommand("keygen", "write a new random 32-byte cluster key (mode 0600)");
  auto path = std::make_shared<std::string>();
  sub->add_option("FILE", *path, "where to write the key; must not exist")->required();
  add_json_flag(sub, inv);
  sub->callback([&inv, path] { inv.rc = keygen(*path, inv.json); });
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
