// Netverify (issue 14 item 4; like Storage Scale's mmnetverify): checks every path from this
// node to others -- each local NI to each NID of the peer on the same network -- and says
// pass or fail per check with the reason. This header is the pure part: the messages and
// their codecs, the MTU ladder, the clock-offset estimate, and judge_path(), which turns one
// path's measurements into the checks. netverify_service.h does the I/O.
//
// The checks of a path (in order; a later one is skipped when what it needs failed):
//   port       the peer's port on that NID accepts a TCP connection from this NI
//   handshake  a pinned PING over pfsnet (HELLO with the cluster key) is answered
//   mtu        the largest UDP datagram with DF that crosses, each direction, against the
//              MTU of the interfaces at both ends: a mismatch of the ends' MTUs is named as
//              such; a path below both ends' MTU names the hop
//   routing    the peer sees this NI's packets come from this NI's address and arrive on the
//              interface of its NID, its kernel sends from that NID back to this NI out of
//              the NID's interface, and
//              its datagrams arrive here on this NI's interface from its NID: else the
//              route is asymmetric, and the check says where the packets go
//   rtt        the round trip of an empty pinned PING (best of a few); fails above max_rtt
//   bandwidth  a train of pinned bulk writes (the peer stamps arrivals) and of reads (this
//              node stamps them): each direction's bottleneck rate from the dispersion;
//              fails below min_bandwidth, or when one direction carries less than a third of
//              the other
//   clock      the peer's wall clock against this node's (NTP's estimate from the best
//              round trip; the error is half of it); fails above max_clock_offset
//   settings   peer_credits alike at both ends, and max_rpcs_in_flight and peer_credits
//              at least the RPCs of maxBlockSize the path's bandwidth x RTT needs
//   tcp        each direction's TCP buffers: the sending end's send buffer and the
//              receiving end's receive buffer can grow to twice that direction's bandwidth
//              x RTT (net.ipv4.tcp_wmem / tcp_rmem maxima, or lnet.tx_buffer_size /
//              rx_buffer_size when set: a fixed size is doubled by the kernel)
//
// Datagrams (UDP on the NI's address and port, the same number as TCP): a probe (kind 1)
// is padded to the size it tests and answered with a small ack (kind 2) naming where it
// arrived; the peer sends reverse probes (kind 3) only when asked over an authenticated RPC
// and only to the address that asked. An ack is smaller than its probe, so the responder
// cannot be used to amplify.
//
// Thread safety: pure functions and plain values.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pfsnet {

inline constexpr uint32_t kNvMagic = 0x564e4650;  // "PFNV"
inline constexpr uint32_t kNvIpUdpHeader = 28;    // IPv4 (20) + UDP (8): packet = payload + 28
inline constexpr uint32_t kNvIp6UdpHeader = 48;   // IPv6 (40) + UDP (8)
// The IP and UDP headers of a datagram between NIs of `nid`'s family.
inline uint32_t nv_ip_udp_header(const Nid& nid) {
  return nid.is_large() ? kNvIp6UdpHeader : kNvIpUdpHeader;
}
inline constexpr uint32_t kNvMinPacket = 576;    // every IPv4 path carries this
inline constexpr uint32_t kNvMaxPacket = 65535;  // the largest IPv4 packet
inline constexpr size_t kNvMaxSizes = 32;        // sizes in one ladder or request

// One NI of the answering node.
struct NvNi {
  Nid nid;
  std::string ifname;  // "" when not found
  uint32_t mtu = 0;    // 0 when not found
  bool operator==(const NvNi&) const = default;
};

// A node's TCP buffer settings (the WAN study's listing): the host's maxima and pfsnet's
// fixed sizes (0: autotuning; tune/window.h reads the host's).
struct NvTcp {
  int64_t tcp_rmem_max = 0, tcp_wmem_max = 0;      // 0: unknown
  int64_t tx_buffer_size = 0, rx_buffer_size = 0;  // lnet.*_buffer_size
  std::string congestion_control;
  // The receive backlog (the study's netdev_max_backlog) and the packets the host's
  // backlog queues have dropped so far (/proc/net/softnet_stat); a peer of an earlier
  // version sends neither (0).
  int64_t netdev_max_backlog = 0;
  uint64_t backlog_drops = 0;
  bool operator==(const NvTcp&) const = default;
};

// NETVERIFY_INFO's reply: what the peer knows of itself and of the asker.
struct NvInfo {
  std::string name;
  int64_t wall_unix_ns = 0;  // its wall clock when it answered
  int64_t peer_credits = 0, credits = 0, max_rpcs_in_flight = 0, max_bulk = 0;
  std::vector<NvNi> nis;
  // Where its kernel sends packets from the asked-for NID to the asker (`ip route get`):
  // the interface, and the gateway ("" when direct).
  std::string route_if, route_gateway;
  NvTcp tcp;
  bool operator==(const NvInfo&) const = default;
};
Buffer encode_nv_info(const NvInfo& v);
Result<NvInfo> decode_nv_info(std::span<const uint8_t> b);

// NETVERIFY_MTU_SEND: send reverse probes of `sizes` (IP packet bytes) from the NI `from`
// to the asker's address at `port`, tagged `token`.
struct NvMtuSendReq {
  Nid from;
  uint16_t port = 0;
  uint64_t token = 0;
  std::vector<uint32_t> sizes;
  bool operator==(const NvMtuSendReq&) const = default;
};
// Sizes it sent, and those over its interface's MTU (not sent: the kernel refuses them).
struct NvMtuSendRep {
  std::vector<uint32_t> sent, too_big;
  bool operator==(const NvMtuSendRep&) const = default;
};
Buffer encode_nv_mtu_send_req(const NvMtuSendReq& v);
Result<NvMtuSendReq> decode_nv_mtu_send_req(std::span<const uint8_t> b);
Buffer encode_nv_mtu_send_rep(const NvMtuSendRep& v);
Result<NvMtuSendRep> decode_nv_mtu_send_rep(std::span<const uint8_t> b);

