// The block service's admin commands: `storage` (the block server's buffers, threads and
// targets), `file_put` and `file_get` (a local file into a striped file and back, through
// this node's pagepool), for `pfsnet storage` and `pfsnet file`; `iobench` (the GPFS
// paper's benchmark, storage/iobench.h) for `pfsnet bench gpfs`.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "admin/node_commands.h"
#include "base/json_fields.h"
#include "storage/block_store.h"
#include "storage/iobench.h"
#include "storage/striped_file.h"
#include "tune/storage_rules.h"

namespace pfsnet {

namespace {

using nlohmann::json;

constexpr size_t kChunk = 4 << 20;  // bytes per striped-file call

double secs(Duration d) { return std::chrono::duration<double>(d).count(); }

json storage_json(const BlockServiceStats& s) {
  json targets = json::array();
  for (size_t i = 0; i < s.targets.size(); ++i) {
    const TargetStats& t = s.targets[i];
    targets.push_back({{"target", i},
                       {"where", t.where},
                       {"writes", t.writes},
                       {"reads", t.reads},
                       {"bytes_written", t.bytes_written},
                       {"bytes_read", t.bytes_read},
                       {"errors", t.errors},
                       {"disk_busy_s", secs(t.busy)}});
  }
  const BlockBufferStats& b = s.buffers;
  return {{"serving", s.serving},
          {"block_size", s.block_size},
          {"disk_mbyte", s.disk_bytes_per_s / (1024 * 1024)},
          {"buffers",
           {{"count", b.buffers},
            {"size", b.buffer_size},
            {"in_use", b.in_use},
            {"in_use_max", b.in_use_max},
            {"waiting", b.waiting},
            {"waiting_max", b.waiting_max},
            {"acquired", b.acquired},
            {"waited", b.waited},
            {"wait_total_s", secs(b.wait_total)},
            {"wait_max_ms", to_ms(b.wait_max)}}},
          {"threads",
           {{"count", s.threads.threads},
            {"busy", s.threads.busy},
            {"queued", s.threads.queued},
            {"queued_max", s.threads.queued_max}}},
          {"targets", targets},
          {"evicted_refused", s.evicted_refused},
          {"resends_answered", s.resends_answered},
          {"resends_unknown", s.resends_unknown}};
}

// This node's byte-range tokens: as a manager and as a client.
json tokens_json(const TokenStats& t) {
  return {{"granted", t.granted},
          {"read_grants", t.read_grants},
          {"revocations", t.revocations},
          {"downgrades", t.downgrades},
          {"holders_dropped", t.holders_dropped},
          {"holders_evicted", t.holders_evicted},
          {"fence_waits", t.fence_waits},
          {"stale_releases", t.stale_releases},
          {"acquired", t.acquired},
          {"revoked", t.revoked},
          {"evictions", t.evictions}};
}

struct FileArgs {
  std::string name, path;
  std::vector<Nid> servers;
  uint64_t offset = 0;
  int64_t length = -1;  // get: bytes to read (required)
};

Result<FileArgs> parse_file_args(const json& req, bool get) {
  FileArgs a;
  if (!req.contains("name") || !req["name"].is_string())
    return Status(Code::kInvalidArgument, "name: the striped file's name is required");
  a.name = req["name"].get<std::string>();
  if (Status s = check_file_name(a.name); !s.ok()) return s;
  if (!req.contains("path") || !req["path"].is_string() || req["path"].get<std::string>().empty() ||
      req["path"].get<std::string>()[0] != '/')
    return Status(Code::kInvalidArgument, "path: an absolute path of a local file is required");
  a.path = req["path"].get<std::string>();
  if (!req.contains("servers") || !req["servers"].is_array() || req["servers"].empty())
    return Status(Code::kInvalidArgument,
                  "servers: the block servers' NIDs are required, in the file's order");
  for (const json& s : req["servers"]) {
    if (!s.is_string()) return Status(Code::kInvalidArgument, "servers: NIDs only");
    auto n = Nid::parse(s.get<std::string>());
    if (!n.ok()) return Status(Code::kInvalidArgument, "servers: " + n.status().message());
    a.servers.push_back(*n);
  }
  auto off = json_int(req, "offset", 0, 0, int64_t{1} << 50);
  if (!off.ok()) return off.status();
  a.offset = static_cast<uint64_t>(*off);
  if (get) {
    auto len = json_int(req, "length", -1, -1, int64_t{1} << 40);
    if (!len.ok()) return len.status();
    if (*len <= 0)
      return Status(Code::kInvalidArgument, "length: the bytes to read (at least 1) are required");
    a.length = *len;
  }
  return a;
}

Status sys(const std::string& what) {
  return Status(Code::kInvalidArgument, what + ": " + std::strerror(errno));
}

// Copies between a local file and a striped file; `put`: local -> striped.
Result<json> transfer(const NodeParts& n, const json& req, bool put) {
  auto a = parse_file_args(req, !put);
  if (!a.ok()) return a.status();
  StripedFileOptions fo = n.cfg.read([](const Config& c) { return StripedFileOptions::from(c); });
  if (n.cfg.read([](const Config& c) { return c.storage.tokens; })) fo.tokens = n.tokens;
  fo.job_id = req.value("job_id", std::string());  // the CLI's (its environment's) job
  auto f = StripedFile::open(n.rpc, a->name, a->servers, fo);
  if (!f.ok()) return f.status();
  int fd = put ? ::open(a->path.c_str(), O_RDONLY | O_CLOEXEC)
               : ::open(a->path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return sys("open " + a->path);
  // Calls end on block boundaries, so no block is sent in two parts.
  const uint64_t bs = (*f)->layout().block_size();
  const size_t chunk = std::max<size_t>(kChunk, bs);
  std::vector<uint8_t> buf(chunk);
  uint64_t done = 0;
  TimePoint start = n.clock.now();
  Status s;
  for (;;) {
    size_t want = chunk - (a->offset + done) % bs;
    if (!put) want = std::min<uint64_t>(want, uint64_t(a->length) - done);
    if (want == 0) break;
    if (put) {
      ssize_t got = ::read(fd, buf.data(), want);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        s = sys("read " + a->path);
        break;
      }
      if (got == 0) break;
      s = (*f)->write(a->offset + done, std::span(buf.data(), size_t(got)));
      if (!s.ok()) break;
      done += size_t(got);
    } else {
      s = (*f)->read(a->offset + done, std::span(buf.data(), want));
      if (!s.ok()) break;
      size_t w = 0;
      while (w < want) {
        ssize_t k = ::write(fd, buf.data() + w, want - w);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        w += size_t(k);
      }
      if (w < want) {
        s = sys("write " + a->path);
        break;
      }
      done += want;
    }
  }
  ::close(fd);
  Status c = (*f)->close();  // a put is done when every block is acknowledged
  if (s.ok()) s = c;
  if (!s.ok()) return s;
  double t = secs(n.clock.now() - start);
  StripedFileStats st = (*f)->stats();
  return json{{"name", a->name},
              {"bytes", done},
              {"seconds", t},
              {"mib_s", t > 0 ? double(done) / (1 << 20) / t : 0.0},
              {"targets", (*f)->layout().targets().size()},
              {"block_size", (*f)->layout().block_size()},
              {"block_rpcs", put ? st.block_writes : st.block_reads},
              {"prefetched", st.prefetched},
              {"prefetch_stops", st.prefetch_stops},
              {"read_into_caller", st.read_into_caller},
              {"reads_cut_off", st.reads_cut_off}};
}

}  // namespace

// The figures the rules take, each from the first that has it: the request (--storage-mbyte,
// --turnaround-ms), the emulated disk (throughput: its rate x the targets), this server's
// statistics of the last minute (measure_block_service).
Result<json> storage_advice_json(const NodeParts& n, const json& req) {
  StorageMeasure m;
  std::string throughput_from, turnaround_from;
  n.cfg.read([&](const Config& c) {
    m.block_size = static_cast<uint32_t>(c.storage.block_size);
    m.buffers = c.storage.buffers;
    m.prefetch_depth = c.storage.prefetch_depth;
    m.pagepool = c.storage.pagepool;
    m.throughput = c.storage.disk_mbyte * 1024 * 1024 * double(c.storage.targets.size());
  });
  if (m.throughput > 0) throughput_from = "storage.disk_mbyte x targets";
  auto rs = json_int(req, "request_size", 0, 0, int64_t{1} << 30);
  if (!rs.ok()) return rs.status();
  m.request_bytes = double(*rs);
  auto tp = json_number(req, "storage_mbyte", 0, 0, 1e7);
  if (!tp.ok()) return tp.status();
  if (*tp > 0) {
    m.throughput = *tp * 1024 * 1024;
    throughput_from = "--storage-mbyte";
  }
  auto ta = json_number(req, "turnaround_ms", 0, 0, 1e6);
  if (!ta.ok()) return ta.status();
  m.turnaround_s = *ta / 1000;
  if (m.turnaround_s > 0) turnaround_from = "--turnaround-ms";
  StatsQuery q;
  q.what = StatsQuery::What::kMessage;
  q.granularity = Granularity::kSecond;
  q.last = 60;
  StorageMeasured measured = measure_block_service(n.stats.query(q), m.block_size);
  if (m.throughput == 0 && measured.throughput > 0) {
    m.throughput = measured.throughput;
    throughput_from = measured.source + " (the busiest second: a lower bound)";
  }
  if (m.turnaround_s == 0 && measured.turnaround_s > 0) {
    m.turnaround_s = measured.turnaround_s;
    turnaround_from = measured.source;
  }
  StorageAdvice a = advise_storage(m);
  json problems = json::array();
  for (const TuneProblem& p : a.problems) problems.push_back({{"code", p.code}, {"text", p.text}});
  return json{
      {"block_size", {{"current", m.block_size}, {"recommended", a.block_size}}},
      {"buffers",
       {{"current", m.buffers}, {"recommended", a.buffers}, {"needed", a.buffers_needed}}},
      {"prefetch_depth", {{"current", m.prefetch_depth}, {"recommended", a.prefetch_depth}}},
      {"request_share", a.request_share},
      {"request_mbyte", a.request_rate / (1024 * 1024)},
      {"why_block_size", a.why_block_size},
      {"why_buffers", a.why_buffers},
      {"why_prefetch", a.why_prefetch},
      {"throughput_mbyte", m.throughput / (1024 * 1024)},
      {"throughput_from", throughput_from},
      {"turnaround_ms", m.turnaround_s * 1000},
      {"turnaround_from", turnaround_from},
      {"measured",
       {{"requests", measured.requests},
        {"peak_requests_per_s", measured.peak_requests},
        {"mbyte", measured.throughput / (1024 * 1024)},
        {"buffer_hold_ms", measured.turnaround_s * 1000}}},
      {"problems", problems}};
}

void add_storage_commands(AdminCommands& cmds, const NodeParts& n) {
  using E = const AdminEmit&;
  cmds.add(
      "storage",
      [n](const json&, E) -> Result<json> {
        if (!n.storage || !n.storage->serving())
          return Status(Code::kNotFound, "no block targets on this node ([storage] targets)");
        json j = storage_json(n.storage->stats());
        if (n.tokens) j["tokens"] = tokens_json(n.tokens->stats());
        return j;
      },
      "storage");
  cmds.add("file_put", [n](const json& r, E) { return transfer(n, r, true); });
  cmds.add("file_get", [n](const json& r, E) { return transfer(n, r, false); });
  // The GPFS paper's benchmark, driven from here; each cell is a progress line.
  cmds.add("iobench", [n](const json& r, E emit) -> Result<json> {
    auto spec = IobenchSpec::from_json(r);
    if (!spec.ok()) return spec.status();
    return run_iobench(n.rpc, *spec, [&](const json& cell) {
      json ev = cell;
      ev["event"] = "cell";
      (void)emit(ev);
    });
  });
}

}  // namespace pfsnet
