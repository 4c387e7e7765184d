#include "storage/iobench.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "base/json_fields.h"
#include "base/log.h"
#include "rpc/call_batch.h"
#include "rpc/msg_types.h"
#include "storage/block_store.h"

namespace pfsnet {

using nlohmann::json;
using Steady = std::chrono::steady_clock;

namespace {

constexpr uint32_t kMaxRequestSize = 64u << 20;

double process_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

int64_t unix_ns(WallTime t) { return t.time_since_epoch().count(); }

Buffer json_buffer(const json& j) { return Buffer::copy_of(std::string_view(j.dump())); }

Result<json> json_of(std::span<const uint8_t> payload, const char* what) {
  json j = json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status(Code::kProtocol, std::string(what) + ": not a JSON object");
  return j;
}

}  // namespace

// ------------------------------------------------------------------ messages

Buffer IobenchRequest::encode() const {
  json s = json::array();
  for (const Nid& n : servers) s.push_back(n.to_string());
  return json_buffer({{"phase", phase},
                      {"job", job},
                      {"file", file},
                      {"servers", s},
                      {"op", op},
                      {"threads", threads},
                      {"requests", requests},
                      {"size", size},
                      {"first_segment", first_segment},
                      {"verify", verify},
                      {"direct", direct}});
}

Result<IobenchRequest> decode_iobench_request(std::span<const uint8_t> payload) {
  auto bad = [](const std::string& why) { return Status(Code::kProtocol, "IOBENCH: " + why); };
  auto j = json_of(payload, "IOBENCH");
  if (!j.ok()) return j.status();
  IobenchRequest q;
  q.phase = j->value("phase", json("")).is_string() ? j->value("phase", "") : "";
  if (q.phase != "prepare" && q.phase != "go" && q.phase != "cpu")
    return bad("phase must be prepare, go or cpu");
  auto job = json_int(*j, "job", 0, 0, INT64_MAX);
  if (!job.ok()) return bad(job.status().message());
  q.job = static_cast<uint64_t>(*job);
  if (q.phase != "prepare") return q;
  if (!(*j)["file"].is_string()) return bad("file: a name");
  q.file = (*j)["file"].get<std::string>();
  if (Status s = check_file_name(q.file); !s.ok()) return bad(s.message());
  auto servers = json_nids((*j)["servers"], "servers");
  if (!servers.ok()) return bad(servers.status().message());
  if (servers->size() > IobenchRequest::kMaxServers) return bad("too many servers");
  q.servers = std::move(*servers);
  q.op = (*j)["op"].is_string() ? (*j)["op"].get<std::string>() : "";
  if (q.op != "write" && q.op != "read") return bad("op must be write or read");
  auto need = [&](const char* key, int64_t lo, int64_t hi) -> Result<int64_t> {
    if (!j->contains(key)) return Status(Code::kInvalidArgument, std::string(key) + " missing");
    return json_int(*j, key, lo, lo, hi);
  };
  auto threads = need("threads", 1, IobenchRequest::kMaxThreads);
  auto requests = need("requests", 1, int64_t(1) << 40);
  auto size = need("size", 1, kMaxRequestSize);
  auto first = need("first_segment", 0, int64_t(1) << 40);
  for (const auto* r : {&threads, &requests, &size, &first})
    if (!r->ok()) return bad(r->status().message());
  q.threads = static_cast<int>(*threads);
  q.requests = static_cast<uint64_t>(*requests);
  q.size = static_cast<uint32_t>(*size);
  q.first_segment = static_cast<uint64_t>(*first);
  // The whole job's bytes must stay far below 2^64.
  if (q.first_segment + uint64_t(q.threads) > (uint64_t(1) << 50) / q.size / q.requests)
    return bad("the job's segments pass 1 PiB");
  if (j->contains("verify") && !(*j)["verify"].is_boolean()) return bad("verify: true or false");
  q.verify = j->value("verify", false);
  if (j->contains("direct") && !(*j)["direct"].is_boolean()) return bad("direct: true or false");
  q.direct = j->value("direct", false);
  return q;
}

Buffer encode_iobench_result(const IobenchNodeResult& r) {
  return json_buffer({{"bytes", r.bytes},
                      {"errors", r.errors},
                      {"first_error", r.first_error},
                      {"start_unix_ns", r.start_unix_ns},
                      {"end_unix_ns", r.end_unix_ns},
                      {"cpu_s", r.cpu_s}});
}

Result<IobenchNodeResult> decode_iobench_result(std::span<const uint8_t> payload) {
  auto j = json_of(payload, "IOBENCH reply");
  if (!j.ok()) return j.status();
  IobenchNodeResult r;
  auto bytes = json_int(*j, "bytes", 0, 0, int64_t(1) << 62);
  auto errors = json_int(*j, "errors", 0, 0, int64_t(1) << 62);
  auto start = json_int(*j, "start_unix_ns", 0, 0, INT64_MAX);
  auto end = json_int(*j, "end_unix_ns", 0, 0, INT64_MAX);
  auto cpu = json_number(*j, "cpu_s", 0, 0, 1e9);
  for (const auto* x : {&bytes, &errors, &start, &end})
    if (!x->ok()) return Status(Code::kProtocol, "IOBENCH reply: " + x->status().message());
  if (!cpu.ok()) return Status(Code::kProtocol, "IOBENCH reply: " + cpu.status().message());
  if (*end < *start) return Status(Code::kProtocol, "IOBENCH reply: ends before it starts");
  r.bytes = static_cast<uint64_t>(*bytes);
  r.errors = static_cast<uint64_t>(*errors);
  r.start_unix_ns = *start;
  r.end_unix_ns = *end;
  r.cpu_s = *cpu;
  if (j->contains("first_error") && (*j)["first_error"].is_string())
    r.first_error = (*j)["first_error"].get<std::string>().substr(0, 1024);
  return r;
}

// ------------------------------------------------------------------ a client's job

struct IobenchService::Job {
  IobenchRequest q;
  std::unique_ptr<StripedFile> file;
  Mutex mu;
  CondVar cv;
  bool go GUARDED_BY(mu) = false;
  bool cancelled GUARDED_BY(mu) = false;
  bool done GUARDED_BY(mu) = false;
  Responder go_reply GUARDED_BY(mu);
  IobenchNodeResult result GUARDED_BY(mu);

