// Slowness: health that sees more than errors. LNet health moves only on failures; a link
// that is slow or drops a few per cent of its packets (TCP retransmits them silently)
// stays at 1000. SlownessTracker watches one subject -- a peer NI, a local NI, a server --
// from one sample per second and calls it degraded, with a cause and the figures behind
// the call, when it stays well above its own baseline or its peers':
//
//   window    the last `window` samples (10 s) that carried traffic; at least
//             `min_samples` (3) of them are needed to judge at all.
//   latency   the window's median of the per-second latency (the network part: round
//             trip minus the server's execution time), against
//   baseline  the lowest window median of the last `baseline_minutes` (15) minutes
//             (a windowed minimum, frozen while degraded so slowness never becomes the
//             norm while it lasts), and against the median of its peers' (the caller's).
//   SLOW      latency > factor (3) x baseline or x the peers' median, and above it by at
//             least min_excess (1 ms: microsecond noise on a fast link is not slowness).
//   LOSSY     TCP retransmitted more than loss_ratio (1%) of the segments it sent over
//             the window, with at least min_segments (200) sent. Before SLOW: the cause.
//             Only random loss counts: a retransmit in a second when the kernel saw a
//             queue standing on the path (smoothed RTT above its minimum by 2 ms and a
//             quarter of the minimum, the caller's `queueing`) is congestion loss -- a
//             shaper's or a switch's full queue, the path at its ceiling -- which is
//             SLOW or THROTTLED where its latency says so, never LOSSY. Measured on a veth
//             pair: a 20 Mbit/s tbf kept 2-11 ms (BBR) or ~50 ms (CUBIC) of queue above a
//             6 us minimum; 5% random drops 0.15-0.4 ms.
//   SERVER    the server's execution time (queue wait included) > factor x its own
//             baseline and above it by min_excess while latency is normal: the server,
//             not the network, is slow. Or latency SLOW while the kernel's round trip on
//             the same paths is not: the window's median queue in TCP's smoothed RTT (the
//             caller's `rtt_excess_ms`, over at least min_samples seconds) is under a
//             tenth of what the latency stands above its reference. A queue on the wire
//             delays TCP's ACKs as much as the RPCs; a server process that reads late
//             (stopped, descheduled) does not -- its kernel ACKs at once. Measured in
//             the drill (tests/netns_drill_test.cc): a server SIGSTOPped 800 ms of each
//             second made RPCs to it wait 107-613 ms (median) while TCP's RTT stood
//             1.6-4.4 ms above its lowest (24-213 times less); on a host overloaded by
//             eight daemons and bulk, a busy server's RPCs waited 138 ms over a 10 ms
//             baseline with 26 ms of queue in TCP's RTT (4.9 times less) -- a quarter
//             called that SERVER, unexplained by the saturated links it was on.
//   damping   degraded after `trip` (3) judgements in a row say so, healthy again after
//             `clear` (10) in a row say not; a judgement needs the bad figure to fall
//             below 2/3 of its threshold to count as good (hysteresis), so a figure that
//             hovers at the threshold does not flap, and it needs the evidence of the
//             cause (>= min_samples for SLOW and SERVER; for LOSSY, min_segments sent
//             since the last bad judgement -- gathered across seconds, so a path that
//             carries only probes once degraded still ends: 200 clean segments at 5 a
//             second take 40 s, then the 10 good judgements).
//   busy      a second in which the subject moved much bulk (the caller's `busy`) says
//             little of its latency: small RPCs wait behind the bulk in their stream. It
//             never counts toward slowness, but while degraded it counts toward health
//             when its latency is already below the clearing threshold (bulk inflates
//             latency, it never hides slowness), so a path healed under the same load
//             that hid its latency before still ends.
//
// A subject without traffic keeps its state (nothing to judge by): whoever avoids a degraded
// path must still probe it, or it never recovers. Every change says how long the state
// before it lasted.
//
// Pure logic on the samples and times the caller passes. Memory: the window and one
// entry per baseline minute (about 1 KiB). Threads: none; the owner serialises calls.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/ni_info.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace pfsnet {

struct SlownessOptions {
  double factor = 3.0;
  Duration min_excess = std::chrono::milliseconds(1);
  double loss_ratio = 0.01;
  uint64_t min_segments = 200;
  int window = 10;
  int min_samples = 3;
  int trip = 3;
  int clear = 10;
  int baseline_minutes = 15;
};

enum class SlowCause { kNone = 0, kSlow, kLossy, kServer };
const char* slow_cause_name(SlowCause c);  // "NONE", "SLOW", "LOSSY", "SERVER"

// The lower median of `v` (0 when empty; `v` is reordered): a window is slow only when most
// of it is.
double lower_median(std::vector<double>& v);

// One second of a subject. Latency and execution are that second's averages over
// `count` RPCs or probes (count 0: no traffic, no judgement from latency); the TCP
// counters are the kernel's, cumulative (a drop means a new connection: counted afresh).
struct SlownessSample {
  uint64_t count = 0;
  double latency_ms = 0;
  double exec_ms = 0;
  uint64_t segs_out = 0, retrans = 0;
  // Retransmits known to be congestion whatever the second's `queueing` (cumulative, not
  // in `retrans`): those of a connection whose own RTT showed a queue.
  uint64_t congestion_retrans = 0;
  bool busy = false;      // much bulk moved this second: the latency may only speak for health
  bool queueing = false;  // the kernel saw a queue standing on the path this second
  // The kernel's smoothed RTT above its lowest on the subject's paths this second, the
  // largest of them (ms); < 0: no TCP figures.
  double rtt_excess_ms = -1;
};

