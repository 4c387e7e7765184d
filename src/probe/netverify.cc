#include "probe/netverify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tune/tune.h"
#include "tune/window.h"
#include "wire/byte_codec.h"

namespace pfsnet {
namespace {

constexpr size_t kMaxNvNis = 64;

std::vector<uint32_t> read_sizes(ByteReader& r) {
  size_t n = r.count(4);
  std::vector<uint32_t> v;
  if (n > kNvMaxSizes) {
    r.fail();
    return v;
  }
  for (size_t i = 0; i < n; ++i) v.push_back(r.u32());
  return v;
}

void write_sizes(ByteWriter& w, const std::vector<uint32_t>& v) {
  size_t n = std::min(v.size(), kNvMaxSizes);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) w.u32(v[i]);
}

std::string fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}

std::string mib(double bps) { return fmt("%.1f", bps / (1024.0 * 1024.0)) + " MiB/s"; }

std::string where(const std::string& ifname, const std::string& addr) {
  return (ifname.empty() ? "?" : ifname) + " (" + (addr.empty() ? "?" : addr) + ")";
}

}  // namespace

Buffer encode_nv_info(const NvInfo& v) {
  ByteWriter w;
  w.str(v.name);
  w.i64(v.wall_unix_ns);
  for (int64_t x : {v.peer_credits, v.credits, v.max_rpcs_in_flight, v.max_bulk}) w.i64(x);
  size_t n = std::min(v.nis.size(), kMaxNvNis);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    w.nid(v.nis[i].nid);
    w.str(v.nis[i].ifname);
    w.u32(v.nis[i].mtu);
  }
  w.str(v.route_gateway);
  w.str(v.route_if);
  for (int64_t x :
       {v.tcp.tcp_rmem_max, v.tcp.tcp_wmem_max, v.tcp.tx_buffer_size, v.tcp.rx_buffer_size})
    w.i64(x);
  w.str(v.tcp.congestion_control);
  w.i64(v.tcp.netdev_max_backlog);
  w.u64(v.tcp.backlog_drops);
  return w.take();
}

Result<NvInfo> decode_nv_info(std::span<const uint8_t> b) {
  ByteReader r(b);
  NvInfo v;
  v.name = r.str();
  v.wall_unix_ns = r.i64();
  for (int64_t* x : {&v.peer_credits, &v.credits, &v.max_rpcs_in_flight, &v.max_bulk}) {
    *x = r.i64();
    if (*x < 0) r.fail();
  }
  size_t n = r.count(8 + 1 + 4);
  if (n > kMaxNvNis) r.fail();
  for (size_t i = 0; r.ok() && i < n; ++i) {
    NvNi ni;
    ni.nid = r.nid();
    ni.ifname = r.str();
    ni.mtu = r.u32();
    v.nis.push_back(std::move(ni));
  }
  v.route_gateway = r.str();
  v.route_if = r.str();
  for (int64_t* x :
       {&v.tcp.tcp_rmem_max, &v.tcp.tcp_wmem_max, &v.tcp.tx_buffer_size, &v.tcp.rx_buffer_size}) {
    *x = r.i64();
    if (*x < 0) r.fail();
  }
  v.tcp.congestion_control = r.str();
  if (!r.done()) {  // a peer of an earlier version stops here
    v.tcp.netdev_max_backlog = r.i64();
    if (v.tcp.netdev_max_backlog < 0) r.fail();
    v.tcp.backlog_drops = r.u64();
  }
  return finish_decode(r, std::move(v), "NETVERIFY_INFO");
}

Buffer encode_nv_mtu_send_req(const NvMtuSendReq& v) {
  ByteWriter w;
  w.nid(v.from);
  w.u16(v.port);
  w.u64(v.token);
  write_sizes(w, v.sizes);
  return w.take();
}

Result<NvMtuSendReq> decode_nv_mtu_send_req(std::span<const uint8_t> b) {
  ByteReader r(b);
  NvMtuSendReq v;
  v.from = r.nid();
  v.port = r.u16();
  v.token = r.u64();
  v.sizes = read_sizes(r);
  for (uint32_t s : v.sizes)
    if (s < kNvMinPacket || s > kNvMaxPacket) r.fail();
  if (v.port == 0) r.fail();
  return finish_decode(r, std::move(v), "NETVERIFY_MTU_SEND");
}

Buffer encode_nv_mtu_send_rep(const NvMtuSendRep& v) {
  ByteWriter w;
  write_sizes(w, v.sent);
  write_sizes(w, v.too_big);
  return w.take();
}

