#include "probe/mesh.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "wire/byte_codec.h"

namespace pfsnet {
namespace {

using std::chrono::seconds;

TEST(MeshTargetsTest, EveryNodeProbesAndIsProbedByExactlyKOthers) {
  for (size_t n : {1, 2, 3, 5, 9, 10, 100, 1001})
    for (size_t k : {0, 1, 3, 8})
      for (uint64_t epoch : {0, 1, 7, 123456}) {
        std::vector<size_t> in(n, 0);
        size_t want = n < 2 ? 0 : std::min(k, n - 1);
        for (size_t i = 0; i < n; ++i) {
          std::vector<size_t> t = mesh_targets(n, i, k, epoch);
          std::set<size_t> distinct(t.begin(), t.end());
          ASSERT_EQ(t.size(), want) << n << " " << k << " " << i;
          ASSERT_EQ(distinct.size(), t.size()) << n << " " << k << " " << i;
          ASSERT_FALSE(distinct.count(i)) << "node " << i << " probes itself";
          for (size_t x : t) {
            ASSERT_LT(x, n);
            ++in[x];
          }
        }
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(in[i], want) << n << " " << k << " " << i;
      }
}

TEST(MeshTargetsTest, RotationBringsNewPairsUntilEveryPairWasProbed) {
  const size_t n = 20, k = 3;
  std::set<std::pair<size_t, size_t>> seen;
  std::vector<size_t> first = mesh_targets(n, 0, k, 0), second = mesh_targets(n, 0, k, 1);
  EXPECT_NE(std::set<size_t>(first.begin(), first.end()),
            std::set<size_t>(second.begin(), second.end()));
  for (uint64_t e = 0; e < n - 1; ++e)
    for (size_t i = 0; i < n; ++i)
      for (size_t t : mesh_targets(n, i, k, e)) seen.insert({i, t});
  EXPECT_EQ(seen.size(), n * (n - 1));
}

TEST(MeshWindowTest, CellOfTheWindow) {
  ManualClock clock;
  MeshWindow w(seconds(60));
  TimePoint t0 = clock.now();
  w.rtt(t0, 50.0);  // falls out of the window below
  for (int i = 1; i <= 100; ++i) w.rtt(t0 + seconds(30), double(i) / 10.0);
  w.lost(t0 + seconds(31));
  w.bulk(t0 + seconds(32), true, 100);
  w.bulk(t0 + seconds(33), true, 300);
  w.bulk(t0 + seconds(34), true, 200);
  w.bulk(t0 + seconds(35), false, 50);
  // One probe of a direction is no figure yet (a busy host's one slow probe is no throttle).
  EXPECT_EQ(w.cell(t0 + seconds(36)).read_mib_s, 0);
  w.bulk(t0 + seconds(36), false, 40);
  MeshCell c = w.cell(t0 + seconds(61));
  EXPECT_EQ(c.rtt_count, 100u);
  EXPECT_EQ(c.sent, 106u);
  EXPECT_EQ(c.lost, 1u);
  EXPECT_DOUBLE_EQ(c.p50_ms, 5.1);
  EXPECT_DOUBLE_EQ(c.p99_ms, 9.9);
  EXPECT_DOUBLE_EQ(c.write_mib_s, 300);  // the best of 100, 300, 200
  EXPECT_DOUBLE_EQ(c.read_mib_s, 50);    // the best of 50, 40
  // Everything ages out.
  c = w.cell(t0 + seconds(200));
  EXPECT_EQ(c.sent, 0u);
  EXPECT_EQ(c.p50_ms, 0);
}

TEST(MeshWindowTest, LossesEndWhenThePathAnswersAgain) {
  ManualClock clock;
  MeshWindow w(seconds(90));
  TimePoint t = clock.now();
  for (int i = 0; i < 20; ++i) w.rtt(t + seconds(i), 0.2);
  for (int i = 20; i < 30; ++i) w.lost(t + seconds(i));  // an outage of 10 s
  EXPECT_EQ(w.cell(t + seconds(30)).lost, 10u);
  for (int i = 30; i < 34; ++i) w.rtt(t + seconds(i), 0.2);
  w.bulk(t + seconds(34), true, 100);  // a bulk answer is not a small one
  EXPECT_EQ(w.cell(t + seconds(35)).lost, 10u) << "four answers: not over yet";
  w.rtt(t + seconds(35), 0.2);
  MeshCell c = w.cell(t + seconds(36));
  EXPECT_EQ(c.lost, 0u) << "five in a row: the outage is over, long before it leaves the window";
  EXPECT_EQ(c.sent, 36u);
  // A loss again: every loss of the window stands again until five more answers.
  w.lost(t + seconds(36));
  EXPECT_EQ(w.cell(t + seconds(37)).lost, 11u);
}

TEST(MeshWindowTest, HoldsAtMostItsCapacity) {
  ManualClock clock;
  MeshWindow w(seconds(3600));
  for (size_t i = 0; i < 3 * MeshWindow::kMaxSamples; ++i) w.lost(clock.now());
  EXPECT_EQ(w.cell(clock.now()).sent, MeshWindow::kMaxSamples);
}

MeshCell cell(const std::string& to, double p50, uint32_t sent = 10, uint32_t lost = 0,
              double wr = 0, double rd = 0) {
  MeshCell c;
  c.to = to;
  c.local = *Nid::parse("127.0.0.1@tcp");
  c.peer = *Nid::parse("127.0.0.2@tcp");
  c.sent = sent;
  c.lost = lost;
  c.rtt_count = sent - lost;
  c.p50_ms = p50;
  c.p99_ms = p50 * 2;
  c.write_mib_s = wr;
  c.read_mib_s = rd;
  return c;
}

// A slow RPC's network verdict carries the mesh's view of its path (issue 70 item 3).
TEST(MeshPathViewTest, SaysThePathsFiguresBesideItsNodesOtherPaths) {
  MeshCell c;
  c.local = *Nid::parse("198.18.0.1@tcp");
  c.peer = *Nid::parse("198.18.0.2@tcp");
  c.sent = 120;
  c.lost = 2;
  c.rtt_count = 118;
  c.p50_ms = 0.41;
  c.p99_ms = 3.2;
  EXPECT_EQ(mesh_path_view(c, 0.3, std::chrono::seconds(90)),
            "mesh on 198.18.0.1@tcp -> 198.18.0.2@tcp, last 90 s: p50 0.410 ms, p99 3.200 ms "
            "(10.7 x the median p50 0.300 ms of this node's probed paths), 2 of 120 probe(s) "
            "lost");
  EXPECT_EQ(mesh_path_view(c, 0, std::chrono::seconds(90)),
            "mesh on 198.18.0.1@tcp -> 198.18.0.2@tcp, last 90 s: p50 0.410 ms, p99 3.200 ms, 2 "
            "of 120 probe(s) lost");
  c.rtt_count = 0;
  c.lost = 120;
  EXPECT_EQ(mesh_path_view(c, 0.3, std::chrono::seconds(90)),
            "mesh on 198.18.0.1@tcp -> 198.18.0.2@tcp, last 90 s: none of 120 probe(s) answered");
}

TEST(MeshOutliersTest, NamesTheSlowTheLossyAndTheThrottledAndNothingElse) {
  std::vector<MeshRow> rows(3);
  rows[0].from = "a";
  rows[0].cells = {cell("b", 0.10, 10, 0, 900, 900), cell("c", 0.12, 10, 0, 950, 920)};
  rows[1].from = "b";
  rows[1].cells = {cell("a", 0.11, 10, 0, 910, 905), cell("c", 8.0, 10, 0, 890, 880)};
  rows[2].from = "c";
  rows[2].cells = {cell("a", 0.10, 20, 2, 930, 940), cell("b", 0.13, 10, 0, 4, 900)};
  MeshOutlierRule rule;
  auto marks = mark_outliers(rows, rule);
  ASSERT_EQ(marks.size(), 3u);
  EXPECT_EQ(marks[0][0].reason, "");
  EXPECT_EQ(marks[0][1].reason, "");
  EXPECT_EQ(marks[1][0].reason, "");
  EXPECT_NE(marks[1][1].reason.find("p50 8.000 ms > 3 x median"), std::string::npos)
      << marks[1][1].reason;
  EXPECT_EQ(marks[2][0].reason, "lost 2 of 20 probes");
  EXPECT_NE(marks[2][1].reason.find("write 4.0 MiB/s < median"), std::string::npos)
      << marks[2][1].reason;
  // Fewer probes than min_sent: a loss is not judged yet.
  rows[2].cells[0] = cell("a", 0.10, 2, 1);
  EXPECT_EQ(mark_outliers(rows, rule)[2][0].reason, "");
  // Less than min_excess_ms above the median is not slow, whatever the factor: 4 ms is 36 x
  // the median here, and what two cores of busy daemons add to a probe under load.
  rows[1].cells[1].p50_ms = 4.0;
  EXPECT_EQ(mark_outliers(rows, rule)[1][1].reason, "");
}

// Rows of n nodes "n0".. each probing the next on one NI per node ("198.18.0.<i+1>@tcp"),
// every cell at `mib_s` both ways; each node's NI reported at `speed` Mbit/s.
std::vector<MeshRow> ring(size_t n, double mib_s, uint32_t speed, size_t first = 0) {
  std::vector<MeshRow> rows(n);
  auto nid = [&](size_t i) {
    return *Nid::parse("198.18.0." + std::to_string(first + (i % n) + 1) + "@tcp");
  };
  for (size_t i = 0; i < n; ++i) {
    rows[i].from = "n" + std::to_string(first + i);
    MeshCell c = cell("n" + std::to_string(first + (i + 1) % n), 0.1, 10, 0, mib_s, mib_s);
    c.local = nid(i);
    c.peer = nid(i + 1);
    rows[i].cells = {c};
    rows[i].nis = {MeshNi{nid(i), speed, 0, 0}};
  }
  return rows;
}

TEST(MeshOutliersTest, APathIsJudgedAmongThePathsOfItsSpeed) {
  // Five nodes on 10 Gbit/s links probing each other at 900 MiB/s, five on 100 Mbit/s at 11.
  std::vector<MeshRow> rows = ring(5, 900, 10000);
  // Their small probes wait 20 ms behind the bulk their links' queues hold.
  for (MeshRow& r : ring(5, 11, 100, 5)) {
    r.cells[0].p50_ms = 20;
    rows.push_back(r);
  }
  MeshOutlierRule rule;
  auto count = [&](const std::vector<MeshRow>& v, bool MeshMark::*what) {
    int n = 0;
    for (const auto& row : mark_outliers(v, rule))
      for (const MeshMark& m : row) n += m.*what;
    return n;
  };
  EXPECT_EQ(count(rows, &MeshMark::throttled), 0);
  EXPECT_EQ(count(rows, &MeshMark::slow), 0);
  // Against the median of all paths (no speeds known: one class) the slower links read as
  // five THROTTLED and SLOW paths.
  std::vector<MeshRow> unknown = rows;
  for (MeshRow& r : unknown) r.nis[0].speed_mbit = 0;
  EXPECT_EQ(count(unknown, &MeshMark::throttled), 5);
  EXPECT_EQ(count(unknown, &MeshMark::slow), 0) << "the median of ten is the slow half's";
  unknown.pop_back();
  EXPECT_EQ(count(unknown, &MeshMark::slow), 4);
  // Within its class a path 3 x slower than its kind is SLOW.
  rows[6].cells[0].p50_ms = 70;
  auto slow = mark_outliers(rows, rule);
  EXPECT_EQ(slow[6][0].reason, "p50 70.000 ms > 3 x median 20.000 ms of the 100 Mbit/s paths");
  rows[6].cells[0].p50_ms = 20;
  // A 100 Mbit/s path at 2 MiB/s is throttled among its kind, named with its class.
  rows[7].cells[0].write_mib_s = 2;
  auto marks = mark_outliers(rows, rule);
  EXPECT_TRUE(marks[7][0].throttled);
  EXPECT_NE(marks[7][0].reason.find("write 2.0 MiB/s < median 11.0 of the 100 Mbit/s paths / 3"),
            std::string::npos)
      << marks[7][0].reason;
  for (size_t i = 0; i < rows.size(); ++i)
    if (i != 7) {
      EXPECT_FALSE(marks[i][0].any()) << i << ": " << marks[i][0].reason;
    }
  // A path's class is its slower end's: n4 (10 Gbit/s) -> n0 is a 10 Gbit/s path, but
  // n4 -> n5 (100 Mbit/s) would be judged among the 100 Mbit/s ones.
  rows[4].cells[0].peer = rows[5].nis[0].nid;
  rows[4].cells[0].write_mib_s = rows[4].cells[0].read_mib_s = 11;
  marks = mark_outliers(rows, rule);
  EXPECT_FALSE(marks[4][0].any()) << marks[4][0].reason;
}

TEST(MeshOutliersTest, ABusyHostsLateAnswerIsNotAThrottle) {
  // Eight daemons on two cores: a 128 KiB probe measured 18-27 MiB/s where the median was
  // 80-90 -- 3-5 ms later than the median's, the scheduling of a busy host.
  std::vector<MeshRow> rows = ring(6, 90, 10000);
  rows[2].cells[0].read_mib_s = 18;
  MeshOutlierRule rule;
  auto marks = mark_outliers(rows, rule);
  EXPECT_FALSE(marks[2][0].any()) << marks[2][0].reason;
  // A shaper at 20 Mbit/s (2.4 MiB/s) takes 50 ms more: throttled.
  rows[2].cells[0].read_mib_s = 2.4;
  EXPECT_TRUE(mark_outliers(rows, rule)[2][0].throttled);
  // The floor is a key: at 0 the factor alone judges, as before.
  rows[2].cells[0].read_mib_s = 18;
  rule.throttled_min_excess_ms = 0;
  EXPECT_TRUE(mark_outliers(rows, rule)[2][0].throttled);
}

TEST(MeshOutliersTest, ABusyLinkIsNotAThrottledOne) {
  // A path whose probe gets 3 MiB/s of a 1 Gbit/s class at 100: throttled -- unless one of
  // its ends carried more than a third of the median in the window (the load took the
  // rest), which shows the link carries it.
  std::vector<MeshRow> rows = ring(6, 100, 1000);
  rows[1].cells[0].write_mib_s = 3;  // n1 -> n2: n1's NI sends, n2's receives
  MeshOutlierRule rule;
  rows[2].nis[0].rx_mib_s = 95;
  auto marks = mark_outliers(rows, rule);
  EXPECT_FALSE(marks[1][0].any()) << marks[1][0].reason;
  rows[2].nis[0].rx_mib_s = 0;
  rows[1].nis[0].tx_mib_s = 95;
  EXPECT_FALSE(mark_outliers(rows, rule)[1][0].any());
  // The other direction's load does not explain it: n1 receiving, n2 sending.
  rows[1].nis[0] = {rows[1].nis[0].nid, 1000, 0, 95};
  rows[2].nis[0] = {rows[2].nis[0].nid, 1000, 95, 2.9};
  marks = mark_outliers(rows, rule);
  EXPECT_TRUE(marks[1][0].throttled);
  EXPECT_NE(marks[1][0].reason.find("its NIs carried at most 2.9 MiB/s"), std::string::npos)
      << marks[1][0].reason;
}

TEST(MeshNiLoadTest, ThePeakOfTheWindowEachWay) {
  ManualClock clock;
  MeshNiLoad l(seconds(10));
  EXPECT_EQ(l.peak(clock.now()), std::make_pair(0.0, 0.0));
  l.sample(clock.now(), 0, 0);
  EXPECT_EQ(l.peak(clock.now()), std::make_pair(0.0, 0.0)) << "one sample is no rate";
  clock.advance(seconds(1));
  l.sample(clock.now(), 50 << 20, 10 << 20);  // 50 MiB/s out, 10 in
  clock.advance(seconds(2));
  l.sample(clock.now(), 60 << 20, 50 << 20);  // 5 out, 20 in
  EXPECT_EQ(l.peak(clock.now()), std::make_pair(50.0, 20.0));
  clock.advance(seconds(9));  // the first interval (ended at 1 s) is out of the window
  EXPECT_EQ(l.peak(clock.now()), std::make_pair(5.0, 20.0));
  // Counters that went back (the interface was made again) start over: no rate from them.
  l.sample(clock.now(), 1 << 20, 1 << 20);
  EXPECT_EQ(l.peak(clock.now()), std::make_pair(5.0, 20.0));
  clock.advance(seconds(1));
  l.sample(clock.now(), 3 << 20, 1 << 20);
  clock.advance(seconds(10));
  EXPECT_EQ(l.peak(clock.now()), std::make_pair(2.0, 0.0));
}

TEST(MeshBoardTest, KeepsTheNewestRowOfEachNodeAndDropsStaleOnes) {
  ManualClock clock;
  MeshBoard b(seconds(90));
  MeshRow r;
  r.from = "n2";
  r.cells = {cell("n3", 0.1)};
  b.update(r, clock.now(), 1000);
  r.cells = {cell("n3", 0.2), cell("n4", 0.3)};
  b.update(r, clock.now(), 2000);
  r.from = "n1";
  clock.advance(seconds(60));
  b.update(r, clock.now(), 3000);
  auto rows = b.rows(clock.now());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].from, "n1");
  EXPECT_EQ(rows[1].from, "n2");
  EXPECT_EQ(rows[1].cells.size(), 2u);
  EXPECT_EQ(rows[1].updated_unix_ms, 2000);
  clock.advance(seconds(31));  // n2's row is 91 s old
  rows = b.rows(clock.now());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].from, "n1");
  EXPECT_EQ(b.size(), 1u);
}