// A datagram: probe (1), ack (2) or reverse probe (3).
enum class NvKind : uint8_t { kProbe = 1, kAck = 2, kReverse = 3 };
struct NvDatagram {
  NvKind kind = NvKind::kProbe;
  uint64_t token = 0;
  uint32_t size = 0;  // probe: the IP packet size it was sent as; ack: the one that arrived
  // Ack only: where the probe arrived (interface, destination address) and its source.
  std::string arrival_if, arrival_dst, src;
  bool operator==(const NvDatagram&) const = default;
};
// The datagram's bytes, padded with zeros to size - 28 for a probe or reverse probe.
// REQUIRES: a probe's size is at least kNvMinPacket and at most kNvMaxPacket.
// `header`: the IP and UDP headers' bytes, which a probe's size counts (nv_ip_udp_header).
std::vector<uint8_t> encode_nv_datagram(const NvDatagram& d, uint32_t header = kNvIpUdpHeader);
// Refuses a wrong magic, an unknown kind, and a probe whose length is not its size - 28.
Result<NvDatagram> decode_nv_datagram(std::span<const uint8_t> b, uint32_t header = kNvIpUdpHeader);

// The sizes to try from a sender with interface MTU `sender_mtu` to a receiver with
// `receiver_mtu` (0: unknown): the common steps (576, 1280, 1500, 4096, 9000) and both MTUs,
// each at most the sender's MTU and kNvMaxPacket, ascending, no repeats.
std::vector<uint32_t> nv_mtu_ladder(uint32_t sender_mtu, uint32_t receiver_mtu);

// One direction's MTU as measured.
struct NvMtuDir {
  bool measured = false;
  std::string error;           // why not measured
  uint32_t sender_mtu = 0;     // interface MTU at the sending end
  uint32_t receiver_mtu = 0;   // and at the receiving end (0: unknown)
  uint32_t largest_ok = 0;     // the largest size that crossed (0: none)
  uint32_t smallest_lost = 0;  // the smallest size tried that did not (0: none)
  // Where the datagrams arrived and where from (the receiving end's view).
  std::string arrival_if, arrival_dst, src;
};
// Fills largest_ok / smallest_lost from the sizes tried and those that crossed.
void nv_settle_mtu(NvMtuDir& d, const std::vector<uint32_t>& tried,
                   const std::vector<uint32_t>& crossed);

// NTP's estimate from one exchange: t0 sent and t3 received on this node's wall clock, t1
// the peer's wall clock when it answered (ns since the epoch).
struct NvClockSample {
  int64_t t0 = 0, t1 = 0, t3 = 0;
};
struct NvClock {
  double offset_ms = 0;  // the peer's clock minus this node's
  double error_ms = 0;   // half the round trip of the sample used
};
// The sample with the shortest round trip. REQUIRES: samples not empty.
NvClock nv_clock_offset(const std::vector<NvClockSample>& samples);

// Everything measured on one path (local NI -> peer NI).
struct NvPath {
  std::string peer_name;  // the peer node's name ("" when asked by NID alone)
  Nid local, peer;
  std::string local_if;
  uint32_t local_mtu = 0;
  Status port;       // TCP connect to the peer's address and port from the local address
  Status handshake;  // a pinned PING
  std::optional<NvInfo> info;
  NvMtuDir fwd, rev;  // this NI -> the peer, the peer -> this NI
  double rtt_ms = 0;  // 0: not measured
  std::optional<NvClock> clock;
  double write_bps = 0, read_bps = 0;  // bytes/s each way; 0: not measured
  std::string bandwidth_error;
  // This node's settings.
  int64_t peer_credits = 0, max_rpcs_in_flight = 0, max_bulk = 0;
  NvTcp tcp;
  // Packets the receive backlog dropped at each end while the bandwidth trains ran
  // (host-wide counters read before and after); unset when not measured.
  std::optional<uint64_t> backlog_drops_here, backlog_drops_there;
  // Through routers (no local NI on the peer's network): the gateways of its routes. Its
  // RPC checks run end to end through them; its IP checks (port, MTU, routing) are each
  // hop's, not this path's. Empty: a direct path.
  std::vector<Nid> via;
};

// Thresholds (the request's, with these defaults).
struct NvLimits {
  double max_clock_offset_ms = 250;    // second-interval statistics of two nodes line up
  double max_rtt_ms = 0;               // 0: no limit
  double min_bandwidth_mib = 0;        // 0: no limit
  double max_bandwidth_asymmetry = 3;  // one direction may carry this times the other
};

enum class NvVerdict { kPass, kFail, kSkip };
const char* nv_verdict_name(NvVerdict v);  // "PASS", "FAIL", "SKIP"

struct NvCheck {
  std::string name;  // port, handshake, mtu, routing, rtt, bandwidth, clock, settings, tcp
  NvVerdict verdict = NvVerdict::kPass;
  std::string detail;  // the figures, or the reason it failed or was skipped
};

// The checks of one path, in the order of the table above.
std::vector<NvCheck> judge_path(const NvPath& p, const NvLimits& limits);

}  // namespace pfsnet