Result<NvMtuSendRep> decode_nv_mtu_send_rep(std::span<const uint8_t> b) {
  ByteReader r(b);
  NvMtuSendRep v;
  v.sent = read_sizes(r);
  v.too_big = read_sizes(r);
  return finish_decode(r, std::move(v), "NETVERIFY_MTU_SEND reply");
}

std::vector<uint8_t> encode_nv_datagram(const NvDatagram& d, uint32_t header) {
  ByteWriter w;
  w.u32(kNvMagic);
  w.u8(static_cast<uint8_t>(d.kind));
  w.u64(d.token);
  w.u32(d.size);
  if (d.kind == NvKind::kAck) {
    w.str(d.arrival_if);
    w.str(d.arrival_dst);
    w.str(d.src);
  }
  std::vector<uint8_t> out(w.bytes().begin(), w.bytes().end());
  if (d.kind != NvKind::kAck) out.resize(std::max<size_t>(out.size(), d.size - header));
  return out;
}

Result<NvDatagram> decode_nv_datagram(std::span<const uint8_t> b, uint32_t header) {
  ByteReader r(b);
  if (r.u32() != kNvMagic || !r.ok()) return Status(Code::kProtocol, "not a netverify datagram");
  NvDatagram d;
  uint8_t k = r.u8();
  if (k < 1 || k > 3) return Status(Code::kProtocol, "netverify datagram of unknown kind");
  d.kind = static_cast<NvKind>(k);
  d.token = r.u64();
  d.size = r.u32();
  if (!r.ok()) return Status(Code::kProtocol, "short netverify datagram");
  if (d.kind == NvKind::kAck) {
    d.arrival_if = r.str();
    d.arrival_dst = r.str();
    d.src = r.str();
    return finish_decode(r, std::move(d), "netverify ack");
  }
  if (d.size < kNvMinPacket || d.size > kNvMaxPacket || b.size() + header != d.size)
    return Status(Code::kProtocol, "netverify probe whose length is not its size");
  return d;
}

