// Tuning (the LNET WAN study; docs/architecture.md "Probing, self-test and tuning"): what the path
// to each peer needs, whether the settings give it, and an auto-tuner.
//
// The study's rule: bulk RPCs of `size` over a path of round trip RTT and bandwidth B
// fill it only with more than BDP / size in flight (BDP = B x RTT; pfsnet's writes carry
// their data with the request, one round trip each), and throughput tracks
// RPCs x size / RTT only while RPCs in flight <= peer_credits. Hence:
//   max_rpcs_in_flight = ceil(BDP / size) + 1    (the +1 covers one RPC's serialisation;
//                                                 a path that loses packets: 3 x BDP)
//   peer_credits      >= max_rpcs_in_flight      (requests and replies both need one)
//   credits           >= peer_credits x peers    (an NI's total over every peer)
// each clamped to the [tune] bounds.
//
// advise() turns measurements into recommendations with one-line reasons, and lists what
// is wrong with the current settings. TuneWatch remembers what was wrong at the last
// check and turns changes into warning events. AutoTuner adjusts max_rpcs_in_flight and
// peer_credits from one interval's throughput and latency at a time; it takes its
// inputs as numbers (no clock, no network), so tests drive it exactly.
//
// The probe (TUNE_PROBE) measures one path: the RTT of empty PINGs, and the bandwidth
// from the dispersion of a train of bulk RPCs sent back to back -- the server stamps
// each one's arrival, and (K - 1) x size over the first-to-last arrival span is the
// bottleneck rate, whatever the window.
//
// Threads: advise() and the probe functions from any thread; TuneWatch and AutoTuner
// are plain values (the caller serialises).
#pragma once

#include <pfsnet/config.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rpc/rpc_engine.h"

