// A snapshot of one local NI or peer NI: state, health, credits and counters, as
// `pfsnet nis` and `pfsnet peers` show them.
// Thread safety: a plain value.
#pragma once

#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pfsnet {

// The health value of an NI at full health (LNet's).
inline constexpr int kMaxHealth = 1000;

// The kernel's own figures of one TCP connection (getsockopt TCP_INFO): what TCP hides
// from the application -- retransmissions, losses, its smoothed RTT, its congestion window.
// Counters are since the connection opened.
struct TcpKernelInfo {
  uint32_t rtt_us = 0, rttvar_us = 0, min_rtt_us = 0;  // smoothed RTT, its variance, lowest
  uint32_t snd_cwnd = 0;                               // congestion window, segments
  uint32_t snd_mss = 0, pmtu = 0;                      // bytes
  uint32_t lost = 0, unacked = 0, retransmitting = 0;  // segments now
  uint64_t total_retrans = 0;                          // segments retransmitted
  // Of them, those the peer said it had already (D-SACK: a tail-loss probe or a timeout
  // that fired while the ACK was only late) -- retransmitted, never lost.
  uint64_t dsack_dups = 0;
  uint64_t segs_out = 0;  // segments sent, retransmits included
  uint64_t bytes_sent = 0, bytes_retrans = 0;
  uint64_t delivery_rate = 0;  // bytes/s, the kernel's latest estimate
  uint64_t pacing_rate = 0;    // bytes/s, what the congestion control paces sends at
  uint64_t busy_us = 0, rwnd_limited_us = 0, sndbuf_limited_us = 0;
  // The window: what the peer last advertised it can receive (bytes), and this socket's
  // buffers in force (SO_SNDBUF, SO_RCVBUF: the kernel's doubled figures, autotuned
  // unless lnet.tx_buffer_size / rx_buffer_size set them; 0 where the reader did not ask
  // for them: the once-a-second sampling does not).
  uint32_t snd_wnd = 0;
  uint32_t sndbuf = 0, rcvbuf = 0;
  // Bytes written by the application that TCP has not sent yet (held by the peer's window
  // or the congestion window).
  uint32_t notsent_bytes = 0;
  // Milliseconds since the connection last sent data: its smoothed RTT is as old as that.
  uint32_t last_data_sent_ms = 0;
};

// A path's TCP counters summed over every connection it has had, the closed ones
// included (read as each closed): totals that survive reconnects.
struct TcpTotals {
  uint64_t segs_out = 0, retrans = 0, bytes_sent = 0, bytes_retrans = 0;
  uint64_t spurious = 0;  // retransmits the peer had already (dsack_dups)
  // What the open connections' congestion control paces sends at now, summed (bytes/s);
  // not a total over time: add() leaves it alone, the reader sets it.
  uint64_t pacing_rate = 0;
  void add(const TcpKernelInfo& k) {
    segs_out += k.segs_out;
    retrans += k.total_retrans;
    spurious += k.dsack_dups;
    bytes_sent += k.bytes_sent;
    bytes_retrans += k.bytes_retrans;
  }
  void add(const TcpTotals& t) {
    segs_out += t.segs_out;
    retrans += t.retrans;
    spurious += t.spurious;
    bytes_sent += t.bytes_sent;
    bytes_retrans += t.bytes_retrans;
  }
};

// What one path (a local NI to a peer NI) carried: frames whose send completed, and
// frames received. Peer NIs list theirs (`peers -v`), with the kernel's figures of the
// path's connection that sent the most (TCP paths, while connected).
struct PathInfo {
  Nid local;
  uint64_t send_count = 0, send_bytes = 0, recv_count = 0, recv_bytes = 0;
  int connections = 0;
  // Reconnect backoff: the wait after its last failed connect (0: none), and seconds until
  // the next connect may start (-1: none pending).
  int64_t reconnect_interval_ms = 0;
  double next_connect_s = -1;
  std::optional<TcpKernelInfo> tcp;
  std::optional<TcpTotals> tcp_total;  // over all its connections (TCP paths)
  // What its open connection speaks (its handshake's); 0 while none is open.
  uint16_t wire_version = 0;
  uint64_t features = 0;  // the features both ends announced (wire/frame.h kFeature*)
};

// A snapshot of one NI or peer NI, for the admin surface and tests.
struct NiInfo {
  Nid nid;
  bool up = false;  // local NI: its link is up; peer NI: a connection is open
  int health = kMaxHealth;
  int64_t credits = 0, credits_max = 0, credits_min = 0;  // now, configured, low-water mark
  int64_t queued = 0;                                     // sends waiting
  uint64_t send_count = 0, send_bytes = 0, recv_count = 0, recv_bytes = 0;
  uint64_t local_timeouts = 0, remote_timeouts = 0, drops = 0, resends = 0, faults = 0;
  uint64_t credit_waits = 0;
  // Connects started and failed; sends that queued while a reconnect was backing off.
  uint64_t connects = 0, connect_failures = 0, reconnect_waits = 0;
  std::array<uint64_t, kNumHealthKinds> errors{};
  int connections = 0;
  std::vector<Nid> peer_nids;   // peers: every NID the peer announced
  std::vector<PathInfo> paths;  // peers: each local NI's path to it
  Nid peer;                     // peers: the peer node (its first announced NID)
  // Peers, from an open connection's handshake: the wire version it speaks, the features
  // both ends use, the peer's own versions and release ("" from a version-1 peer, which
  // says none); wire_version 0 while no connection is open.
  uint16_t wire_version = 0;
  uint64_t features = 0;
  uint16_t peer_wire_min = 0, peer_wire_max = 0;
  std::string release;
  // Which of this node's cluster keys the peer proved with: "current", or during a key
  // rotation "next" (the peer committed before this node) or "previous" (after it).
  std::string cluster_key;
  // Time of the last state change (up/down, healthy/unhealthy): wall clock (ms since the
  // epoch) and seconds before the snapshot on the Net's clock.
  int64_t last_change_unix_ms = 0;
  double since_change_s = 0;
  int recovery_pings = 0;       // recovery pings sent since the last success
  double next_recovery_s = -1;  // seconds until the next recovery ping; -1 = none
  // Slowness (health that sees more than errors): "" while not degraded, else the cause
  // ("SLOW", "LOSSY", "SERVER"); selection takes `degraded_penalty` off `health`. The
  // figures that made the call, and when (wall clock, ms since the epoch).
  std::string degraded;
  int degraded_penalty = 0;
  std::string degraded_evidence;
  int64_t degraded_since_unix_ms = 0;
};

}  // namespace pfsnet
