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
  JobTypeCounts& t = type_counts(type);
  ++t.rpcs;
  t.bytes_in += in;
  t.bytes_out += out;
}

const JobTypeCounts* JobEntry::type(uint32_t t) const {
  for (const auto& [k, c] : types)
    if (k == t) return &c;
  return nullptr;
}

JobTypeCounts& JobEntry::type_counts(uint32_t t) {
  for (auto& [k, c] : types)
    if (k == t) return c;
  return types.emplace_back(t, JobTypeCounts{}).second;
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
    JobTypeCounts& t = type_counts(type);
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
                      uint64_t bytes_out, Duration exec, Duration queued, TimePoint now) {
  if (!enabled_.load(std::memory_order_relaxed)) return;
  MutexLock lk(mu_);
  jobs_.add(job, type, bytes_in, bytes_out, exec.count(), queued.count(), now);
  clients_.add(client, type, bytes_in, bytes_out, exec.count(), queued.count(), now);
}

JobStats::View JobStats::top_jobs(size_t k, By by) {
  View all;
  {
    MutexLock lk(mu_);
    all = jobs_.snapshot(clock_.now());
  }
  return top(std::move(all), k, by);
}

JobStats::View JobStats::top_clients(size_t k, By by) {
  View all;
  {
    MutexLock lk(mu_);
    all = clients_.snapshot(clock_.now());
  }
  return top(std::move(all), k, by);
}

template <class Key, class Hash>
template <class K>
void JobStats::Table<Key, Hash>::add(const K& key, uint32_t type, uint64_t in, uint64_t out,
                                     int64_t exec_ns, int64_t queue_ns, TimePoint now) {
  for (std::pair<const Key, JobEntry>* e : recent)
    if (e && e->first == key) {
      e->second.add(type, in, out, exec_ns, queue_ns, now);
      return;
    }
  auto it = entries.find(key);
  if (it == entries.end()) {
    if (entries.size() >= o.max_entries) expire(now, false);
    if (entries.size() >= o.max_entries) {  // full of live entries: counted in `other`
      ++overflow_keys;
      other.add(type, in, out, exec_ns, queue_ns, now);
      return;
    }
    it = entries.emplace(Key(key), JobEntry{}).first;
    it->second.key = key_text(key);
    it->second.keys = 1;
  }
  recent[recent_next++ % kRecent] = &*it;
  it->second.add(type, in, out, exec_ns, queue_ns, now);
}

template <class Key, class Hash>
void JobStats::Table<Key, Hash>::expire(TimePoint now, bool force) {
  // At most once a second: a full table of live entries makes every new key look.
  if (!force && now < next_expire) return;
  next_expire = now + std::chrono::seconds(1);
  recent.fill(nullptr);  // an entry may go
  for (auto it = entries.begin(); it != entries.end();) {
    if (now - it->second.last >= o.idle) {
      other.merge(it->second);
      it = entries.erase(it);
    } else {
      ++it;
    }
  }
}

template <class Key, class Hash>
JobStats::View JobStats::Table<Key, Hash>::snapshot(TimePoint now) {
  expire(now, true);
  View v;
  v.top.reserve(entries.size());
  for (const auto& [key, e] : entries) v.top.push_back(e);
  v.other = other;
  v.overflow_keys = overflow_keys;
  v.kept = entries.size();
  // The entries with their keys, histograms and type lists, a hash node each, the buckets.
  v.memory_bytes = sizeof(*this) + entries.bucket_count() * sizeof(void*);
  for (const auto& [key, e] : entries)
    v.memory_bytes += sizeof(Key) + sizeof(e) + sizeof(void*) + e.key.capacity() + e.exec.bytes() +
                      e.types.capacity() * sizeof(std::pair<uint32_t, JobTypeCounts>);
  return v;
}

JobStats::View JobStats::top(View all, size_t k, By by) {
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
  std::vector<JobEntry> entries = std::move(all.top);
  std::sort(entries.begin(), entries.end(), [&](const JobEntry& a, const JobEntry& b) {
    double x = measure(a), y = measure(b);
    return x != y ? x > y : a.key < b.key;
  });
  all.top.clear();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i < k)
      all.top.push_back(std::move(entries[i]));
    else
      all.other.merge(entries[i]);
  }
  all.other.key = "other";
  return all;
}

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