namespace pfsnet {

struct TuneSettings {
  int64_t max_rpcs_in_flight = 8;
  int64_t peer_credits = 8;
  int64_t credits = 64;
  int64_t conns_per_peer = 1;  // lnet.conns_per_peer
  // Peers with their own max_rpcs_in_flight (rpc.peer_rpcs_in_flight), by first NID.
  std::map<std::string, int64_t> peer_rpcs_in_flight;
  bool operator==(const TuneSettings&) const = default;
};

// What is known of the path to one peer.
struct PeerMeasure {
  std::string peer;   // the peer node (its first NID)
  double rtt_ms = 0;  // round trip of a small message; 0 = unknown
  std::string rtt_source;
  double bandwidth = 0;  // bytes/s the path carries; 0 = unknown
  std::string bandwidth_source;
  // The bandwidth is what traffic reached, not what the path can carry: while the
  // window limits the traffic it says nothing of the link.
  bool bandwidth_lower_bound = false;
  // The probe's trains were smaller than the bandwidth-delay product it found: they never
  // filled the pipe, so TCP's sender (BBR's estimate of an application-limited flow,
  // CUBIC's growing window) may have held them below the link: the rate may be low.
  bool probe_short = false;
  double rpc_bytes = 0;   // bytes per RPC (request + reply)
  double throughput = 0;  // bytes/s carried recently (0: idle)
  // RPCs to it waited for a max_rpcs_in_flight slot recently.
  bool window_limited = false;
  // The kernel's retransmitted / sent segments on the path's TCP connection (0: none, or
  // not TCP). At kLossyRetransRatio or more the path loses packets.
  double retrans_ratio = 0;
  // Segments the last probe carried to the peer, and how many TCP retransmitted among
  // them (0, 0: no probe, or not TCP).
  uint64_t probe_segments = 0, probe_retransmits = 0;
};

// A path that retransmits this share of its segments or more loses packets: its RPCs
// need kLossyHeadroom x BDP in flight. A lost segment holds the data behind it in the
// TCP stream for a round trip; RPCs beyond the BDP keep the pipe full meanwhile (at 50
// ms, 4 Gbit/s and 0.1% loss: 25 RPCs of 1 MiB moved 220 MiB/s, 64 moved 381, 128 394;
// one iperf3 stream 400).
inline constexpr double kLossyRetransRatio = 1e-5;
inline constexpr double kLossyHeadroom = 3;
// ... and its bulk spread over this many TCP connections (lnet.conns_per_peer): a lost
// segment then holds back one stream of several.
inline constexpr int64_t kLossyConnsPerPeer = 4;
// A path whose probe never filled the pipe (PeerMeasure::probe_short) gets this x BDP in
// flight: at 4 Gbit/s and 50 ms trains of 8 x 1 MiB measured 290-480 MiB/s from one probe
// to the next (BBR leaves startup early on an application-limited flow). Not more: RPCs
// beyond what the path holds wait in its bottleneck's queue, and one no deeper than the
// BDP overflows. On the delay line (4 Gbit/s, 50 ms, a queue of 25 MB), 8 s per step, one
// connection: 24 RPCs of 1 MiB in flight moved 0.93 of one iperf3 stream, 32 0.99, 40
// 0.98 -- with no drop -- and 48 0.81 with 17,078 queue drops; 2 x BDP (50 RPCs) moved
// 1.02 in one run and 0.83 in the next. A rate read 0.63 of the link (299 MiB/s) asks
// for the BDP itself then (25 RPCs: 0.93); the link's own (478), 40 RPCs.
inline constexpr double kShortProbeHeadroom = 1.6;

struct PeerAdvice {
  PeerMeasure m;
  int64_t rpcs_now = 0;     // its max_rpcs_in_flight now (its own, or the node's)
  double bdp_bytes = 0;     // 0: RTT or bandwidth unknown
  int64_t rpcs_needed = 0;  // 0: unknown
  double ceiling = 0;       // bytes/s the current max_rpcs_in_flight allows; 0: unknown
  // m.retrans_ratio >= kLossyRetransRatio, whatever else is known: the node's bulk goes
  // over kLossyConnsPerPeer connections, and with a BDP rpcs_needed has headroom.
  bool lossy = false;
  double headroom = 1;  // rpcs_needed covers this x BDP (lossy, PeerMeasure::probe_short)
};

struct TuneProblem {
  // rpcs_below_bdp, window_limited, peer_credits_below_rpcs, credits_below_peers, and
  // (window.h) tcp_window, host_tcp_buffers, host_tcp_cc
  std::string code;
  std::string peer;  // empty: the whole node
  std::string text;
};

struct Advice {
  std::vector<PeerAdvice> peers;
  size_t active_peers = 0;
  TuneSettings current, recommended;
  std::string why_rpcs, why_peer_credits, why_credits, why_conns;  // one line each
  std::map<std::string, std::string> why_peer_rpcs;  // peer -> why its own value (or none)
  std::vector<TuneProblem> problems;                 // empty: the settings fit
};

// `active_peers`: peers this node talks to (for credits). The study's rule, clamped to
// `bounds`, per peer: the node's max_rpcs_in_flight is what the median measured peer
// needs, and a peer that needs more gets its own (a WAN peer beside LAN peers; with one
// peer, or peers alike, no peer needs its own). A peer's own value that it no longer needs
// is dropped; one of a peer not measured is kept.
Advice advise(std::vector<PeerMeasure> peers, const TuneSettings& current, const TuneConfig& bounds,
              size_t active_peers);

// BDP / size, rounded up, plus one.
int64_t rpcs_for(double bdp_bytes, double rpc_bytes);
// What `rpcs` in flight carry over the path: rpcs x size / (rtt + size / bandwidth),
// at most the bandwidth.
double window_ceiling(int64_t rpcs, double rpc_bytes, double rtt_s, double bandwidth);

// Remembers the problems of the last check and the measurements at the last check that
// found none, and reports changes.
class TuneWatch {
 public:
  struct Event {
    bool warning = false;  // true: a new problem; false: one cleared
    TuneProblem problem;
    std::string text;  // the log line
  };
  std::vector<Event> update(const Advice& a);
  const std::vector<TuneProblem>& active() const { return active_; }
  uint64_t warnings() const { return warnings_; }