// One TCP connection of a path at a sample: who it is (stable while it lives), the
// segments it retransmitted that its peer did not have already (total less D-SACKed), and
// its RTT now -- so that a retransmit is judged by the queue on its own connection.
struct ConnFigures {
  uintptr_t id = 0;
  uint64_t lost = 0;
  double srtt_ms = 0, min_rtt_ms = 0;
};

// Whether a smoothed RTT of `srtt_ms` over a minimum of `min_rtt_ms` is a queue standing on
// the path: above it by 2 ms and by a quarter of it -- and, when `host_excess_ms` (the
// median excess of the node's other paths this second) is known, by 3 times that: a host
// whose cores the load takes answers every path's ACKs ms late, which is no queue on one
// path (seen: eight daemons on two cores put 2-5 ms on every path, and a path dropping 5%
// at random then read as congested).
bool queue_stands(double srtt_ms, double min_rtt_ms, double host_excess_ms = -1);

// The tuning's judgement of a queue (tune's LossCounter): a connection with data in flight
// (an idle one's smoothed RTT is old) whose smoothed RTT stands above its minimum by a
// tenth and 1 ms. Tighter than queue_stands, and per connection: it decides which
// retransmits tuning may take for the path's loss, where a missed queue makes a clean path
// lossy (at 1 Gbit/s, 50 ms the queue that overflowed read 60.9 ms over 50.1 in the second
// its first drops were retransmitted); health keeps queue_stands, whose verdicts name
// problems to an operator.
bool queue_on_path(const TcpKernelInfo& k);

// The figures behind a judgement.
struct SlownessEvidence {
  double latency_ms = 0, baseline_ms = 0, peers_ms = 0;  // window median; references
  double exec_ms = 0, exec_baseline_ms = 0;
  uint64_t segs = 0, retrans = 0;   // over the window (retrans: random loss only)
  uint64_t congestion_retrans = 0;  // retransmitted while a queue stood: not counted
  double loss = 0;                  // retrans / segs
  int samples = 0;                  // latency samples in the window
  bool latency_judged = false;      // enough of them: latency_ms and the references hold
  int tcp_seconds = 0;              // seconds of TCP counters behind segs and retrans
  double wire_ms = 0;               // the window's median of rtt_excess_ms
  bool wire_judged = false;         // over at least min_samples seconds that had it
  // "latency 4.200 ms (baseline 0.300 ms, x14.0), ..., over 10 s"; the latency part only
  // when it was judged (a path with TCP counters and too few small RPCs has none).
  std::string text() const;
};

class SlownessTracker {
 public:
  explicit SlownessTracker(SlownessOptions o = {}) : opts_(o) {}

  struct Change {
    bool degraded = false;
    SlowCause cause = SlowCause::kNone;  // on degrading: why; on recovery: what it was
    SlownessEvidence evidence;
    Duration lasted{0};  // how long the state before this change lasted
  };
  // One sample at `now` (once a second). `peers_ms`: the median window latency of the
  // subject's peers (0: unknown, or too few to compare). Returns the change, if any.
  std::optional<Change> add(const SlownessSample& s, TimePoint now, double peers_ms = 0);

  bool degraded() const { return degraded_; }
  SlowCause cause() const { return cause_; }
  TimePoint since() const { return since_; }  // of the current state
  // The last judgement's figures (also while healthy).
  const SlownessEvidence& evidence() const { return evidence_; }
  // The window's median latency now (0 without enough samples): what the caller's peer
  // comparison takes.
  double window_latency_ms() const { return evidence_.samples ? evidence_.latency_ms : 0; }

 private:
  struct Second {
    double latency_ms, exec_ms, rtt_excess_ms;
  };
  // Per-minute lowest window medians (latency, execution), for the baselines.
  struct Minute {
    int64_t index;
    double latency_ms, exec_ms;
  };
  SlowCause judge(double scale) const;
  // The figure above which `v` against reference `ref` is bad: factor x ref and ref +
  // min_excess, both scaled (1: to degrade; 2/3: to count as good while degraded).
  double limit(double ref, double scale) const;
  double baseline(double Minute::*field) const;

  SlownessOptions opts_;
  std::deque<Second> window_;  // seconds with traffic, newest last
  struct TcpDelta {
    uint64_t segs, retrans, congestion;
    bool queueing;
  };
  std::deque<TcpDelta> tcp_;  // per-sample deltas
  uint64_t last_segs_ = 0, last_retrans_ = 0, last_congestion_ = 0;
  bool have_tcp_ = false;
  bool queued_last_ = false;  // the last sample saw a queue standing
  std::deque<Minute> minutes_;
  TimePoint start_{};
  bool started_ = false;
  bool degraded_ = false;
  SlowCause cause_ = SlowCause::kNone;
  int streak_ = 0;  // judgements in a row against the current state
  // LOSSY's clearing evidence: segments sent and retransmitted since the last bad judgement.
  uint64_t clean_segs_ = 0, clean_retrans_ = 0;
  TimePoint since_{};
  SlownessEvidence evidence_;
};

}  // namespace pfsnet
