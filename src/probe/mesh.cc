#include "probe/mesh.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "wire/byte_codec.h"

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

Buffer encode_mesh_mtu_ask(const Nid& probed) {
  ByteWriter w;
  w.nid(probed);
  return w.take();
}

std::optional<Nid> decode_mesh_mtu_ask(std::span<const uint8_t> b) {
  ByteReader r(b);
  Nid nid = r.nid();
  if (!r.done()) return std::nullopt;
  return nid;
}

Buffer encode_mesh_mtu_answer(uint32_t mtu) {
  ByteWriter w;
  w.u32(mtu);
  return w.take();
}

uint32_t decode_mesh_mtu_answer(std::span<const uint8_t> b) {
  if (b.size() != 4) return 0;
  ByteReader r(b);
  return r.u32();
}

std::string mesh_path_view(const MeshCell& c, double median_p50_ms, Duration window) {
  std::string s = fmt::format("mesh on {} -> {}, last {:.0f} s: ", c.local.to_string(),
                              c.peer.to_string(), std::chrono::duration<double>(window).count());
  if (c.rtt_count == 0) return s + fmt::format("none of {} probe(s) answered", c.sent);
  s += fmt::format("p50 {:.3f} ms, p99 {:.3f} ms", c.p50_ms, c.p99_ms);
  if (median_p50_ms > 0)
    s += fmt::format(" ({:.1f} x the median p50 {:.3f} ms of this node's probed paths)",
                     c.p99_ms / median_p50_ms, median_p50_ms);
  return s + fmt::format(", {} of {} probe(s) lost", c.lost, c.sent);
}

std::vector<MtuOutlier> mtu_outliers(const std::vector<MeshRow>& rows) {
  struct Ni {
    std::string node;
    uint32_t own = 0;                     // from its own node's cells
    std::map<uint32_t, size_t> reported;  // by others' cells: MTU -> cells
    std::set<std::string> seen_by;
    Nid parent;
  };
  std::map<Nid, Ni> nis;
  auto root = [&](Nid x) {
    while (nis[x].parent != x) x = nis[x].parent;
    return x;
  };
  auto add = [&](const Nid& nid, const std::string& node) -> Ni& {
    auto [it, fresh] = nis.try_emplace(nid);
    if (fresh) it->second.parent = nid;
    it->second.node = node;
    return it->second;
  };
  for (const MeshRow& r : rows)
    for (const MeshCell& c : r.cells) {
      if (!c.on_link || c.local_mtu == 0 || c.peer_mtu == 0) continue;
      Ni& l = add(c.local, r.from);
      l.own = c.local_mtu;
      l.seen_by.insert(r.from);
      Ni& p = add(c.peer, c.to);
      ++p.reported[c.peer_mtu];
      p.seen_by.insert(r.from);
      Nid a = root(c.local), b = root(c.peer);
      if (a != b) nis[a].parent = b;
    }
  // Each link: its NIs and their MTUs.
  std::map<Nid, std::vector<std::pair<Nid, uint32_t>>> links;
  for (auto& [nid, ni] : nis) {
    uint32_t mtu = ni.own;
    if (mtu == 0) {
      size_t best = 0;
      for (const auto& [m, n] : ni.reported)
        if (n > best) best = n, mtu = m;
    }
    links[root(nid)].push_back({nid, mtu});
  }
  std::vector<MtuOutlier> out;
  for (const auto& [_, members] : links) {
    std::map<uint32_t, size_t> count;
    for (const auto& [nid, mtu] : members) ++count[mtu];
    if (count.size() < 2) continue;
    uint32_t usual = 0;
    size_t with = 0;
    for (const auto& [m, n] : count)
      if (2 * n > members.size()) usual = m, with = n;
    for (const auto& [nid, mtu] : members) {
      if (usual != 0 && mtu == usual) continue;
      const Ni& ni = nis[nid];
      out.push_back({nid, ni.node, mtu, usual, with, members.size(),
                     std::vector<std::string>(ni.seen_by.begin(), ni.seen_by.end())});
    }
  }
  return out;
}

