#include "stats/rpc_stats.h"

#include <algorithm>
#include <bit>

#include "base/mutex.h"

namespace pfsnet {

std::string_view node_stat_name(NodeStat s) {
  switch (s) {
    case NodeStat::kChannelWait:
      return "channel_wait";
    case NodeStat::kSendTcp:
      return "send_time_tcp";
    case NodeStat::kSendVerbs:
      return "send_time_verbs";
    case NodeStat::kReceiveTcp:
      return "receive_time_tcp";
    case NodeStat::kLatencyTcp:
      return "latency_tcp";
    case NodeStat::kLatencyVerbs:
      return "latency_verbs";
    case NodeStat::kLatencyMixed:
      return "latency_mixed";
  }
  return "unknown";
}

std::string_view probe_stat_name(ProbeStat s) {
  switch (s) {
    case ProbeStat::kRtt:
      return "mesh_rtt";
    case ProbeStat::kWrite:
      return "mesh_write";
    case ProbeStat::kRead:
      return "mesh_read";
    case ProbeStat::kLost:
      return "mesh_lost";
  }
  return "unknown";
}

bool node_stat_is_verbs(NodeStat s) {
  return s == NodeStat::kSendVerbs || s == NodeStat::kLatencyVerbs || s == NodeStat::kLatencyMixed;
}

namespace {

// A percentile estimated from its histogram bucket (the bucket's middle, within 1/16),
// kept within what the interval saw: never above its maximum or below its minimum (the
// dashboard once showed "p99 8.913 ms, max 8.737 ms").
double percentile_ms(const Interval& iv, int bucket) {
  double ns = double(SparseHistogram::bucket_mid(bucket));
  if (iv.count > 0) ns = std::clamp(ns, double(iv.min), double(iv.max));
  return ns / 1e6;
}

RingSizes ring_sizes(const StatsConfig& c) {
  return RingSizes{size_t(c.rpcPerfNumberSecondIntervals), size_t(c.rpcPerfNumberMinuteIntervals),
                   size_t(c.rpcPerfNumberHourIntervals), size_t(c.rpcPerfNumberDayIntervals)};
}

int64_t unix_seconds(WallTime t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

}  // namespace

uint64_t RpcStats::rpc_size(uint64_t sent, uint64_t received) {
  if (sent > 16 * received || received > 16 * sent) return std::max(sent, received);
  return sent + received;
}

size_t RpcStats::num_size_ranges(int64_t max_block_size) {
  // Upper bounds 64, 128, ..., 2 x maxBlockSize.
  return static_cast<size_t>(std::bit_width(uint64_t(2 * max_block_size)) - 1 - 6 + 1);
}

size_t RpcStats::size_range(uint64_t size, int64_t max_block_size) {
  size_t i = size <= 64 ? 0 : static_cast<size_t>(std::bit_width(size - 1)) - 6;
  return std::min(i, num_size_ranges(max_block_size) - 1);
}

RpcStats::RpcStats(const StatsConfig& cfg, Clock& clock, bool verbs_configured)
    : clock_(clock),
      verbs_(verbs_configured),
      cfg_(cfg),
      rings_(ring_sizes(cfg)),
      jobs_(clock, job_options(cfg)) {
  stat_bufs_.push_back(std::make_unique<RawBuffer<RawStatRecord>>(cfg.rpcPerfRawStatBufferSize));
  exec_bufs_.push_back(std::make_unique<RawBuffer<RawExecRecord>>(cfg.rpcPerfRawExecBufferSize));
  stat_buf_.store(stat_bufs_.back().get());
  exec_buf_.store(exec_bufs_.back().get());
  sizes_.resize(num_size_ranges(cfg.maxBlockSize));
  next_second_ = clock_.now() + std::chrono::seconds(1);
  second_start_ = minute_start_ = hour_start_ = day_start_ = unix_seconds(clock_.wall_now());
}

RpcStats::~RpcStats() = default;

void RpcStats::record(const RawStatRecord& r) {
  stat_buf_.load(std::memory_order_acquire)->push(r);
}

void RpcStats::record_exec(const RawExecRecord& r) {
  exec_buf_.load(std::memory_order_acquire)->push(r);
}

uint64_t RpcStats::dropped_stat() const {
  MutexLock lk(mu_);
  uint64_t n = 0;
  for (auto& b : stat_bufs_) n += b->drops();
  return n;
}

uint64_t RpcStats::dropped_exec() const {
  MutexLock lk(mu_);
  uint64_t n = 0;
  for (auto& b : exec_bufs_) n += b->drops();
  return n;
}

size_t RpcStats::tick() {
  MutexLock lk(mu_);
  TimePoint now = clock_.now();
  size_t n = 0;
  // Bounded: after a stall longer than a day, skip ahead instead of closing every second.
  while (now >= next_second_ && n < 86400) {
    process_locked();
    next_second_ += std::chrono::seconds(1);
    ++n;
  }
  if (now >= next_second_) next_second_ = now + std::chrono::seconds(1);
  return n;
}

void RpcStats::process_second() {
  MutexLock lk(mu_);
  process_locked();
  next_second_ += std::chrono::seconds(1);
}

Aggregate& RpcStats::get(std::unique_ptr<Aggregate>& slot) {
  if (!slot) slot = std::make_unique<Aggregate>(rings_);
  return *slot;
}

void RpcStats::add_record(const RawStatRecord& r) {
  NodeStats& n = nodes_[r.node];
  n.last_second = seconds_done_;
  auto add = [&](NodeStat s, int64_t v) REQUIRES(mu_) { get(n.stats[static_cast<int>(s)]).add(v); };
  add(NodeStat::kChannelWait, r.channel_wait_ns);
  if (!r.sent_verbs)
    add(NodeStat::kSendTcp, r.send_ns);
  else if (verbs_)
    add(NodeStat::kSendVerbs, r.send_ns);
  if (!r.received_verbs) add(NodeStat::kReceiveTcp, r.receive_ns);
  if (!r.sent_verbs && !r.received_verbs)
    add(NodeStat::kLatencyTcp, r.latency_ns);
  else if (verbs_)
    add(r.sent_verbs && r.received_verbs ? NodeStat::kLatencyVerbs : NodeStat::kLatencyMixed,
        r.latency_ns);
  size_t i = size_range(rpc_size(r.bytes_sent, r.bytes_received), cfg_.maxBlockSize);
  get(sizes_[i]).add(r.latency_ns);
  if (r.peer_ni != Nid() && r.bytes_sent <= kSmallRpcBytes && r.bytes_received <= kSmallRpcBytes) {
    PathLatency& p = path_latency_[{r.local_ni, r.peer_ni}];
    p.local_ni = r.local_ni;
    p.peer_ni = r.peer_ni;
    ++p.count;
    p.latency_ms += static_cast<double>(r.latency_ns) / 1e6;
    p.exec_ms += static_cast<double>(r.exec_ns) / 1e6;
  }
  type_times_[{true, r.msg_type}].cur.add(r.total_ns);
}

std::optional<Duration> RpcStats::type_p99(bool client, uint32_t type) const {
  MutexLock lk(mu_);
  auto it = type_times_.find({client, type});
  if (it == type_times_.end()) return std::nullopt;
  LogHistogram both = it->second.prev;
  it->second.cur.for_each([&](int i, uint64_t n) { both.add_bucket(i, n); });
  if (both.count() < kTypeP99MinSamples) return std::nullopt;
  return Duration(both.quantile(0.99));
}

std::vector<RpcStats::PathLatency> RpcStats::take_path_latency() {
  MutexLock lk(mu_);
  std::vector<PathLatency> v;
  v.reserve(path_latency_.size());
  for (auto& [k, p] : path_latency_) v.push_back(p);
  path_latency_.clear();
  return v;
}

void RpcStats::record_probe(const Nid& local, const Nid& peer, ProbeStat s, int64_t ns) {
  MutexLock lk(mu_);
  ProbeStats& p = probes_[{local, peer}];
  p.last_second = seconds_done_;
  get(p.stats[static_cast<int>(s)]).add(ns);
}

void RpcStats::process_locked() {
  for (auto& b : stat_bufs_)
    b->drain([this](const RawStatRecord& r) {
      mu_.assert_held();  // drain runs this under process_locked's lock
      add_record(r);
    });
  for (auto& b : exec_bufs_)
    b->drain([this](const RawExecRecord& r) {
      mu_.assert_held();
      get(messages_[r.msg_type]).add(r.exec_ns);
      if (r.queue_ns >= 0) type_times_[{false, r.msg_type}].cur.add(r.exec_ns);
    });

  int64_t start = second_start_;
  ++seconds_done_;
  if (seconds_done_ % kTypeP99EpochSeconds == 0)
    for (auto it = type_times_.begin(); it != type_times_.end();) {
      if (it->second.cur.count() == 0 && it->second.prev.count() == 0) {
        it = type_times_.erase(it);  // a type not seen for two epochs
        continue;
      }
      it->second.prev = it->second.cur;
      it->second.cur.clear();
      ++it;
    }
  bool minute_done = seconds_done_ % 60 == 0;
  bool hour_done = seconds_done_ % 3600 == 0;
  bool day_done = seconds_done_ % 86400 == 0;
  auto close = [&](Aggregate& a) REQUIRES(mu_) {
    a.close_second(start, minute_done, minute_start_, hour_done, hour_start_, day_done, day_start_);
  };
  for (auto& [k, n] : nodes_)
    for (auto& a : n.stats)
      if (a) close(*a);
  for (auto& a : sizes_)
    if (a) close(*a);
  for (auto& [k, a] : messages_) close(*a);
  for (auto& [k, p] : probes_)
    for (auto& a : p.stats)
      if (a) close(*a);

  second_start_ = start + 1;
  if (minute_done) minute_start_ = second_start_;
  if (hour_done) hour_start_ = second_start_;
  if (day_done) day_start_ = second_start_;

  // Free nodes gone longer than the day ring covers.
  int64_t keep = cfg_.rpcPerfNumberDayIntervals * 86400;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (seconds_done_ - it->second.last_second > keep)
      it = nodes_.erase(it);
    else
      ++it;
  }
  for (auto it = probes_.begin(); it != probes_.end();) {
    if (seconds_done_ - it->second.last_second > keep)
      it = probes_.erase(it);
    else
      ++it;
  }
}

void RpcStats::set_config(const StatsConfig& cfg) {
  jobs_.set_options(job_options(cfg));
  MutexLock lk(mu_);
  rings_ = ring_sizes(cfg);
  auto resize = [&](std::unique_ptr<Aggregate>& a) REQUIRES(mu_) {
    if (a) a->resize(rings_);
  };
  for (auto& [k, n] : nodes_)
    for (auto& a : n.stats) resize(a);
  for (auto& a : sizes_) resize(a);
  for (auto& [k, a] : messages_) resize(a);
  for (auto& [k, p] : probes_)
    for (auto& a : p.stats) resize(a);
  if (cfg.rpcPerfRawStatBufferSize != cfg_.rpcPerfRawStatBufferSize) {
    stat_bufs_.push_back(std::make_unique<RawBuffer<RawStatRecord>>(cfg.rpcPerfRawStatBufferSize));
    stat_buf_.store(stat_bufs_.back().get(), std::memory_order_release);
  }
  if (cfg.rpcPerfRawExecBufferSize != cfg_.rpcPerfRawExecBufferSize) {
    exec_bufs_.push_back(std::make_unique<RawBuffer<RawExecRecord>>(cfg.rpcPerfRawExecBufferSize));
    exec_buf_.store(exec_bufs_.back().get(), std::memory_order_release);
  }
  sizes_.resize(num_size_ranges(cfg.maxBlockSize));
  cfg_ = cfg;
}

StatView RpcStats::view(const Aggregate& a, const StatsQuery& q) const {
  StatView v;
  auto fill = [&](const IntervalRing& r, int64_t len, std::vector<IntervalView>* out) {
    size_t n = r.size();
    if (q.last) n = std::min(n, q.last);
    for (size_t i = n; i-- > 0;) {
      const Interval& iv = r.newest(i);
      IntervalView x;
      x.start = r.newest_start() - int64_t(i) * len;
      x.count = iv.count;
      if (iv.count) {
        x.avg_ms = double(iv.sum) / double(iv.count) / 1e6;
        x.min_ms = double(iv.min) / 1e6;
        x.max_ms = double(iv.max) / 1e6;
      }
      if (iv.p50 >= 0) x.p50_ms = percentile_ms(iv, iv.p50);
      if (iv.p99 >= 0) x.p99_ms = percentile_ms(iv, iv.p99);
      out->push_back(x);
    }
  };
  auto want = [&](Granularity g) { return !q.granularity || *q.granularity == g; };
  if (want(Granularity::kSecond)) fill(a.seconds(), 1, &v.seconds);
  if (want(Granularity::kMinute)) fill(a.minutes(), 60, &v.minutes);
  if (want(Granularity::kHour)) fill(a.hours(), 3600, &v.hours);
  if (want(Granularity::kDay)) fill(a.days(), 86400, &v.days);
  if (a.minutes().size() > 0) {
    const Interval& m = a.minutes().newest(0);
    if (m.p50 >= 0) v.p50_ms = percentile_ms(m, m.p50);
    if (m.p99 >= 0) v.p99_ms = percentile_ms(m, m.p99);
  }
  if (q.totals) {
    v.total.count = a.total().count;
    v.total.sum_ms = double(a.total().sum) / 1e6;
    a.total_histogram().for_each(
        [&](int b, uint64_t n) { v.total.buckets.emplace_back(LogHistogram::lower(b + 1), n); });
  }
  return v;
}

StatsReport RpcStats::query(const StatsQuery& q) const {
  StatsReport rep;
  MutexLock lk(mu_);
  for (auto& b : stat_bufs_) rep.dropped_stat += b->drops();
  for (auto& b : exec_bufs_) rep.dropped_exec += b->drops();
  using W = StatsQuery::What;
  if (q.what == W::kNode || q.what == W::kAll) {
    std::vector<Nid> keys;
    for (auto& [node, n] : nodes_)
      if (!q.node || *q.node == node) keys.push_back(node);
    std::sort(keys.begin(), keys.end());
    for (const Nid& node : keys) {
      const NodeStats& n = nodes_.at(node);
      NodeReport nr;
      nr.node = node;
      for (int s = 0; s < kNumNodeStats; ++s) {
        NodeStat st = static_cast<NodeStat>(s);
        if (!n.stats[s] || (node_stat_is_verbs(st) && !verbs_)) continue;
        nr.stats.emplace_back(st, view(*n.stats[s], q));
      }
      rep.nodes.push_back(std::move(nr));
    }
  }
  if (q.what == W::kSize || q.what == W::kAll) {
    for (size_t i = 0; i < sizes_.size(); ++i)
      if (sizes_[i])
        rep.sizes.push_back(SizeReport{range_low(i), range_high(i), view(*sizes_[i], q)});
  }
  if (q.what == W::kMessage || q.what == W::kAll) {
    for (auto& [type, a] : messages_) rep.messages.push_back(MessageReport{type, view(*a, q)});
  }
  if (q.what == W::kProbe) {
    for (auto& [k, p] : probes_) {
      if (q.node && *q.node != k.second) continue;
      ProbeReport pr{k.first, k.second, {}};
      for (int s = 0; s < kNumProbeStats; ++s)
        if (p.stats[s]) pr.stats.emplace_back(static_cast<ProbeStat>(s), view(*p.stats[s], q));
      rep.probes.push_back(std::move(pr));
    }
  }
  return rep;
}

size_t RpcStats::node_bytes(const Nid& node) const {
  MutexLock lk(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return 0;
  size_t b = sizeof(std::pair<const Nid, NodeStats>) + 16;  // hash node overhead
  for (auto& a : it->second.stats)
    if (a) b += a->bytes();
  return b;
}

size_t RpcStats::node_count() const {
  MutexLock lk(mu_);
  return nodes_.size();
}

size_t RpcStats::memory_bytes() const {
  size_t b = sizeof(*this);
  std::vector<Nid> keys;
  {
    MutexLock lk(mu_);
    for (auto& [k, n] : nodes_) keys.push_back(k);
    for (auto& a : sizes_)
      if (a) b += a->bytes();
    for (auto& [k, a] : messages_) b += a->bytes() + 48;
    b += type_times_.size() * (sizeof(TypeTimes) + 48);
    for (auto& [k, p] : probes_)
      for (auto& a : p.stats)
        if (a) b += a->bytes();
    for (auto& s : stat_bufs_) b += (s->limit() * (sizeof(RawStatRecord) + 8));
    for (auto& s : exec_bufs_) b += (s->limit() * (sizeof(RawExecRecord) + 8));
  }
  for (const Nid& k : keys) b += node_bytes(k);
  return b;
}

}  // namespace pfsnet
