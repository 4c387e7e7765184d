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
// Thread safety: record() and the views take one mutex; any thread.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/nid.h>

#include <array>
#include <atomic>
#include <cstdint>
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
  bool enabled = true;                       // false: record() counts nothing (stats.job_stats)
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
  std::vector<std::pair<uint32_t, JobTypeCounts>> types;  // by message type, a few each
  TimePoint first{}, last{};
  size_t keys = 0;  // `other`: how many jobs (clients) it sums; 1 for a kept entry

  void add(uint32_t type, uint64_t in, uint64_t out, int64_t exec_ns, int64_t queue_ns,
           TimePoint now);
  void merge(const JobEntry& o);
  uint64_t bytes() const { return bytes_in + bytes_out; }
  // Its counts of message type `type` (null: none).
  const JobTypeCounts* type(uint32_t type) const;
  JobTypeCounts& type_counts(uint32_t type);
};

class JobStats {
 public:
  JobStats(Clock& clock, JobStatsOptions o)
      : clock_(clock), enabled_(o.enabled), jobs_(o), clients_(o) {}
  // At run time (stats.job_stats_max, stats.job_cleanup_interval): a smaller bound lets the
  // entries over it stay until they go idle.
  void set_options(JobStatsOptions o) {
    enabled_.store(o.enabled, std::memory_order_relaxed);
    MutexLock lk(mu_);
    jobs_.o = o;
    clients_.o = o;
  }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // One RPC this server answered at `now`: its job id, client, type, request and reply
  // sizes (payload and bulk), execution time and wait for a worker (zero: none). One lock;
  // no allocation once the job and the client have their entries.
  void record(std::string_view job, const Nid& client, uint32_t type, uint64_t bytes_in,
              uint64_t bytes_out, Duration exec, Duration queued, TimePoint now);
  void record(std::string_view job, const Nid& client, uint32_t type, uint64_t bytes_in,
              uint64_t bytes_out, Duration exec, Duration queued) {
    record(job, client, type, bytes_in, bytes_out, exec, queued, clock_.now());
  }

  enum class By : uint8_t { kBytes, kRpcs, kTime };
  struct View {
    std::vector<JobEntry> top;   // the top K, largest first
    JobEntry other;              // everything else (key "other"); other.keys jobs or clients
    size_t kept = 0;             // entries kept one by one
    uint64_t overflow_keys = 0;  // distinct keys counted straight into `other`
    size_t memory_bytes = 0;     // the table's, estimated
  };
  View top_jobs(size_t k, By by);
  View top_clients(size_t k, By by);

 private:
  // Looks a job id up without making a string of it.
  struct IdHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Jobs by id, clients by NID (formatted only when an entry is made). Guarded as a whole.
  template <class Key, class Hash>
  struct Table {
    explicit Table(JobStatsOptions options) : o(options) {}
    template <class K>
    void add(const K& key, uint32_t type, uint64_t in, uint64_t out, int64_t exec_ns,
             int64_t queue_ns, TimePoint now);
    // Idle entries into `other` (at most once a second unless `force`).
    void expire(TimePoint now, bool force);
    // Every entry (in `top`, unsorted), `other`, the counts and memory.
    View snapshot(TimePoint now);

    JobStatsOptions o;
    std::unordered_map<Key, JobEntry, Hash, std::equal_to<>> entries;
    // The entries of the last few keys added to (a server's RPCs come from a few jobs and
    // clients at a time), looked at before the hash: cleared whenever an entry goes.
    static constexpr size_t kRecent = 4;
    std::array<std::pair<const Key, JobEntry>*, kRecent> recent{};
    size_t recent_next = 0;
    JobEntry other;  // the overflow, and what idle entries left
    uint64_t overflow_keys = 0;
    TimePoint next_expire{};
  };
  static View top(View all, size_t k, By by);

  Clock& clock_;
  std::atomic<bool> enabled_;
  Mutex mu_;
  Table<std::string, IdHash> jobs_ GUARDED_BY(mu_);
  Table<Nid, std::hash<Nid>> clients_ GUARDED_BY(mu_);
};

// "bytes", "rpcs", "time" (the CLI's --by); false for anything else.
bool parse_job_stats_by(std::string_view s, JobStats::By* by);

}  // namespace pfsnet