  void fail(const std::string& why) REQUIRES(mu) {
    ++result.errors;
    if (result.first_error.empty()) result.first_error = why;
  }

  // One thread: its segment, request by request, after the barrier.
  void run(int t, TimePoint barrier_until, const Clock& clock) EXCLUDES(mu) {
    {
      MutexLock lk(mu);
      if (!cv.wait_for(lk, barrier_until - Steady::now(),
                       [&]() REQUIRES(mu) { return go || cancelled; }) ||
          cancelled)
        return;
    }
    const bool write = q.op == "write";
    std::vector<uint8_t> buf(q.size, write ? uint8_t(0x5a) : uint8_t(0));
    const uint64_t segment = q.first_segment + uint64_t(t);
    int64_t start = unix_ns(clock.wall_now());
    uint64_t bytes = 0;
    Status st;
    for (uint64_t i = 0; i < q.requests && st.ok(); ++i) {
      {
        MutexLock lk(mu);
        if (cancelled) {
          st = Status(Code::kCancelled, "node stopping");
          break;
        }
      }
      uint64_t off = (segment * q.requests + i) * q.size;
      if (write) {
        if (q.size >= 8) std::memcpy(buf.data(), &off, 8);
        st = file->write(off, buf);
      } else {
        st = file->read(off, buf);
        uint64_t seen = 0;
        if (st.ok() && q.verify && q.size >= 8) {
          std::memcpy(&seen, buf.data(), 8);
          if (seen != off)
            st = Status(Code::kProtocol, "read at " + std::to_string(off) +
                                             " found the data of offset " + std::to_string(seen));
        }
      }
      if (st.ok()) bytes += q.size;
    }
    if (st.ok() && write) st = file->flush();  // acknowledged by the servers
    int64_t end = unix_ns(clock.wall_now());
    MutexLock lk(mu);
    result.bytes += bytes;
    if (!st.ok()) fail(st.message());
    if (result.start_unix_ns == 0 || start < result.start_unix_ns) result.start_unix_ns = start;
    result.end_unix_ns = std::max(result.end_unix_ns, end);
  }
};

IobenchService::IobenchService(RpcEngine& rpc, Clock& clock,
                               std::function<StripedFileOptions()> options,
                               Duration barrier_timeout)
    : rpc_(rpc), clock_(clock), options_(std::move(options)), barrier_timeout_(barrier_timeout) {
  rpc_.handle_async(kMsgIobench, "IOBENCH",
                    [this](RpcRequest& req, Responder r) { handle(req, std::move(r)); });
}

IobenchService::~IobenchService() { stop(); }

void IobenchService::stop() {
  std::map<uint64_t, std::shared_ptr<Job>> jobs;
  std::vector<std::thread> threads;
  {
    MutexLock lk(mu_);
    stopped_ = true;
    jobs = jobs_;
    threads.swap(finished_);
  }
  for (auto& [id, j] : jobs) {
    MutexLock lk(j->mu);
    j->cancelled = true;
    j->cv.notify_all();
  }
  for (std::thread& t : threads) t.join();
  // Running jobs stop after the request under way (bounded by the RPC timeout).
  std::vector<std::thread> running;
  {
    MutexLock lk(mu_);
    running.swap(running_);
  }
  for (std::thread& t : running) t.join();
  reap_finished();
}

void IobenchService::reap_finished() {
  std::vector<std::thread> threads;
  {
    MutexLock lk(mu_);
    threads.swap(finished_);
  }
  for (std::thread& t : threads) t.join();
}

void IobenchService::handle(RpcRequest& req, Responder r) {
  auto q = decode_iobench_request(req.payload.span());
  RpcResponse resp;
  if (!q.ok()) {
    resp.status = q.status();
    return r.reply(std::move(resp));
  }
  if (q->phase == "cpu") {
    IobenchNodeResult c;
    c.cpu_s = process_cpu_s();
    resp.payload = encode_iobench_result(c);
    return r.reply(std::move(resp));
  }
  if (q->phase == "go") return go(q->job, std::move(r));
  prepare(*q, std::move(r));
}

void IobenchService::prepare(const IobenchRequest& q, Responder r) {
  reap_finished();
  auto job = std::make_shared<Job>();
  job->q = q;
  {
    MutexLock lk(mu_);
    RpcResponse resp;
    if (stopped_) resp.status = Status(Code::kCancelled, "node stopping");
    if (jobs_.count(q.job))
      resp.status = Status(Code::kInvalidArgument, "job " + std::to_string(q.job) + " exists");
    if (!resp.status.ok()) {
      lk.unlock();
      return r.reply(std::move(resp));
    }
    jobs_[q.job] = job;
  }
  // The job's own thread: opens the file (RPCs: not on this RPC thread), runs the threads,
  // answers prepare and later go, then hands itself to be joined.
  auto prepared = std::make_shared<Responder>(std::move(r));
  auto body = [this, job, prepared] {
    StripedFileOptions fo = options_();
    fo.direct_writes = job->q.direct;
    auto opened = StripedFile::open(rpc_, job->q.file, job->q.servers, fo);
    RpcResponse ready;
    if (opened.ok()) {
      job->file = std::move(*opened);
      TimePoint until = Steady::now() + barrier_timeout_;
      std::vector<std::thread> threads;
      for (int t = 0; t < job->q.threads; ++t)
        threads.emplace_back([this, job, t, until] { job->run(t, until, clock_); });
      prepared->reply(std::move(ready));
      double cpu0 = 0;
      {
        MutexLock lk(job->mu);
        job->cv.wait_for(lk, until - Steady::now(),
                         [&]() REQUIRES(job->mu) { return job->go || job->cancelled; });
        if (!job->go) job->cancelled = true;  // a late go is refused
        job->cv.notify_all();
        cpu0 = process_cpu_s();
      }
      for (std::thread& t : threads) t.join();
      Status closed = job->file->close();
      Responder answer;
      RpcResponse resp;
      {
        MutexLock lk(job->mu);
        if (!closed.ok()) job->fail(closed.message());
        job->result.cpu_s = process_cpu_s() - cpu0;
        job->done = true;
        resp.payload = encode_iobench_result(job->result);
        answer = std::move(job->go_reply);
      }
      answer.reply(std::move(resp));  // no go (the barrier timed out): nobody to answer
    } else {
      ready.status = opened.status();
      prepared->reply(std::move(ready));
    }
    MutexLock lk(mu_);
    jobs_.erase(job->q.job);
    // This thread cannot join itself: the next prepare or stop does (stop may have taken
    // it from running_ already, to join it).
    for (auto it = running_.begin(); it != running_.end(); ++it)
      if (it->get_id() == std::this_thread::get_id()) {
        finished_.push_back(std::move(*it));
        running_.erase(it);
        break;
      }
  };
  // Registered before it can end (it ends under mu_).
  MutexLock lk(mu_);
  running_.emplace_back(std::move(body));
}

void IobenchService::go(uint64_t id, Responder r) {
  std::shared_ptr<Job> job;
  {
    MutexLock lk(mu_);
    auto it = jobs_.find(id);
    if (it != jobs_.end()) job = it->second;
  }
  RpcResponse resp;
  if (!job) {
    resp.status = Status(Code::kNotFound, "no job " + std::to_string(id) + " prepared here");
    return r.reply(std::move(resp));
  }
  MutexLock lk(job->mu);
  if (job->go || job->done || job->cancelled) {
    resp.status = Status(Code::kInvalidArgument,
                         "job " + std::to_string(id) + " has started or ended already");
    lk.unlock();
    return r.reply(std::move(resp));
  }
  job->go = true;
  job->go_reply = std::move(r);
  job->cv.notify_all();
}

// ------------------------------------------------------------------ the coordinator

Result<IobenchSpec> IobenchSpec::from_json(const json& j) {
  IobenchSpec s;
  auto clients = json_nids(j.value("clients", json()), "clients");
  if (!clients.ok()) return clients.status();
  auto servers = json_nids(j.value("servers", json()), "servers");
  if (!servers.ok()) return servers.status();
  s.clients = std::move(*clients);
  s.servers = std::move(*servers);
  if (s.servers.size() > IobenchRequest::kMaxServers)
    return Status(Code::kInvalidArgument, "servers: at most 1024");
  auto counts = [&](const char* key, int hi, std::vector<int>* out) -> Status {
    if (!j.contains(key)) return Status::Ok();
    const json& a = j[key];
    if (!a.is_array() || a.empty() || a.size() > 64)
      return Status(Code::kInvalidArgument, std::string(key) + ": a list of 1..64 counts");
    out->clear();
    for (const json& x : a) {
      auto v = json_int_value(x, key, 1, hi);
      if (!v.ok()) return v.status();
      out->push_back(static_cast<int>(*v));
    }
    return Status::Ok();
  };
  if (Status st = counts("nodes", static_cast<int>(s.clients.size()), &s.nodes); !st.ok())
    return Status(st.code(), st.message() + " (the clients given)");
  if (Status st = counts("threads", IobenchRequest::kMaxThreads, &s.threads); !st.ok()) return st;
  auto requests = json_int(j, "requests", int64_t(s.requests), 1, int64_t(1) << 30);
  if (!requests.ok()) return requests.status();
  s.requests = static_cast<uint64_t>(*requests);
  auto cell = json_int(j, "cell_bytes", 0, 0, int64_t(1) << 40);
  if (!cell.ok()) return cell.status();
  s.cell_bytes = static_cast<uint64_t>(*cell);
  auto size = json_int(j, "size", s.size, 4096, kMaxRequestSize);
  if (!size.ok()) return size.status();
  s.size = static_cast<uint32_t>(*size);
  if (j.contains("ops")) {
    const json& o = j["ops"];
    if (!o.is_array() || o.empty() || o.size() > 2)
      return Status(Code::kInvalidArgument, "ops: write, read or both");
    s.ops.clear();
    for (const json& x : o) {
      std::string op = x.is_string() ? x.get<std::string>() : "";
      if ((op != "write" && op != "read") || std::count(s.ops.begin(), s.ops.end(), op))
        return Status(Code::kInvalidArgument, "ops: write, read or both, each once");
      s.ops.push_back(op);
    }
  }
  if (j.contains("file")) {
    if (!j["file"].is_string()) return Status(Code::kInvalidArgument, "file: a name");
    s.file = j["file"].get<std::string>();
  }
  if (Status st = check_file_name(s.file); !st.ok()) return st;
  auto timeout = json_number(j, "timeout_s", s.timeout_s, 1, 86400);
  if (!timeout.ok()) return timeout.status();
  s.timeout_s = *timeout;
  if (j.contains("direct")) {
    if (!j["direct"].is_boolean()) return Status(Code::kInvalidArgument, "direct: true or false");
    s.direct = j["direct"].get<bool>();
  }
  return s;
}

uint64_t IobenchSpec::requests_for(int n, int t) const {
  if (cell_bytes == 0) return requests;
  uint64_t per_thread = uint64_t(n) * uint64_t(t) * size;
  return std::max<uint64_t>(1, (cell_bytes + per_thread - 1) / per_thread);
}

namespace {

// One RPC to each of `to` at once; every reply, in order.
std::vector<RpcReply> call_all(RpcEngine& rpc, const std::vector<Nid>& to,
                               const std::function<Buffer(size_t)>& payload, Duration timeout) {
  CallBatch batch(rpc);
  CallOptions co;
  co.timeout = timeout;
  for (size_t i = 0; i < to.size(); ++i) batch.add(to[i], kMsgIobench, payload(i), nullptr, co);
  // Every call ends by its own deadline; the margin covers the callbacks.
  batch.wait(timeout + std::chrono::seconds(30));
  return batch.take();
}

Status first_error(const std::vector<RpcReply>& rs, const std::vector<Nid>& to, const char* what) {
  for (size_t i = 0; i < rs.size(); ++i)
    if (!rs[i].status.ok())
      return Status(rs[i].status.code(),
                    std::string(what) + " on " + to[i].to_string() + ": " + rs[i].status.message());
  return Status::Ok();
}

Result<double> servers_cpu(RpcEngine& rpc, const std::vector<Nid>& servers) {
  IobenchRequest q;
  q.phase = "cpu";
  auto rs = call_all(
      rpc, servers, [&](size_t) { return q.encode(); }, std::chrono::seconds(10));
  if (Status s = first_error(rs, servers, "cpu reading"); !s.ok()) return s;
  double cpu = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    auto r = decode_iobench_result(rs[i].payload.span());
    if (!r.ok()) return r.status();
    cpu += r->cpu_s;
  }
  return cpu;
}

}  // namespace