TEST(MeshProtocolTest, RoundTripsAndRefusesMalformedMessages) {
  MeshSyncReq req{"client-7", {cell("server-1", 0.25, 12, 1, 800, 700), cell("s2", 0, 3, 3)}};
  req.cells[0].local_mtu = 9000;
  req.cells[0].peer_mtu = 1500;
  req.cells[0].on_link = true;
  req.nis = {MeshNi{*Nid::parse("198.18.0.7@tcp"), 10000, 812.5, 3.25},
             MeshNi{*Nid::parse("198.18.1.7@tcp1"), 0, 0, 0}};
  auto back = decode_mesh_sync_req(encode(req).span());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->name, req.name);
  EXPECT_EQ(back->cells, req.cells);
  EXPECT_EQ(back->nis, req.nis);

  MeshSyncRep rep;
  rep.epoch = 42;
  rep.targets.push_back({3,
                         "server-1",
                         kRoleServer,
                         NodeState::kUp,
                         {*Nid::parse("127.0.0.3@tcp"), *Nid::parse("127.0.1.3@tcp1")}});
  auto rb = decode_mesh_sync_rep(encode(rep).span());
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->epoch, 42u);
  ASSERT_EQ(rb->targets.size(), 1u);
  EXPECT_EQ(rb->targets[0].nids, rep.targets[0].nids);

  MeshMatrix m;
  m.epoch = 9;
  m.total = 5;
  m.offset = 2;
  m.rows = {MeshRow{"a", 123, req.cells, req.nis}, MeshRow{"b", 456, {}, {}}};
  auto mb = decode_mesh_matrix(encode(m).span());
  ASSERT_TRUE(mb.ok());
  EXPECT_EQ(mb->rows, m.rows);
  EXPECT_EQ(mb->total, 5u);
  EXPECT_EQ(mb->offset, 2u);

  // Every truncation of a valid message is refused, as are trailing bytes.
  Buffer b = encode(req);
  for (size_t n = 0; n < b.size(); ++n)
    EXPECT_FALSE(decode_mesh_sync_req(std::span(b.data(), n)).ok()) << n;
  std::vector<uint8_t> longer(b.data(), b.data() + b.size());
  longer.push_back(0);
  EXPECT_FALSE(decode_mesh_sync_req(longer).ok());
  // A cell that lost more than it sent, a figure that is not a number.
  MeshSyncReq bad{"x", {cell("y", 0.1)}};
  bad.cells[0].lost = 11;
  EXPECT_FALSE(decode_mesh_sync_req(encode(bad).span()).ok());
  bad.cells[0].lost = 0;
  bad.cells[0].p50_ms = std::nan("");
  EXPECT_FALSE(decode_mesh_sync_req(encode(bad).span()).ok());
  bad.cells[0].p50_ms = -1;
  EXPECT_FALSE(decode_mesh_sync_req(encode(bad).span()).ok());
  // No name.
  EXPECT_FALSE(decode_mesh_sync_req(encode(MeshSyncReq{"", {}}).span()).ok());
  // on_link is one bit: any other byte is refused.
  Buffer ok = encode(MeshSyncReq{"x", {cell("y", 0.1)}});
  std::vector<uint8_t> flag(ok.data(), ok.data() + ok.size());
  flag[flag.size() - 5] = 2;  // before the NI count
  EXPECT_FALSE(decode_mesh_sync_req(flag).ok());
  // An NI's figure that is not a number; more NIs than a node has.
  MeshSyncReq nan_ni{"x", {}, {MeshNi{*Nid::parse("198.18.0.7@tcp"), 100, std::nan(""), 0}}};
  EXPECT_FALSE(decode_mesh_sync_req(encode(nan_ni).span()).ok());
  ByteWriter many;
  many.str("x");
  many.u32(0);
  many.u32(static_cast<uint32_t>(kMaxMeshNis + 1));
  for (size_t i = 0; i <= kMaxMeshNis; ++i) {
    many.nid(*Nid::parse("198.18.0.7@tcp"));
    many.u32(0);
    many.f64(0);
    many.f64(0);
  }
  EXPECT_FALSE(decode_mesh_sync_req(many.take().span()).ok());
}

