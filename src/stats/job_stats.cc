#include "stats/job_stats.h"

#include <algorithm>

namespace pfsnet {

void JobEntry::add(uint32_t type, uint64_t in, uint64_t out, int64_t exec_ns_, int64_t queue_ns_,
                   TimePoint now) {
  if (rpcs == 0) first = now;
  last = now;
  ++rpcs;
  bytes_in += in;
  bytes_out += out;
  exec_ns += exec_ns_;
  queue_ns += queue_ns_;
  exec.add(exec_ns_);
  JobTypeCounts& t = types[type];
  ++t.rpcs;
  t.bytes_in += in;
  t.bytes_out += out;
}

void JobEntry::merge(const JobEntry& o) {
  if (o.rpcs == 0) return;
  if (rpcs == 0 || o.first < first) first = o.first;
  last = std::max(last, o.last);
  rpcs += o.rpcs;
  bytes_in += o.bytes_in;
  bytes_out += o.bytes_out;
  exec_ns += o.exec_ns;
  queue_ns += o.queue_ns;
  exec.merge(o.exec);
  for (const auto& [type, c] : o.types) {
    JobTypeCounts& t = types[type];
    t.rpcs += c.rpcs;
    t.bytes_in += c.bytes_in;
    t.bytes_out += c.bytes_out;
  }
  keys += o.keys;
}

namespace {
std::string key_text(std::string_view id) { return std::string(id); }
std::string key_text(const Nid& nid) { return nid.to_string(); }
}  // namespace

void JobStats::record(std::string_view job, const Nid& client, uint32_t type, uint64_t bytes_in,
                      uint64_t bytes_out, Duration exec, Duration queued) {
  const TimePoint now = clock_.now();
  jobs_.add(job, type, bytes_in, bytes_out, exec.count(), queued.count(), now);
  clients_.add(client, type, bytes_in, bytes_out, exec.count(), queued.count(), now);
}

template <class Key, class Hash>
template <class K>
void JobStats::Table<Key, Hash>::add(const K& key, uint32_t type, uint64_t in, uint64_t out,
                                     int64_t exec_ns, int64_t queue_ns, TimePoint now) {
  MutexLock lk(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= o_.max_entries) expire_locked(now);
    if (entries_.size() >= o_.max_entries) {  // full of live entries: counted in `other`
      ++overflow_keys_;
      other_.add(type, in, out, exec_ns, queue_ns, now);
      return;
    }
    it = entries_.emplace(Key(key), JobEntry{}).first;
    it->second.key = key_text(key);
    it->second.keys = 1;
  }
  it->second.add(type, in, out, exec_ns, queue_ns, now);
}

template <class Key, class Hash>
void JobStats::Table<Key, Hash>::expire_locked(TimePoint now) {
  // At most once a second: a full table of live entries makes every new key look.
  if (now < next_expire_) return;
  next_expire_ = now + std::chrono::seconds(1);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (now - it->second.last >= o_.idle) {
      other_.merge(it->second);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

template <class Key, class Hash>
JobStats::View JobStats::Table<Key, Hash>::view(size_t k, By by, TimePoint now) {
  View v;
  std::vector<JobEntry> all;
  {
    MutexLock lk(mu_);
    next_expire_ = {};
    expire_locked(now);
    all.reserve(entries_.size());
    for (const auto& [key, e] : entries_) all.push_back(e);
    v.other = other_;
    v.overflow_keys = overflow_keys_;
    v.kept = entries_.size();
    // The entries with their keys, histograms and per-type nodes (a std::map node: the pair
    // and about 32 bytes of links), a hash node each, and the buckets.
    v.memory_bytes = sizeof(*this) + entries_.bucket_count() * sizeof(void*);
    for (const auto& [key, e] : entries_)
      v.memory_bytes += sizeof(Key) + sizeof(e) + sizeof(void*) + e.key.capacity() +
                        e.exec.bytes() +
                        e.types.size() * (sizeof(std::pair<const uint32_t, JobTypeCounts>) + 32);
  }
  auto measure = [by](const JobEntry& e) -> double {
    switch (by) {
      case By::kRpcs:
        return double(e.rpcs);
      case By::kTime:
        return double(e.exec_ns);
      case By::kBytes:
        break;
    }
    return double(e.bytes());
  };
  std::sort(all.begin(), all.end(), [&](const JobEntry& a, const JobEntry& b) {
    double x = measure(a), y = measure(b);
    return x != y ? x > y : a.key < b.key;
  });
  for (size_t i = 0; i < all.size(); ++i) {
    if (i < k)
      v.top.push_back(std::move(all[i]));
    else
      v.other.merge(all[i]);
  }
  v.other.key = "other";
  return v;
}

template class JobStats::Table<std::string, JobStats::IdHash>;
template class JobStats::Table<Nid, std::hash<Nid>>;
template void JobStats::Table<std::string, JobStats::IdHash>::add(const std::string_view&,
                                                                  uint32_t, uint64_t, uint64_t,
                                                                  int64_t, int64_t, TimePoint);
template void JobStats::Table<Nid, std::hash<Nid>>::add(const Nid&, uint32_t, uint64_t, uint64_t,
                                                        int64_t, int64_t, TimePoint);

bool parse_job_stats_by(std::string_view s, JobStats::By* by) {
  if (s == "bytes")
    *by = JobStats::By::kBytes;
  else if (s == "rpcs")
    *by = JobStats::By::kRpcs;
  else if (s == "time")
    *by = JobStats::By::kTime;
  else
    return false;
  return true;
}

}  // namespace pfsnet
