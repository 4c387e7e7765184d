#include "probe/mesh.h"

#include <fmt/format.h>

#include <algorithm>

namespace pfsnet {

std::vector<size_t> mesh_targets(size_t n, size_t self, size_t k, uint64_t epoch) {
  std::vector<size_t> v;
  if (n < 2 || k == 0 || self >= n) return v;
  size_t others = n - 1;
  if (k >= others) {
    for (size_t i = 1; i <= others; ++i) v.push_back((self + i) % n);
    return v;
  }
  // Offsets 1 + floor(j * others / k) are k distinct values of [1, others]; rotating them
  // by the epoch modulo `others` keeps them distinct. The same offsets for every node make
  // in-degree equal out-degree.
  v.reserve(k);
  for (size_t j = 0; j < k; ++j) {
    size_t base = j * others / k;
    size_t off = 1 + (base + epoch % others) % others;
    v.push_back((self + off) % n);
  }
  return v;
}

MeshOutlierRule MeshOutlierRule::from(const Config& cfg) {
  MeshOutlierRule r;
  r.factor = cfg.mesh.outlier_factor;
  r.min_excess_ms = cfg.mesh.outlier_min_excess_ms;
  r.loss_ratio = cfg.mesh.loss_ratio;
  return r;
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m), v.end());
  return v[m];
}

}  // namespace

std::vector<std::vector<MeshMark>> mark_outliers(const std::vector<MeshRow>& rows,
                                                 const MeshOutlierRule& rule) {
  std::vector<double> p50, wr, rd;
  for (const MeshRow& r : rows)
    for (const MeshCell& c : r.cells) {
      if (c.rtt_count >= rule.min_sent) p50.push_back(c.p50_ms);
      if (c.write_mib_s > 0) wr.push_back(c.write_mib_s);
      if (c.read_mib_s > 0) rd.push_back(c.read_mib_s);
    }
  double m50 = median(p50), mwr = median(wr), mrd = median(rd);
  std::vector<std::vector<MeshMark>> marks;
  marks.reserve(rows.size());
  for (const MeshRow& r : rows) {
    std::vector<MeshMark>& row = marks.emplace_back(r.cells.size());
    for (size_t i = 0; i < r.cells.size(); ++i) {
      const MeshCell& c = r.cells[i];
      std::vector<std::string> why;
      MeshMark& mark = row[i];
      if (c.sent >= rule.min_sent && c.lost > rule.loss_ratio * c.sent) {
        why.push_back(fmt::format("lost {} of {} probes", c.lost, c.sent));
        mark.lossy = true;
      }
      if (c.rtt_count >= rule.min_sent && p50.size() >= 2 && c.p50_ms > rule.factor * m50 &&
          c.p50_ms - m50 >= rule.min_excess_ms) {
        why.push_back(
            fmt::format("p50 {:.3f} ms > {:g} x median {:.3f} ms", c.p50_ms, rule.factor, m50));
        mark.slow = true;
      }
      auto slow_bulk = [&](double v, double med, const char* dir) {
        if (v > 0 && med > 0 && v * rule.factor < med) {
          why.push_back(
              fmt::format("{} {:.1f} MiB/s < median {:.1f} / {:g}", dir, v, med, rule.factor));
          mark.throttled = true;
        }
      };
      if (wr.size() >= 2) slow_bulk(c.write_mib_s, mwr, "write");
      if (rd.size() >= 2) slow_bulk(c.read_mib_s, mrd, "read");
      std::string text;
      for (const std::string& w : why) text += (text.empty() ? "" : "; ") + w;
      mark.reason = std::move(text);
    }
  }
  return marks;
}

void MeshWindow::add(TimePoint t, Kind k, double v) {
  samples_.push_back({t, k, v});
  if (samples_.size() > kMaxSamples) samples_.pop_front();
}

MeshCell MeshWindow::cell(TimePoint now) {
  while (!samples_.empty() && now - samples_.front().t > window_) samples_.pop_front();
  MeshCell c;
  std::vector<double> rtt, wr, rd;
  for (const Sample& s : samples_) {
    ++c.sent;
    switch (s.kind) {
      case Kind::kRtt:
        rtt.push_back(s.v);
        break;
      case Kind::kWrite:
        wr.push_back(s.v);
        break;
      case Kind::kRead:
        rd.push_back(s.v);
        break;
      case Kind::kLost:
        ++c.lost;
        break;
    }
  }
  c.rtt_count = static_cast<uint32_t>(rtt.size());
  if (!rtt.empty()) {
    std::sort(rtt.begin(), rtt.end());
    auto q = [&](double p) { return rtt[static_cast<size_t>(p * double(rtt.size() - 1) + 0.5)]; };
    c.p50_ms = q(0.50);
    c.p99_ms = q(0.99);
  }
  // The best of the window: what the path can carry. A throttled path never does better; a
  // busy host (or a busy loopback) only sometimes does worse.
  auto best = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  };
  c.write_mib_s = best(wr);
  c.read_mib_s = best(rd);
  return c;
}

void MeshBoard::update(MeshRow row, TimePoint now, int64_t wall_ms) {
  row.updated_unix_ms = wall_ms;
  std::string name = row.from;
  rows_[name] = Entry{std::move(row), now};
}

std::vector<MeshRow> MeshBoard::rows(TimePoint now) {
  std::vector<MeshRow> v;
  for (auto it = rows_.begin(); it != rows_.end();) {
    if (now - it->second.at > expiry_) {
      it = rows_.erase(it);
      continue;
    }
    v.push_back(it->second.row);
    ++it;
  }
  return v;
}

Duration MeshMgsCore::sync_interval() const {
  auto spread = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double>(double(live_.size()) / max_rate_));
  return std::max(report_, spread);
}

void MeshMgsCore::set_nodes(std::vector<NodeEvent> live) {
  std::sort(live.begin(), live.end(),
            [](const NodeEvent& a, const NodeEvent& b) { return a.name < b.name; });
  live_ = std::move(live);
  index_.clear();
  index_.reserve(live_.size());
  for (size_t i = 0; i < live_.size(); ++i) index_[live_[i].name] = i;
  board_.set_expiry(3 * sync_interval());
}

MeshSyncRep MeshMgsCore::sync(MeshSyncReq req, TimePoint now, int64_t wall_ms) {
  MeshSyncRep rep;
  auto it = index_.find(req.name);
  if (it == index_.end()) {
    rep.status = PingStatus::kUnknown;
    return rep;
  }
  rep.epoch = epoch(wall_ms);
  rep.next_sync_ms = static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(sync_interval()).count());
  for (size_t i : mesh_targets(live_.size(), it->second, peers_, rep.epoch))
    rep.targets.push_back(live_[i]);
  board_.update(MeshRow{std::move(req.name), 0, std::move(req.cells)}, now, wall_ms);
  return rep;
}

}  // namespace pfsnet