TEST(MeshProtocolTest, TheSmallProbeAsksTheProbedNisMtu) {
  Nid n = *Nid::parse("198.18.1.7@tcp1");
  auto back = decode_mesh_mtu_ask(encode_mesh_mtu_ask(n).span());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, n);
  EXPECT_EQ(decode_mesh_mtu_answer(encode_mesh_mtu_answer(9000).span()), 9000u);
  // The other MESH_PROBE forms are not asks: empty (a write), 4 bytes (a read).
  EXPECT_FALSE(decode_mesh_mtu_ask({}).has_value());
  EXPECT_FALSE(decode_mesh_mtu_ask(encode_mesh_mtu_answer(4096).span()).has_value());
  // An answer of any other length is "not known".
  EXPECT_EQ(decode_mesh_mtu_answer({}), 0u);
  EXPECT_EQ(decode_mesh_mtu_answer(encode_mesh_mtu_ask(n).span()), 0u);
}

// Rows of `names` probing each other on one network: NI i at 198.18.<net>.<i+1> with MTU
// mtus[i]; `on_link` false for every cell leaves them routed (no MTU to agree on).
std::vector<MeshRow> mtu_rows(const std::vector<uint32_t>& mtus, bool on_link = true) {
  auto nid = [](size_t i) { return *Nid::parse("198.18.1." + std::to_string(i + 1) + "@tcp"); };
  std::vector<MeshRow> rows;
  for (size_t i = 0; i < mtus.size(); ++i) {
    MeshRow r;
    r.from = "n" + std::to_string(i + 1);
    for (size_t j = 0; j < mtus.size(); ++j) {
      if (j == i) continue;
      MeshCell c = cell("n" + std::to_string(j + 1), 0.1);
      c.local = nid(i);
      c.peer = nid(j);
      c.local_mtu = mtus[i];
      c.peer_mtu = mtus[j];
      c.on_link = on_link;
      r.cells.push_back(c);
    }
    rows.push_back(r);
  }
  return rows;
}