MeshOutlierRule MeshOutlierRule::from(const Config& cfg) {
  MeshOutlierRule r;
  r.factor = cfg.mesh.outlier_factor;
  r.min_excess_ms = cfg.mesh.outlier_min_excess_ms;
  r.throttled_min_excess_ms = cfg.mesh.throttled_min_excess_ms;
  r.bulk_bytes = static_cast<size_t>(cfg.mesh.bulk_bytes);
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
  // Every reported NI, from its own node's row.
  std::map<Nid, const MeshNi*> nis;
  for (const MeshRow& r : rows)
    for (const MeshNi& n : r.nis) nis[n.nid] = &n;
  auto ni = [&](const Nid& x) -> const MeshNi* {
    auto it = nis.find(x);
    return it == nis.end() ? nullptr : it->second;
  };
  // A cell's class: the speed of its slower end (0: neither end's is known).
  auto speed_class = [&](const MeshCell& c) {
    uint32_t a = ni(c.local) ? ni(c.local)->speed_mbit : 0;
    uint32_t b = ni(c.peer) ? ni(c.peer)->speed_mbit : 0;
    return a == 0 ? b : b == 0 ? a : std::min(a, b);
  };
  std::map<uint32_t, std::vector<double>> p50, wr, rd;  // by class
  for (const MeshRow& r : rows)
    for (const MeshCell& c : r.cells) {
      uint32_t k = speed_class(c);
      if (c.rtt_count >= rule.min_sent) p50[k].push_back(c.p50_ms);
      if (c.write_mib_s > 0) wr[k].push_back(c.write_mib_s);
      if (c.read_mib_s > 0) rd[k].push_back(c.read_mib_s);
    }
  struct ClassMedian {
    size_t n = 0;
    double m = 0;
  };
  auto medians = [](const std::map<uint32_t, std::vector<double>>& by) {
    std::map<uint32_t, ClassMedian> out;
    for (const auto& [k, v] : by) out[k] = {v.size(), median(v)};
    return out;
  };
  std::map<uint32_t, ClassMedian> m50 = medians(p50), mwr = medians(wr), mrd = medians(rd);
  double size_mib = double(rule.bulk_bytes) / double(1 << 20);
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
      uint32_t k = speed_class(c);
      std::string of = k ? fmt::format(" of the {} Mbit/s paths", k) : std::string();
      auto lat = m50.find(k);
      if (c.rtt_count >= rule.min_sent && lat != m50.end() && lat->second.n >= 2 &&
          c.p50_ms > rule.factor * lat->second.m &&
          c.p50_ms - lat->second.m >= rule.min_excess_ms) {
        why.push_back(fmt::format("p50 {:.3f} ms > {:g} x median {:.3f} ms{}", c.p50_ms,
                                  rule.factor, lat->second.m, of));
        mark.slow = true;
      }
      const MeshNi* here = ni(c.local);
      const MeshNi* there = ni(c.peer);
      // `sent`: the NI that sends this direction's data, `got` the one that receives it.
      auto slow_bulk = [&](double v, const std::map<uint32_t, ClassMedian>& by, const MeshNi* sent,
                           const MeshNi* got, const char* dir) {
        auto it = by.find(k);
        if (v <= 0 || it == by.end() || it->second.n < 2) return;
        double med = it->second.m;
        if (med <= 0 || v * rule.factor >= med) return;
        if (1000.0 * (size_mib / v - size_mib / med) < rule.throttled_min_excess_ms) return;
        double carried = std::max(sent ? sent->tx_mib_s : 0.0, got ? got->rx_mib_s : 0.0);
        if (carried * rule.factor >= med) return;
        std::string load =
            carried > 0 ? fmt::format("; its NIs carried at most {:.1f} MiB/s", carried) : "";
        why.push_back(fmt::format("{} {:.1f} MiB/s < median {:.1f}{} / {:g}{}", dir, v, med, of,
                                  rule.factor, load));
        mark.throttled = true;
      };
      slow_bulk(c.write_mib_s, mwr, here, there, "write");
      slow_bulk(c.read_mib_s, mrd, there, here, "read");
      std::string text;
      for (const std::string& w : why) text += (text.empty() ? "" : "; ") + w;
      mark.reason = std::move(text);
    }
  }
  return marks;
}

void MeshNiLoad::sample(TimePoint t, uint64_t tx_bytes, uint64_t rx_bytes) {
  if (have_last_ && t > last_t_ && tx_bytes >= last_tx_ && rx_bytes >= last_rx_) {
    double s = std::chrono::duration<double>(t - last_t_).count();
    double mib = double(1 << 20);
    rates_.push_back(
        {t, double(tx_bytes - last_tx_) / mib / s, double(rx_bytes - last_rx_) / mib / s});
    if (rates_.size() > MeshWindow::kMaxSamples) rates_.pop_front();
  }
  have_last_ = true;
  last_t_ = t;
  last_tx_ = tx_bytes;
  last_rx_ = rx_bytes;
}

std::pair<double, double> MeshNiLoad::peak(TimePoint now) {
  while (!rates_.empty() && now - rates_.front().t > window_) rates_.pop_front();
  double tx = 0, rx = 0;
  for (const Rate& r : rates_) {
    tx = std::max(tx, r.tx);
    rx = std::max(rx, r.rx);
  }
  return {tx, rx};
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
  // Losses end on fresh evidence: once kAnsweredAfterLoss small probes in a row have been
  // answered since the last loss, the path answers again (an outage is over) and its
  // losses no longer stand. (Loss a path keeps -- TCP's retransmits hide packet loss from
  // these few probes, so theirs is an outage's -- comes back with the next one.)
  size_t answered_since = 0;
  for (auto it = samples_.rbegin(); it != samples_.rend() && it->kind != Kind::kLost; ++it)
    answered_since += it->kind == Kind::kRtt;
  if (answered_since >= kAnsweredAfterLoss) c.lost = 0;
  c.rtt_count = static_cast<uint32_t>(rtt.size());
  if (!rtt.empty()) {
    std::sort(rtt.begin(), rtt.end());
    auto q = [&](double p) { return rtt[static_cast<size_t>(p * double(rtt.size() - 1) + 0.5)]; };
    c.p50_ms = q(0.50);
    c.p99_ms = q(0.99);
  }
  // The best of the window: what the path can carry. A throttled path never does better; a
  // busy host (or a busy loopback) only sometimes does worse -- so not from one probe
  // alone: one slow probe on a busy host once had a healthy path marked THROTTLED.
  auto best = [](const std::vector<double>& v) {
    return v.size() < kMinBulkSamples ? 0.0 : *std::max_element(v.begin(), v.end());
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
  board_.update(MeshRow{std::move(req.name), 0, std::move(req.cells), std::move(req.nis)}, now,
                wall_ms);
  return rep;
}

}  // namespace pfsnet