 private:
  std::vector<TuneProblem> active_;
  // At the last check that found nothing wrong.
  std::map<std::string, std::pair<double, double>> fit_;  // peer -> {rtt ms, bandwidth}
  size_t fit_peers_ = 0;
  bool have_fit_ = false;
  uint64_t warnings_ = 0;
};

// One interval of this node's traffic, as AutoTuner sees it.
struct TuneInterval {
  double seconds = 0;
  uint64_t rpcs = 0;          // RPCs completed (this node the client)
  double round_trip_ms = 0;   // their mean round trip
  uint64_t bytes = 0;         // their request and reply bytes
  uint64_t slot_waits = 0;    // RPCs that queued for a max_rpcs_in_flight slot
  uint64_t credit_waits = 0;  // sends that queued for peer or NI credits
  size_t peers = 1;           // peers talked to
};

struct TuneChange {
  TuneSettings to;
  std::string why;
};

// Auto-tune's floor for a path the last check (`last`) found losing packets: the advice's
// kLossyHeadroom x BDP in flight for `peer`, at most `most`; a lost segment holds its
// stream a round trip, and RPCs beyond the BDP keep the pipe full meanwhile. The tuner's
// own steps stop short of it (the round trip a retransmission stretches looks like a
// queue), so a peer whose `limit` is below it is raised to it. nullopt: not lossy, its
// BDP unknown, or `limit` already covers it.
std::optional<TuneChange> lossy_floor(const Advice& last, const std::string& peer, int64_t limit,
                                      int64_t most);

// A path's loss as TCP's retransmits show it, over the seconds in which no queue stood on
// it. A load beyond what the pipe holds stands in a queue (a router's, the delay line's)
// and overflows it: those retransmits are congestion -- this node's own, as often as not
// -- and counted as loss they made a clean path lossy (auto-tune on the delay line at
// 1 Gbit/s, 50 ms: 16 RPCs of 1 MiB overflowed its 6 MiB queue, TCP retransmitted 4.9% of
// its segments, and the clean path got four connections and 3.5 x its BDP in flight --
// 33,406 queue drops in 20 s). A second counts when neither it nor the one before saw a
// queue (a drop's retransmit comes a round trip or more after it, when the queue may have
// drained). The first reading, and one after the totals went down (a connection closed),
// is a baseline.
class LossCounter {
 public:
  // One second: the kernel's totals over the path's connections now, and whether a queue
  // stood on the path during it.
  void add(uint64_t retrans, uint64_t segs, bool queued);
  uint64_t retrans() const { return retrans_; }  // over the seconds that counted
  uint64_t segs() const { return segs_; }
  double ratio() const { return segs_ ? double(retrans_) / double(segs_) : 0; }

 private:
  bool seen_ = false;
  bool queued_last_ = false;
  uint64_t last_retrans_ = 0, last_segs_ = 0;
  uint64_t retrans_ = 0, segs_ = 0;
};

// Grows RPCs in flight while throughput grows and RPCs are waiting for slots; backs off
// when latency climbs without throughput for two intervals in a row (RPCs queue in the
// network: Little's law gives how many, rps x (round trip - base round trip)); raises peer_credits
// when sends wait for credits (a server's replies) and keeps it >= max_rpcs_in_flight. After a
// change of max_rpcs_in_flight the next intervals are skipped, so the peer has raised its credits
// to match before the next judgement (two are skipped). Growth doubles until the pipe first
// overflows, then adds a quarter (for 60 intervals); after a back-off it waits 5 intervals.
class AutoTuner {
 public:
  explicit AutoTuner(TuneConfig bounds) : bounds_(bounds) {}
  void set_bounds(const TuneConfig& b) { bounds_ = b; }
  std::optional<TuneChange> step(const TuneInterval& iv, const TuneSettings& cur);
  double base_round_trip_ms() const;

 private:
  TuneSettings clamp(TuneSettings s, size_t peers) const;