std::vector<uint32_t> nv_mtu_ladder(uint32_t sender_mtu, uint32_t receiver_mtu) {
  uint32_t top = std::min(sender_mtu, kNvMaxPacket);
  std::vector<uint32_t> v;
  for (uint32_t s : {kNvMinPacket, 1280u, 1500u, 4096u, 9000u, sender_mtu, receiver_mtu})
    if (s >= kNvMinPacket && s <= top) v.push_back(s);
  if (top >= kNvMinPacket) v.push_back(top);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

void nv_settle_mtu(NvMtuDir& d, const std::vector<uint32_t>& tried,
                   const std::vector<uint32_t>& crossed) {
  d.largest_ok = 0;
  d.smallest_lost = 0;
  for (uint32_t s : crossed) d.largest_ok = std::max(d.largest_ok, s);
  for (uint32_t s : tried)
    if (std::find(crossed.begin(), crossed.end(), s) == crossed.end() &&
        (d.smallest_lost == 0 || s < d.smallest_lost))
      d.smallest_lost = s;
  d.measured = true;
}

NvClock nv_clock_offset(const std::vector<NvClockSample>& samples) {
  const NvClockSample* best = &samples.front();
  for (const NvClockSample& s : samples)
    if (s.t3 - s.t0 < best->t3 - best->t0) best = &s;
  NvClock c;
  double mid = (double(best->t0) + double(best->t3)) / 2;
  c.offset_ms = (double(best->t1) - mid) / 1e6;
  c.error_ms = double(best->t3 - best->t0) / 2e6;
  return c;
}

const char* nv_verdict_name(NvVerdict v) {
  switch (v) {
    case NvVerdict::kPass:
      return "PASS";
    case NvVerdict::kFail:
      return "FAIL";
    case NvVerdict::kSkip:
      return "SKIP";
  }
  return "?";
}

std::vector<NvCheck> judge_path(const NvPath& p, const NvLimits& lim) {
  std::vector<NvCheck> out;
  auto add = [&](const char* name, NvVerdict v, std::string detail) {
    out.push_back({name, v, std::move(detail)});
  };
  // The peer by name: the MGS's, else the one it gave itself, else its NID.
  const std::string peer = !p.peer_name.empty()              ? p.peer_name
                           : p.info && !p.info->name.empty() ? p.info->name
                                                             : p.peer.to_string();
  const NvNi* pni = nullptr;
  if (p.info)
    for (const NvNi& n : p.info->nis)
      if (n.nid == p.peer) pni = &n;

  // A routed path: its IP checks are each hop's.
  std::string hops;
  for (const Nid& g : p.via) hops += (hops.empty() ? "" : ", ") + g.to_string();
  const std::string routed = "through the router(s) " + hops +
                             ": no IP path from here to it (netverify the routers for each hop)";
  // port, handshake
  bool port_ok = p.port.ok();
  if (!p.via.empty())
    add("port", NvVerdict::kSkip, routed);
  else
    add("port", port_ok ? NvVerdict::kPass : NvVerdict::kFail,
        port_ok ? "connects from " + p.local.address_string() : p.port.message());
  bool up = p.handshake.ok();
  if (!port_ok && !up)
    add("handshake", NvVerdict::kSkip, "the port does not connect");
  else
    add("handshake", up ? NvVerdict::kPass : NvVerdict::kFail,
        up ? "answered with the cluster key" : p.handshake.message());
  auto skip_rest = [&](const std::string& why) {
    for (const char* n : {"mtu", "routing", "rtt", "bandwidth", "clock", "settings", "tcp"})
      add(n, NvVerdict::kSkip, why);
  };
  if (!up || !p.info) {
    skip_rest(up ? "no NETVERIFY_INFO answer" : "no pfsnet connection");
    return out;
  }
  const NvInfo& info = *p.info;

  // mtu, routing
  if (!p.via.empty()) {
    add("mtu", NvVerdict::kSkip, routed);
    add("routing", NvVerdict::kSkip, routed);
  }
  if (p.via.empty()) {
    std::vector<std::string> bad;
    uint32_t here = p.local_mtu, there = pni ? pni->mtu : 0;
    std::string ends = std::to_string(here) + " here (" + p.local_if + "), " +
                       std::to_string(there) + " on " + peer + " (" +
                       (pni ? pni->ifname : std::string("?")) + ")";
    if (here && there && here != there) bad.push_back("MTU mismatch: " + ends);
    auto dir = [&](const NvMtuDir& d, const char* name) -> std::string {
      if (!d.measured) {
        bad.push_back(std::string(name) + " not measured: " + d.error);
        return std::string(name) + " ?";
      }
      uint32_t want = std::min(
          d.receiver_mtu ? std::min(d.sender_mtu, d.receiver_mtu) : d.sender_mtu, kNvMaxPacket);
      std::string s = std::string(name) + " " + std::to_string(d.largest_ok);
      if (d.largest_ok < want) {
        std::string lost = d.smallest_lost ? std::to_string(d.smallest_lost) : "larger";
        if (d.largest_ok == 0)
          bad.push_back(std::string(name) + ": no datagram crossed (UDP to the port filtered?)");
        else
          bad.push_back(std::string(name) + " carries " + std::to_string(d.largest_ok) + ", not " +
                        lost + " (both ends take " + std::to_string(want) +
                        "): a hop between them has a smaller MTU or drops large packets");
      }
      return s;
    };
    std::string figures = dir(p.fwd, "out") + ", " + dir(p.rev, "back") + "; " + ends;
    // A mismatch is what explains a short direction: say it alone.
    if (here && there && here != there) bad.resize(1);
    add("mtu", bad.empty() ? NvVerdict::kPass : NvVerdict::kFail,
        bad.empty() ? figures
                    : bad.front() + (bad.size() > 1 ? "; " + bad[1] : "") + " [" + figures + "]");
  }

  // routing
  if (p.via.empty()) {
    std::vector<std::string> bad;
    const std::string me = p.local.address_string(), it = p.peer.address_string();
    if (p.fwd.measured && p.fwd.largest_ok) {
      if (!p.fwd.src.empty() && p.fwd.src != me)
        bad.push_back(peer + " sees this NI's datagrams come from " + p.fwd.src + ", not " + me);
      if (pni && !pni->ifname.empty() && !p.fwd.arrival_if.empty() &&
          p.fwd.arrival_if != pni->ifname)
        bad.push_back("this NI's packets arrive at " + peer + " on " +
                      where(p.fwd.arrival_if, p.fwd.arrival_dst) + ", not on " + pni->ifname +
                      " which holds " + it);
    }
    std::string via = info.route_gateway.empty() ? "" : " via " + info.route_gateway;
    if (pni && !pni->ifname.empty() && !info.route_if.empty() && info.route_if != pni->ifname)
      bad.push_back(peer + " sends from " + it + " to " + me + " out of " + info.route_if + via +
                    ", not " + pni->ifname + " which holds " + it +
                    ": replies take another way than requests");
    if (p.rev.measured && p.rev.largest_ok) {
      if (!p.rev.src.empty() && p.rev.src != it)
        bad.push_back(peer + "'s datagrams from " + it + " arrive from " + p.rev.src);
      if (!p.local_if.empty() && !p.rev.arrival_if.empty() && p.rev.arrival_if != p.local_if)
        bad.push_back(peer + "'s packets come back on " +
                      where(p.rev.arrival_if, p.rev.arrival_dst) + ", not on " + p.local_if +
                      " which holds " + me + ": an asymmetric route");
    }
    std::string ok = "out of " + (p.local_if.empty() ? std::string("?") : p.local_if) +
                     ", back out of " + (info.route_if.empty() ? "?" : info.route_if) + via;
    std::string detail = ok;
    if (!bad.empty()) {
      detail = bad.front();
      for (size_t i = 1; i < bad.size(); ++i) detail += "; " + bad[i];
    }
    add("routing", bad.empty() ? NvVerdict::kPass : NvVerdict::kFail, detail);
  }

  // rtt
  if (p.rtt_ms <= 0)
    add("rtt", NvVerdict::kSkip, "not measured");
  else if (lim.max_rtt_ms > 0 && p.rtt_ms > lim.max_rtt_ms)
    add("rtt", NvVerdict::kFail,
        fmt("%.3f ms", p.rtt_ms) + " is above the limit of " + fmt("%.3f ms", lim.max_rtt_ms));
  else
    add("rtt", NvVerdict::kPass, fmt("%.3f ms", p.rtt_ms));

  // bandwidth
  if (p.write_bps <= 0 || p.read_bps <= 0) {
    add("bandwidth", p.bandwidth_error.empty() ? NvVerdict::kSkip : NvVerdict::kFail,
        p.bandwidth_error.empty() ? "not measured" : p.bandwidth_error);
  } else {
    std::string figures = "out " + mib(p.write_bps) + ", back " + mib(p.read_bps);
    double lo = std::min(p.write_bps, p.read_bps), hi = std::max(p.write_bps, p.read_bps);
    double floor = lim.min_bandwidth_mib * 1024 * 1024;
    if (floor > 0 && lo < floor)
      add("bandwidth", NvVerdict::kFail,
          figures + ": below the limit of " + fmt("%.1f MiB/s", lim.min_bandwidth_mib));
    else if (lim.max_bandwidth_asymmetry > 0 && hi > lo * lim.max_bandwidth_asymmetry)
      add("bandwidth", NvVerdict::kFail,
          figures + ": one direction carries less than 1/" +
              fmt("%.0f", lim.max_bandwidth_asymmetry) +
              " of the other (a throttled or shaped direction)");
    else
      add("bandwidth", NvVerdict::kPass, figures);
  }

  // clock
  if (!p.clock) {
    add("clock", NvVerdict::kSkip, "not measured");
  } else {
    double off = p.clock->offset_ms;
    std::string figure = fmt("%+.3f ms", off) + " (+/- " + fmt("%.3f ms", p.clock->error_ms) +
                         ", " + peer + "'s clock against this node's)";
    bool bad = std::abs(off) - p.clock->error_ms > lim.max_clock_offset_ms;
    add("clock", bad ? NvVerdict::kFail : NvVerdict::kPass,
        bad ? figure + ": more than " + fmt("%.0f ms", lim.max_clock_offset_ms) +
                  " apart; statistics intervals and event times of the two will not line up"
            : figure);
  }

  // settings
  {
    std::vector<std::string> bad;
    if (info.peer_credits != p.peer_credits)
      bad.push_back("peer_credits " + std::to_string(p.peer_credits) + " here, " +
                    std::to_string(info.peer_credits) + " on " + peer +
                    ": set them alike (the lower end limits the other's sends)");
    double bw = std::max(p.write_bps, p.read_bps);
    int64_t block = p.max_bulk / 2;
    std::string need_text;
    if (bw > 0 && p.rtt_ms > 0 && block > 0) {
      double bdp = bw * p.rtt_ms / 1000.0;
      int64_t need = rpcs_for(bdp, double(block));
      need_text = "bandwidth x RTT " + fmt("%.0f", bdp / 1024) + " KiB needs " +
                  std::to_string(need) + " RPCs of " + std::to_string(block / 1024) +
                  " KiB in flight";
      if (p.max_rpcs_in_flight < need)
        bad.push_back(need_text + "; max_rpcs_in_flight is " +
                      std::to_string(p.max_rpcs_in_flight) + " (pfsnet tune)");
      if (p.peer_credits < need)
        bad.push_back(need_text + "; peer_credits is " + std::to_string(p.peer_credits) +
                      " (pfsnet tune)");
    }
    std::string detail = "peer_credits " + std::to_string(p.peer_credits) + " both ends" +
                         (need_text.empty() ? "" : "; " + need_text) + ", max_rpcs_in_flight " +
                         std::to_string(p.max_rpcs_in_flight);
    if (!bad.empty()) {
      detail = bad.front();
      for (size_t i = 1; i < bad.size(); ++i) detail += "; " + bad[i];
    }
    add("settings", bad.empty() ? NvVerdict::kPass : NvVerdict::kFail, detail);
  }

  // tcp: each direction's sending end's send buffer and receiving end's receive buffer
  // against twice its bandwidth x RTT.
  if (p.rtt_ms <= 0 || p.write_bps <= 0 || p.read_bps <= 0) {
    add("tcp", NvVerdict::kSkip, "needs the rtt and bandwidth checks");
  } else {
    std::vector<std::string> bad, figures;
    auto direction = [&](const char* name, double bps, const NvTcp& sender, const char* from,
                         const NvTcp& receiver, const char* to) {
      double need = 2 * bps * p.rtt_ms / 1000.0;
      figures.push_back(std::string(name) + " needs " + fmt("%.1f MiB", need / (1 << 20)));
      for (int send = 1; send >= 0; --send) {
        const NvTcp& end = send ? sender : receiver;
        BufferCap cap = buffer_cap(send, send ? end.tx_buffer_size : end.rx_buffer_size,
                                   send ? end.tcp_wmem_max : end.tcp_rmem_max);
        const double have = cap.bytes;
        const std::string& what = cap.what;
        if (have > 0 && have < need)
          bad.push_back(std::string(name) + ": " + what + " " + (send ? from : to) + " caps the " +
                        (send ? "send" : "receive") + " buffer below the " +
                        fmt("%.1f MiB", need / (1 << 20)) + " twice the bandwidth x RTT needs");
      }
      // The sender's congestion control decides how fast a loss is made good.
      double mss = p.local_mtu > 52 ? double(p.local_mtu - 52) : 1448;  // IPv4 + TCP + stamps
      double secs =
          loss_recovery_seconds(sender.congestion_control, bps * p.rtt_ms / 1000.0, p.rtt_ms, mss);
      if (secs >= kSlowRecoverySeconds)
        bad.push_back(std::string(name) + ": congestion control " + sender.congestion_control +
                      " " + from + " takes " + fmt("%.0f", secs) +
                      " s to regain the rate after one loss (one segment per round trip); set "
                      "net.ipv4.tcp_congestion_control=cubic or bbr");
    };
    std::string there = "on " + peer;
    direction("out", p.write_bps, p.tcp, "here", info.tcp, there.c_str());
    direction("back", p.read_bps, info.tcp, there.c_str(), p.tcp, "here");
    // The receive backlog: packets it dropped while the trains ran (the study raised
    // net.core.netdev_max_backlog to 30000).
    auto backlog = [&](const std::optional<uint64_t>& drops, const NvTcp& end, const char* at) {
      if (drops && *drops > 0)
        bad.push_back(std::to_string(*drops) + " packets dropped by the receive backlog " + at +
                      " while the trains ran: raise net.core.netdev_max_backlog (now " +
                      std::to_string(end.netdev_max_backlog) + ")");
    };
    backlog(p.backlog_drops_here, p.tcp, "here");
    backlog(p.backlog_drops_there, info.tcp, there.c_str());
    std::string cc = p.tcp.congestion_control + "/" + info.tcp.congestion_control;
    std::string detail = figures[0] + ", " + figures[1] + "; congestion control " + cc +
                         "; netdev_max_backlog " + std::to_string(p.tcp.netdev_max_backlog) + "/" +
                         std::to_string(info.tcp.netdev_max_backlog);
    if (p.backlog_drops_here && p.backlog_drops_there) detail += ", no backlog drops";
    if (!bad.empty()) {
      detail = bad.front();
      for (size_t i = 1; i < bad.size(); ++i) detail += "; " + bad[i];
    }
    add("tcp", bad.empty() ? NvVerdict::kPass : NvVerdict::kFail, detail);
  }
  return out;
}

}  // namespace pfsnet