Result<json> run_iobench(RpcEngine& rpc, const IobenchSpec& spec,
                         const std::function<void(const json&)>& progress) {
  // Job ids unique across coordinators and runs.
  uint64_t job = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  job &= (uint64_t(1) << 62) - 1;
  const Duration timeout =
      std::chrono::duration_cast<Duration>(std::chrono::duration<double>(spec.timeout_s));
  json cells = json::array(), peak = json::object();
  for (int n : spec.nodes)
    for (int t : spec.threads)
      for (const std::string& op : spec.ops) {
        std::vector<Nid> clients(spec.clients.begin(), spec.clients.begin() + n);
        IobenchRequest q;
        q.job = ++job;
        q.file = spec.file;
        q.servers = spec.servers;
        q.op = op;
        q.threads = t;
        q.requests = spec.requests_for(n, t);
        q.size = spec.size;
        q.verify = op == "read" && spec.ops.front() == "write";
        q.direct = spec.direct;
        auto ready = call_all(
            rpc, clients,
            [&](size_t i) {
              q.first_segment = uint64_t(i) * uint64_t(t);
              return q.encode();
            },
            std::chrono::seconds(30));
        if (Status s = first_error(ready, clients, "prepare"); !s.ok()) return s;
        auto cpu0 = servers_cpu(rpc, spec.servers);
        if (!cpu0.ok()) return cpu0.status();
        IobenchRequest g;
        g.phase = "go";
        g.job = q.job;
        auto t0 = Steady::now();
        auto done = call_all(
            rpc, clients, [&](size_t) { return g.encode(); }, timeout);
        double span_s = std::chrono::duration<double>(Steady::now() - t0).count();
        if (Status s = first_error(done, clients, "run"); !s.ok()) return s;
        auto cpu1 = servers_cpu(rpc, spec.servers);
        if (!cpu1.ok()) return cpu1.status();
        uint64_t bytes = 0, errors = 0;
        int64_t start = INT64_MAX, end = 0;
        double client_cpu = 0;
        std::string first;
        for (size_t i = 0; i < done.size(); ++i) {
          auto r = decode_iobench_result(done[i].payload.span());
          if (!r.ok())
            return Status(r.status().code(), clients[i].to_string() + ": " + r.status().message());
          bytes += r->bytes;
          errors += r->errors;
          if (first.empty() && !r->first_error.empty())
            first = clients[i].to_string() + ": " + r->first_error;
          if (r->start_unix_ns > 0) start = std::min(start, r->start_unix_ns);
          end = std::max(end, r->end_unix_ns);
          client_cpu += r->cpu_s;
        }
        // The paper's job time: first start to last end, by the clients' wall clocks.
        double job_s = end > start ? double(end - start) / 1e9 : 0;
        double mib_s = job_s > 0 ? double(bytes) / (1 << 20) / job_s : 0;
        json cell = {{"nodes", n},
                     {"threads", t},
                     {"op", op},
                     {"requests", q.requests},
                     {"size", spec.size},
                     {"bytes", bytes},
                     {"job_s", job_s},
                     {"coordinator_s", span_s},
                     {"mib_s", mib_s},
                     {"client_cpu", job_s > 0 ? client_cpu / job_s : 0.0},
                     {"server_cpu", job_s > 0 ? (*cpu1 - *cpu0) / job_s : 0.0},
                     {"errors", errors},
                     {"first_error", first}};
        peak[op] = std::max(peak.value(op, 0.0), mib_s);
        if (progress) progress(cell);
        cells.push_back(std::move(cell));
      }
  json servers = json::array(), clients = json::array();
  for (const Nid& n : spec.servers) servers.push_back(n.to_string());
  for (const Nid& n : spec.clients) clients.push_back(n.to_string());
  return json{
      {"cells", cells},       {"peak", peak},      {"servers", servers},  {"clients", clients},
      {"size", spec.size},    {"file", spec.file}, {"nodes", spec.nodes}, {"threads", spec.threads},
      {"direct", spec.direct}};
}

}  // namespace pfsnet
