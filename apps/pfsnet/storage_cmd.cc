// pfsnet storage [--json]: the block server's buffers (in use, waits), storage threads and
// targets. pfsnet file put|get NAME LOCAL --servers NID,... : a local file into a striped
// file over those block servers and back, through the local daemon's pagepool.
// pfsnet bench gpfs --servers NID,... --clients NID,... : the GPFS paper's benchmark
// (storage/iobench.h), driven by the local daemon; the paper's tables, --json, --plot.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "admin/admin_client.h"
#include "admin/iobench_views.h"
#include "cli.h"
#include "storage/iobench.h"

namespace pfsnet::cli {

namespace {

void print_storage(const json& s) {
  const json& b = s["buffers"];
  std::printf(
      "block server: block %s, %s\n", human_bytes(s["block_size"].get<uint64_t>()).c_str(),
      s["disk_mbyte"].get<double>() > 0
          ? fmt::format("disk emulated at {:.1f} MB/s per target", s["disk_mbyte"].get<double>())
                .c_str()
          : "no disk emulation");
  std::printf(
      "buffers: %zu x %s, in use %zu (max %zu), waiting %zu (max %zu); %llu handed out, "
      "%llu after a wait (%.3f s in all, longest %s ms)\n",
      b["count"].get<size_t>(), human_bytes(b["size"].get<uint64_t>()).c_str(),
      b["in_use"].get<size_t>(), b["in_use_max"].get<size_t>(), b["waiting"].get<size_t>(),
      b["waiting_max"].get<size_t>(), b["acquired"].get<unsigned long long>(),
      b["waited"].get<unsigned long long>(), b["wait_total_s"].get<double>(),
      fmt_ms(b["wait_max_ms"].get<double>()).c_str());
  const json& t = s["threads"];
  std::printf("threads: %d, busy %d, queued %llu (max %llu)\n", t["count"].get<int>(),
              t["busy"].get<int>(), t["queued"].get<unsigned long long>(),
              t["queued_max"].get<unsigned long long>());
  std::printf("%-6s %-40s %10s %10s %12s %12s %7s %12s\n", "target", "where", "writes", "reads",
              "written", "read", "errors", "disk busy s");
  for (const json& x : s["targets"])
    std::printf("%-6zu %-40.40s %10llu %10llu %12s %12s %7llu %12.3f\n", x["target"].get<size_t>(),
                x["where"].get<std::string>().c_str(), x["writes"].get<unsigned long long>(),
                x["reads"].get<unsigned long long>(),
                human_bytes(x["bytes_written"].get<uint64_t>()).c_str(),
                human_bytes(x["bytes_read"].get<uint64_t>()).c_str(),
                x["errors"].get<unsigned long long>(), x["disk_busy_s"].get<double>());
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(',', pos);
    if (c == std::string::npos) c = s.size();
    if (c > pos) out.push_back(s.substr(pos, c - pos));
    pos = c + 1;
  }
  return out;
}

void add_file_sub(CLI::App* file, Invocation& inv, bool put) {
  auto* sub = file->add_subcommand(
      put ? "put" : "get",
      put ? "write a local file into a striped file (acknowledged by every server when it "
            "returns)"
          : "read LENGTH bytes of a striped file into a local file");
  struct Args {
    std::string name, local, servers, offset = "0", length, job;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("name", a->name, "the striped file")->required();
  sub->add_option("local", a->local, put ? "the local file to read" : "the local file to write")
      ->required();
  sub->add_option("--servers", a->servers,
                  "block servers' NIDs, comma-separated; the file's layout, so always the same "
                  "list in the same order")
      ->required();
  sub->add_option("--offset", a->offset, "where in the striped file (bytes, K/M/G)");
  if (!put) sub->add_option("--length", a->length, "bytes to read (K/M/G)")->required();
  sub->add_option("--job", a->job,
                  "job id each block RPC carries (default: as the daemon's rpc.jobid_var and "
                  "rpc.jobid_name say, in this command's environment)");
  add_json_flag(sub, inv);
  sub->callback([&inv, a, put] {
    auto off = size_with_unit(a->offset);
    if (!off) {
      inv.rc = fail("--offset: '" + a->offset + "' is not a size");
      return;
    }
    json req{{"cmd", put ? "file_put" : "file_get"},
             {"name", a->name},
             {"path", std::filesystem::absolute(a->local).string()},
             {"servers", split(a->servers)},
             {"offset", *off}};
    if (const std::string job = a->job.empty() ? own_job_id(inv) : a->job; !job.empty())
      req["job_id"] = job;
    if (!put) {
      auto len = size_with_unit(a->length);
      if (!len || *len <= 0) {
        inv.rc = fail("--length: '" + a->length + "' is not a size above 0");
        return;
      }
      req["length"] = *len;
    }
    inv.rc = request(inv, req, std::chrono::minutes(60), [&](const json& r) {
      std::printf("%s %s bytes %s %s over %zu target(s) in %.3f s: %.1f MiB/s\n",
                  put ? "wrote" : "read", human_bytes(r["bytes"].get<uint64_t>()).c_str(),
                  put ? "into" : "from", r["name"].get<std::string>().c_str(),
                  r["targets"].get<size_t>(), r["seconds"].get<double>(), r["mib_s"].get<double>());
    });
  });
}

void add_bench_gpfs(CLI::App& app, Invocation& inv) {
  auto* bench = app.add_subcommand("bench", "benchmarks over the cluster");
  bench->require_subcommand(1);
  auto* sub = bench->add_subcommand(
      "gpfs",
      "the GPFS paper's benchmark: N client nodes x T threads x R sequential requests to "
      "their segments of one striped file, after a barrier; MiB/s from the job time");
  struct Args {
    std::string servers, clients, nodes, threads = "1", size = "256K", cell, ops = "write,read",
                                         file = "iobench", plot;
    int64_t requests = 2000;
    double timeout = 3600;
    bool direct = false;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--servers", a->servers, "block servers' NIDs, comma-separated (the layout)")
      ->required();
  sub->add_option("--clients", a->clients,
                  "client nodes' NIDs, comma-separated; a cell of N nodes uses the first N")
      ->required();
  sub->add_option("--nodes", a->nodes,
                  "node counts of the matrix, e.g. 1,2,4,8,16,32 (default: all)");
  sub->add_option("--threads", a->threads, "threads per node, e.g. 1,2,4,8,16 (default 1)");
  sub->add_option("--requests", a->requests, "requests per thread (default 2000, the paper's)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  sub->add_option("--cell-size", a->cell,
                  "instead of --requests: at least this many bytes per cell (K/M/G)");
  sub->add_option("--size", a->size, "bytes per request (default 256K)");
  sub->add_option("--ops", a->ops, "write, read or write,read (default; reads check the data)");
  sub->add_option("--file", a->file, "the striped file (default iobench; rewritten)");
  sub->add_option("--timeout", a->timeout, "seconds per cell and operation (default 3600)")
      ->check(CLI::Range(1.0, 86400.0));
  sub->add_option("--plot", a->plot, "write an SVG chart: MiB/s by nodes, a line per thread count");
  sub->add_flag("--direct", a->direct,
                "writes as O_DIRECT's: from the application's memory, no pagepool copy, each "
                "returning once acknowledged");
  add_json_flag(sub, inv);
  sub->callback([&inv, a] {
    auto counts = [](const std::string& text, json* out) {
      for (const std::string& x : split(text)) {
        try {
          size_t used = 0;
          int v = std::stoi(x, &used);
          if (used != x.size()) return false;
          out->push_back(v);
        } catch (...) {
          return false;
        }
      }
      return !out->empty();
    };
    std::vector<std::string> clients = split(a->clients);
    json nodes = json::array(), threads = json::array();
    if (a->nodes.empty()) {
      for (size_t n = 1; n <= clients.size(); ++n) nodes.push_back(n);
    } else if (!counts(a->nodes, &nodes)) {
      inv.rc = fail("--nodes: a list of counts like 1,2,4");
      return;
    }
    if (!counts(a->threads, &threads)) {
      inv.rc = fail("--threads: a list of counts like 1,2,4");
      return;
    }
    auto size = size_with_unit(a->size);
    if (!size || *size <= 0) {
      inv.rc = fail("--size: '" + a->size + "' is not a size");
      return;
    }
    json req{{"cmd", "iobench"},        {"servers", split(a->servers)}, {"clients", clients},
             {"nodes", nodes},          {"threads", threads},           {"requests", a->requests},
             {"size", *size},           {"ops", split(a->ops)},         {"file", a->file},
             {"timeout_s", a->timeout}, {"direct", a->direct}};
    if (!a->cell.empty()) {
      auto cell = size_with_unit(a->cell);
      if (!cell || *cell <= 0) {
        inv.rc = fail("--cell-size: '" + a->cell + "' is not a size");
        return;
      }
      req["cell_bytes"] = *cell;
    }
    auto limit = std::chrono::milliseconds(static_cast<int64_t>(
        (a->timeout + 120) * 1000 * double(nodes.size() * threads.size() * 2)));
    bool human = !inv.json;
    auto r = admin_request(inv.socket, req, limit, [&](const json& ev) {
      if (!human || ev.value("event", "") != "cell") return;
      std::printf(
          "%2d nodes x %2d threads %-5s %8.1f MiB/s  job %.3f s  %s  CPU: clients "
          "%.2f, servers %.2f cores\n",
          ev["nodes"].get<int>(), ev["threads"].get<int>(), ev["op"].get<std::string>().c_str(),
          ev["mib_s"].get<double>(), ev["job_s"].get<double>(),
          human_bytes(ev["bytes"].get<uint64_t>()).c_str(), ev["client_cpu"].get<double>(),
          ev["server_cpu"].get<double>());
      std::fflush(stdout);
    });
    if (!r.ok()) {
      inv.rc = fail(r.status().message());
      return;
    }
    if (!a->plot.empty()) {
      std::ofstream out(a->plot);
      out << iobench_svg(*r);
      if (!out) inv.rc = fail("cannot write " + a->plot);
    }
    if (inv.json) {
      std::printf("%s\n", r->dump().c_str());
      return;
    }
    std::printf("\n%s", iobench_tables(*r).c_str());
    for (const json& c : (*r)["cells"])
      if (c["errors"].get<uint64_t>() > 0) {
        std::printf("%d nodes x %d threads %s: %llu errors, first: %s\n", c["nodes"].get<int>(),
                    c["threads"].get<int>(), c["op"].get<std::string>().c_str(),
                    c["errors"].get<unsigned long long>(),
                    c["first_error"].get<std::string>().c_str());
        inv.rc = 1;
      }
  });
}

}  // namespace

void add_storage(CLI::App& app, Invocation& inv) {
  add_bench_gpfs(app, inv);
  auto* sub = app.add_subcommand(
      "storage", "the block server: its buffers (use and waits), threads and targets");
  add_json_flag(sub, inv);
  sub->callback([&inv] {
    inv.rc = request(inv, {{"cmd", "storage"}}, std::chrono::seconds(10), print_storage);
  });
  auto* file = app.add_subcommand("file", "striped files over block servers");
  file->require_subcommand(1);
  add_file_sub(file, inv, true);
  add_file_sub(file, inv, false);
}

}  // namespace pfsnet::cli