TEST(MeshMtuTest, NamesTheNiWhoseMtuIsNotItsLinksAndNothingElse) {
  EXPECT_TRUE(mtu_outliers(mtu_rows({1500, 1500, 1500, 1500})).empty());
  auto o = mtu_outliers(mtu_rows({1500, 1500, 9000, 1500, 1500}));
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].nid.to_string(), "198.18.1.3@tcp");
  EXPECT_EQ(o[0].node, "n3");
  EXPECT_EQ(o[0].mtu, 9000u);
  EXPECT_EQ(o[0].usual, 1500u);
  EXPECT_EQ(o[0].with_usual, 4u);
  EXPECT_EQ(o[0].on_link, 5u);
  EXPECT_EQ(o[0].seen_by, (std::vector<std::string>{"n1", "n2", "n3", "n4", "n5"}));
  // Two ends that differ: neither is the link's, both are named.
  o = mtu_outliers(mtu_rows({9000, 1500}));
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0].usual, 0u);
  // Routed peers need not agree.
  EXPECT_TRUE(mtu_outliers(mtu_rows({1500, 1500, 9000}, /*on_link=*/false)).empty());
  // Two links: each judged on its own (the second all 9000).
  auto a = mtu_rows({1500, 1500, 1500}), b = mtu_rows({9000, 9000, 9000});
  for (MeshRow& r : b)
    for (MeshCell& c : r.cells) {
      c.local.net_num = 1;
      c.peer.net_num = 1;
    }
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_TRUE(mtu_outliers(a).empty());
  // A node's own figure wins over what others last saw (its MTU just changed).
  auto rows = mtu_rows({1500, 1500, 1500, 1500});
  for (MeshCell& c : rows[1].cells) c.local_mtu = 9000;
  o = mtu_outliers(rows);
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].node, "n2");
  EXPECT_EQ(o[0].mtu, 9000u);
  // Unknown MTUs (0) are left out.
  rows = mtu_rows({1500, 0, 1500});
  EXPECT_TRUE(mtu_outliers(rows).empty());
}

