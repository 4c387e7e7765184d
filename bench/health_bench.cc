// The cost of health that sees slowness (issue 14, item 3) at scale: a SlownessBoard over
// 100,000 peer NIs -- a server's clients -- of which 1% or 10% move bytes in a given
// second, driven as HealthMonitor drives it: wants() for every path, then second() for the
// paths it picked. Prints the share of one core this takes, per second of traffic, beside
// the 1% budget the issue sets for the probe mesh. One JSON line per figure.
#include <chrono>
#include <cstdio>
#include <vector>

#include "figure.h"
#include "net/slowness_board.h"

using namespace pfsnet;
using namespace std::chrono_literals;

namespace {

// Seconds of CPU per second of traffic with `peers` peer NIs, `active_pct` % of them
// carrying small RPCs and segments each second (a different slice every second).
double core_share(int peers, int active_pct, int seconds) {
  SlownessBoard board;
  ManualClock clock;
  Nid local = *Nid::parse("198.18.0.1@tcp");
  std::vector<Nid> nids;
  std::vector<uint64_t> bytes(peers, 0), segs(peers, 0);
  for (int i = 0; i < peers; ++i) {
    Nid n = local;
    n.set_ipv4(0xC6120000u + 2 + static_cast<uint32_t>(i));  // 198.18.x.y
    nids.push_back(n);
  }
  int active = peers * active_pct / 100;
  auto one_second = [&](int s) {
    std::vector<PathFigures> figs;
    // The traffic of this second: a slice of the peers.
    for (int k = 0; k < active; ++k) {
      int i = (s * active + k) % peers;
      bytes[i] += 20000;
      segs[i] += 40;
    }
    for (int i = 0; i < peers; ++i) {
      if (!board.wants(local, nids[i], bytes[i])) continue;
      PathFigures f;
      f.local = local;
      f.peer = nids[i];
      f.rpcs = 10;
      f.latency_ms = 2.0;  // 10 RPCs of 0.2 ms
      f.exec_ms = 0.5;
      f.bytes = bytes[i];
      f.tcp = true;
      f.segs_out = segs[i];
      figs.push_back(f);
    }
    clock.advance(1s);
    board.second(figs, clock.now());
  };
  // Every peer once (a daemon's first minutes), then the measured seconds.
  for (int s = 0; s < 100 / active_pct; ++s) one_second(s);
  auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < seconds; ++s) one_second(s);
  double cpu = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return cpu / seconds;
}

}  // namespace

int main() {
  for (int pct : {1, 10}) {
    char name[96];
    std::snprintf(name, sizeof(name), "health_slowness_core_share_100k_peers_%d_pct_busy", pct);
    // Value and baseline in % of one core: the budget is 1%.
    print_figure(name, 100.0 * core_share(100000, pct, 30), 1.0, "% of a core");
  }
}
