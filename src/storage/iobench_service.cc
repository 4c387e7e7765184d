// IOBENCH's client side: a node's share of a cell, its threads held at the barrier until
// the coordinator's go (storage/iobench.h).
#include <sys/resource.h>

#include <algorithm>

#include "base/log.h"
#include "base/thread_name.h"
#include "storage/iobench.h"

namespace pfsnet {

using Steady = std::chrono::steady_clock;

namespace {

double process_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

int64_t unix_ns(WallTime t) { return t.time_since_epoch().count(); }

}  // namespace

// ------------------------------------------------------------------ a client's job

struct IobenchService::Job {
  IobenchRequest q;
  std::unique_ptr<StripedFile> file;
  Mutex mu;
  CondVar cv;
  bool go GUARDED_BY(mu) = false;
  bool cancelled GUARDED_BY(mu) = false;
  bool done GUARDED_BY(mu) = false;
  TypedResponder<IobenchNodeResult> go_reply GUARDED_BY(mu);
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
  serve_async(rpc_, kIobenchRpc,
              [this](IobenchRequest&& q, RpcRequest&, TypedResponder<IobenchNodeResult> r) {
                handle(std::move(q), std::move(r));
              });
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

void IobenchService::handle(IobenchRequest&& q, TypedResponder<IobenchNodeResult> r) {
  if (q.phase == "cpu") {
    IobenchNodeResult c;
    c.cpu_s = process_cpu_s();
    return r.reply(c);
  }
  if (q.phase == "go") return go(q.job, std::move(r));
  prepare(q, std::move(r));
}

void IobenchService::prepare(const IobenchRequest& q, TypedResponder<IobenchNodeResult> r) {
  reap_finished();
  auto job = std::make_shared<Job>();
  job->q = q;
  {
    MutexLock lk(mu_);
    Status refused;
    if (stopped_) refused = Status(Code::kCancelled, "node stopping");
    if (jobs_.count(q.job))
      refused = Status(Code::kInvalidArgument, "job " + std::to_string(q.job) + " exists");
    if (!refused.ok()) {
      lk.unlock();
      return r.fail(std::move(refused));
    }
    jobs_[q.job] = job;
  }
  // The job's own thread: opens the file (RPCs: not on this RPC thread), runs the threads,
  // answers prepare and later go, then hands itself to be joined.
  auto prepared = std::make_shared<TypedResponder<IobenchNodeResult>>(std::move(r));
  auto body = [this, job, prepared] {
    StripedFileOptions fo = options_();
    fo.direct_writes = job->q.direct;
    auto opened = StripedFile::open(rpc_, job->q.file, job->q.servers, fo);
    if (opened.ok()) {
      job->file = std::move(*opened);
      TimePoint until = Steady::now() + barrier_timeout_;
      std::vector<std::thread> threads;
      for (int t = 0; t < job->q.threads; ++t)
        threads.emplace_back([this, job, t, until] {
          name_this_thread("pfs-iobench");
          job->run(t, until, clock_);
        });
      prepared->reply(IobenchNodeResult{});  // ready
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
      TypedResponder<IobenchNodeResult> answer;
      IobenchNodeResult result;
      {
        MutexLock lk(job->mu);
        if (!closed.ok()) job->fail(closed.message());
        job->result.cpu_s = process_cpu_s() - cpu0;
        job->done = true;
        result = job->result;
        answer = std::move(job->go_reply);
      }
      answer.reply(result);  // no go (the barrier timed out): nobody to answer
    } else {
      prepared->fail(opened.status());
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

void IobenchService::go(uint64_t id, TypedResponder<IobenchNodeResult> r) {
  std::shared_ptr<Job> job;
  {
    MutexLock lk(mu_);
    auto it = jobs_.find(id);
    if (it != jobs_.end()) job = it->second;
  }
  if (!job)
    return r.fail(Status(Code::kNotFound, "no job " + std::to_string(id) + " prepared here"));
  MutexLock lk(job->mu);
  if (job->go || job->done || job->cancelled) {
    lk.unlock();
    return r.fail(Status(Code::kInvalidArgument,
                         "job " + std::to_string(id) + " has started or ended already"));
  }
  job->go = true;
  job->go_reply = std::move(r);
  job->cv.notify_all();
}

}  // namespace pfsnet
