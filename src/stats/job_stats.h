// Job statistics (issue 70, item 4; Lustre's job_stats and lljobstat): what each job and
// each client asked of this server -- RPCs and bytes in and out by message type, the
// handlers' execution times (p50, p99) and the time requests waited for a worker -- from
// the job id a request carries (wire version 2; CallOptions::job_id) and the client's NID.
//
// Counters are cumulative from an entry's first RPC, as Lustre's job_stats are: a reader
// takes rates by sampling twice (`pfsnet diag jobs --interval`, Prometheus' rate()). An
// entry idle for `idle` goes (Lustre's job_cleanup_interval). The memory is bounded: at most
// `max_entries` jobs and as many clients are kept one by one; an RPC of a job (or client)
// that finds the table full of live entries is counted in one `other` entry -- nothing is
// lost from the totals, and 10,000 jobs cost what `max_entries` do. A view is the top K by
// bytes, RPCs or execution time plus `other` (every entry below the top K and the
// overflow), so /metrics has at most K + 1 series per table.
//
// Thread safety: record() and the views lock the table's mutex; any thread.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/nid.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "stats/sparse_histogram.h"

namespace pfsnet {

struct JobStatsOptions {
  size_t max_entries = 1024;                 // jobs kept one by one, and clients
  Duration idle = std::chrono::minutes(10);  // an entry without an RPC this long goes
};

struct JobTypeCounts {
  uint64_t rpcs = 0, bytes_in = 0, bytes_out = 0;
};

// One job's (or client's) counters.
struct JobEntry {
  std::string key;  // the job id ("" for RPCs that carry none), or the client's NID
  uint64_t rpcs = 0, bytes_in = 0, bytes_out = 0;
  int64_t exec_ns = 0, queue_ns = 0;  // sums: executing, and waiting for a worker
  SparseHistogram exec;               // execution times, for p50 / p99
  std::map<uint32_t, JobTypeCounts> types;
  TimePoint first{}, last{};
  size_t keys = 0;  // `other`: how many jobs (clients) it sums; 1 for a kept entry

  void add(uint32_t type, uint64_t in, uint64_t out, int64_t exec_ns, int64_t queue_ns,
           TimePoint now);
  void merge(const JobEntry& o);
  uint64_t bytes() const { return bytes_in + bytes_out; }
};

class JobStats {
 public:
  JobStats(Clock& clock, JobStatsOptions o) : clock_(clock), jobs_(o), clients_(o) {}
  // At run time (stats.job_stats_max, stats.job_cleanup_interval): a smaller bound lets the
  // entries over it stay until they go idle.
  void set_options(JobStatsOptions o) {
    jobs_.set_options(o);
    clients_.set_options(o);
  }

  // One RPC this server answered: its job id, client, type, request and reply sizes
  // (payload and bulk), execution time and wait for a worker (zero: none).
  void record(std::string_view job, const Nid& client, uint32_t type, uint64_t bytes_in,
              uint64_t bytes_out, Duration exec, Duration queued);

  enum class By : uint8_t { kBytes, kRpcs, kTime };
  struct View {
    std::vector<JobEntry> top;   // the top K, largest first
    JobEntry other;              // everything else (key "other"); other.keys jobs or clients
    size_t kept = 0;             // entries kept one by one
    uint64_t overflow_keys = 0;  // distinct keys counted straight into `other`
    size_t memory_bytes = 0;     // the table's, estimated
  };
  View top_jobs(size_t k, By by) { return jobs_.view(k, by, clock_.now()); }
  View top_clients(size_t k, By by) { return clients_.view(k, by, clock_.now()); }

 private:
  // Looks a job id up without making a string of it (the RPC path allocates nothing).
  struct IdHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Jobs by id, clients by NID (formatted only when an entry is made).
  template <class Key, class Hash>
  class Table {
   public:
    explicit Table(JobStatsOptions o) : o_(o) {}
    void set_options(JobStatsOptions o) {
      MutexLock lk(mu_);
      o_ = o;
    }
    template <class K>
    void add(const K& key, uint32_t type, uint64_t in, uint64_t out, int64_t exec_ns,
             int64_t queue_ns, TimePoint now);
    View view(size_t k, By by, TimePoint now);

   private:
    void expire_locked(TimePoint now) REQUIRES(mu_);

    Mutex mu_;
    JobStatsOptions o_ GUARDED_BY(mu_);
    std::unordered_map<Key, JobEntry, Hash, std::equal_to<>> entries_ GUARDED_BY(mu_);
    JobEntry other_ GUARDED_BY(mu_);  // the overflow, and what idle entries left
    uint64_t overflow_keys_ GUARDED_BY(mu_) = 0;
    TimePoint next_expire_ GUARDED_BY(mu_){};
  };

  Clock& clock_;
  Table<std::string, IdHash> jobs_;
  Table<Nid, std::hash<Nid>> clients_;
};

// "bytes", "rpcs", "time" (the CLI's --by); false for anything else.
bool parse_job_stats_by(std::string_view s, JobStats::By* by);

}  // namespace pfsnet