  TuneConfig bounds_;
  std::deque<double> recent_rtt_;  // mean round trips of the last evaluated intervals
  int skip_ = 0;                   // intervals still to skip after a change
  int hold_ = 0;                   // intervals left without growth after a back-off
  int64_t ceiling_ = 0;            // max_rpcs_in_flight that last overflowed the pipe
  int since_overflow_ = 0;         // intervals since then
  int overflows_ = 0;              // consecutive intervals that saw RPCs queue in the network
  double last_tput_ = 0;           // throughput before the last growth
  double last_rps_ = 0;            // and RPCs/s
  int64_t grown_from_ = 0;         // max_rpcs_in_flight before the last growth; 0: none
};

// Serves TUNE_PROBE: replies with the time the request was completely received.
void serve_tune_probe(RpcEngine& engine, Clock& clock);

struct ProbeResult {
  double rtt_ms = 0;     // fastest of the empty PINGs
  double bandwidth = 0;  // bytes/s (estimate_bandwidth)
  int train = 0;         // RPCs per train
  uint32_t size = 0;
  int trains = 0;  // trains sent
  int clean = 0;   // of them not held back by the TCP window, and none lost a packet
  int lost = 0;    // of them during which TCP retransmitted a segment to the peer
  int paced = 0;   // of them spaced by the sender's pacing (paced())
  int bounds = 0;  // of them read as a lower bound of the link (ProbeEstimate::bounds)
  // Segments TCP sent to the peer while the probe ran (its loss check's included), and
  // how many of them were retransmits: 0, 0 when the kernel's figures are not known.
  uint64_t segments = 0, retransmits = 0;
  int loss_trains = 0;  // trains of the loss check (check_loss), not in the rate
  // A train is smaller than the BDP found: the trains never filled the pipe.
  bool train_short_of_bdp() const {
    return bandwidth * rtt_ms / 1000.0 > double(train) * double(size);
  }
  // No train went through in one go: each waited a round trip for TCP's window (its
  // congestion window or the peer's receive window was smaller than the train), so
  // `bandwidth` is what the window let through -- a lower bound of the link's rate.
  bool window_limited = false;
  // Every train lost a packet: `bandwidth` is the median of them, a rough figure.
  bool every_train_lost = false;
};

// One train's arrival stamps (ns, any order): the bottleneck rate (K - 1) x size over the
// first-to-last span, and whether the train was held back by the window instead of paced
// by the bottleneck -- a gap between two arrivals longer than half the round trip and
// three times the median gap (a burst, a wait for acknowledgements, the next burst).
// Set by probe_peer from the kernel's figures of the paths to the peer:
// - `lost`: TCP retransmitted a segment while the train ran. A segment lost mid-train
//   stalls the rest a round trip (the rate reads low: a lower bound of the link's); one
//   lost ahead of the first arrival releases the train at once from the receive queue (the
//   rate reads high, above the pacing).
// - `pacing`: the rate (bytes/s) the sender's congestion control paced the connections at,
//   the higher of before and after the train; 0: unknown. BBR paces every send, so no
//   train arrives faster than its pacing (a faster reading is a burst released at once),
//   and a train that reads within 10% of it was spaced by the pacing, not the link: the
//   link carries at least that (paced()). BBR's estimate, which sets the pacing, is the
//   data delivered per round trip, and a probe delivers one train per round trip: in
//   start-up BBR paces at 2.89 times that (8 MiB / 50 ms x 2.89: 462 MiB/s), after it at
//   about the train's own volume per round trip (160 MiB/s) whatever the link -- seen on
//   the delay line at 0.1% loss, where trains that lost nothing read 154 MiB/s on a
//   455 MiB/s path at a pacing rate of 154.
struct TrainRate {
  double rate = 0;  // bytes/s; 0: every RPC arrived at once
  bool window_limited = false;
  bool lost = false;
  double pacing = 0;
};
bool paced(const TrainRate& t);
TrainRate train_rate(std::vector<uint64_t> stamps, uint32_t size, double rtt_ms);

// Whether a probe may stop: its last three trains that lost nothing went through clean at
// rates within 10% of each other (TCP's windows have stopped growing).
bool trains_settled(const std::vector<TrainRate>& trains);

// The path's rate from a probe's trains, in order: the median of the clean trains of the
// later half (the first run while TCP's windows grow -- slow start, receive autotuning --
// and come in low; a burst released by a loss's retransmission comes in high, once), else
// of every clean one (not held, not lost, not paced); and at least the best lower bound
// of the link: a paced train, or one that lost a packet and read no faster than its
// pacing. No such train: the best held one, a lower bound (window_limited); every train
// lost (pacing unknown): the median of them, a rough figure (every_train_lost).
struct ProbeEstimate {
  double bandwidth = 0;  // bytes/s; 0: no train had a rate
  int clean = 0;
  int lost = 0;
  int paced = 0;
  int bounds = 0;  // trains that gave a lower bound (paced, or lost under their pacing)
  bool window_limited = false;
  bool every_train_lost = false;
};
ProbeEstimate estimate_bandwidth(const std::vector<TrainRate>& trains);

// Probes `peer`: three empty PINGs, then trains of `train` RPCs of `size` bytes each,
// back to back, until trains_settled or `max_trains` of them -- up to three times as many
// while fewer than three lost nothing; the bandwidth is estimate_bandwidth's.
// `tcp` (may be empty) reads the kernel's figures of the paths to the peer, before and
// after each train (TrainRate's lost and paced).
// `train` must fit in max_rpcs_in_flight and peer_credits (or the train waits for credits
// and understates the rate). Bounded by `timeout` per RPC.
// On a long path (a train smaller than the BDP) whose trains lost nothing, the loss
// check follows (check_loss).
struct ProbeTcp {
  uint64_t retransmits = 0;  // segments TCP retransmitted to the peer so far
  uint64_t segments = 0;     // segments TCP sent to the peer so far, retransmits included
  double pacing_rate = 0;    // bytes/s the open connections are paced at now; 0: unknown
};
Result<ProbeResult> probe_peer(RpcEngine& rpc, Clock& clock, const Nid& peer, uint32_t size,
                               int train, int max_trains, Duration timeout,
                               const std::function<ProbeTcp()>& tcp = {});

// After a probe, on a path with bulk connections (lnet.conns_per_peer > 1): the probe's
// trains share the first connection, so the bulk connections (open since the path was)
// had carried nothing, and the work after `pfsnet tune --probe` began on them cold, in
// TCP's slow start (1 Gbit/s, 50 ms, four connections: 79-81 MiB/s in its first second,
// where a warm stream moves 112). `waves` batches of `wave` RPCs of `size` bytes, one
// after the other, spread over the bulk connections as work is and not measured, bring
// each one's window up to its share of the path. A wave of the probe's train per
// connection keeps what is in flight near the pipe (a batch of 4 x max_rpcs_in_flight would
// put 3 x the BDP in flight on a lossy path). Bounded by `timeout` per RPC.
Status warm_streams(RpcEngine& rpc, const Nid& peer, uint32_t size, int wave, int waves,
                    Duration timeout);

// The loss check: a loss of 1 segment in 10,000 (the study's 0.01%) costs a long path most
// of its throughput with the advice of a clean one, and a probe's ~80 MiB of trains is only
// ~9,400 segments of a 9000-byte MTU: it sees no loss at all about 4 times in 10. So a
// long path whose trains lost nothing carries more trains, not counted in the rate, until
// the probe has sent kLossCheckSegments segments (a loss of 1 in 10,000 then shows with
// 95% confidence: e^-3), TCP retransmits one, or kLossCheckTime has passed (a slow path
// says how far it got). `run_train` sends one train; `start` is the kernel's figures
// when the probe began. Bounded by kLossCheckTrains trains.
inline constexpr uint64_t kLossCheckSegments = 30000;
inline constexpr Duration kLossCheckTime = std::chrono::seconds(3);
inline constexpr int kLossCheckTrains = 1000;
struct LossCheck {
  int trains = 0;
  uint64_t segments = 0, retransmits = 0;  // since `start`
  bool cut_short = false;                  // time or trains ran out before kLossCheckSegments
};
Result<LossCheck> check_loss(const std::function<Status()>& run_train,
                             const std::function<ProbeTcp()>& tcp, Clock& clock, ProbeTcp start);

}  // namespace pfsnet