TEST(MeshMgsCoreTest, AssignsTargetsKeepsRowsAndBoundsItsSyncRate) {
  ManualClock clock;
  MeshMgsCore core(3, 600, seconds(15), 500);
  std::vector<NodeEvent> live;
  for (int i = 9; i >= 0; --i)  // any order: the core sorts by name
    live.push_back({uint32_t(i),
                    "n" + std::to_string(i),
                    kRoleClient,
                    NodeState::kUp,
                    {*Nid::parse("198.18.0." + std::to_string(i + 1) + "@tcp")}});
  core.set_nodes(live);
  EXPECT_EQ(core.sync_interval(), seconds(15));  // 10 nodes / 15 s: far below 500/s
  MeshSyncRep rep = core.sync(MeshSyncReq{"n4", {}}, clock.now(), 1'800'000'000'000);
  ASSERT_EQ(rep.status, PingStatus::kOk);
  EXPECT_EQ(rep.epoch, 1'800'000'000u / 600);
  EXPECT_EQ(rep.next_sync_ms, 15000u);
  std::vector<size_t> want = mesh_targets(10, 4, 3, rep.epoch);
  ASSERT_EQ(rep.targets.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rep.targets[i].name, "n" + std::to_string(want[i]));
  EXPECT_EQ(core.sync(MeshSyncReq{"stranger", {}}, clock.now(), 0).status, PingStatus::kUnknown);
  EXPECT_EQ(core.rows(clock.now()).size(), 1u);
  // 100,000 nodes at most 500 syncs/s: every 200 s, and rows live three of those.
  live.clear();
  for (int i = 0; i < 100000; ++i)
    live.push_back({uint32_t(i), "c" + std::to_string(i), kRoleClient, NodeState::kUp, {}});
  core.set_nodes(live);
  EXPECT_EQ(core.sync_interval(), seconds(200));
  clock.advance(seconds(599));
  EXPECT_EQ(core.rows(clock.now()).size(), 1u);
  clock.advance(seconds(2));
  EXPECT_EQ(core.rows(clock.now()).size(), 0u);
}

}  // namespace
}  // namespace pfsnet
