#include "probe/netverify_service.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "base/log.h"
#include "base/mutex.h"
#include "base/thread_name.h"
#include "net/net_internal.h"  // same_net
#include "rpc/call_batch.h"
#include "rpc/ping.h"
#include "rpc/rpc_method.h"
#include "transport/link_monitor.h"
#include "tune/window.h"
#include "wire/le.h"

namespace pfsnet {
namespace {

// This node's TCP buffer settings: the host's maxima (read now) and the fixed sizes.
NvTcp nv_tcp(const Config& c) {
  HostTcp h = read_host_tcp();
  NvTcp t;
  t.tcp_rmem_max = h.tcp_rmem_max;
  t.tcp_wmem_max = h.tcp_wmem_max;
  t.tx_buffer_size = c.lnet.tx_buffer_size;
  t.rx_buffer_size = c.lnet.rx_buffer_size;
  t.congestion_control = h.congestion_control;
  t.netdev_max_backlog = h.netdev_max_backlog;
  t.backlog_drops = read_backlog_drops();
  return t;
}

using std::chrono::milliseconds;

// A socket address of a NID's address (IPv4 or IPv6) and a port.
struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&ss); }
  int family() const { return ss.ss_family; }
};

SockAddr sock_addr(const Nid& nid, uint16_t port) {
  SockAddr a;
  if (nid.addr_len == 16) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
    s6->sin6_family = AF_INET6;
    std::memcpy(s6->sin6_addr.s6_addr, nid.addr.data(), 16);
    s6->sin6_port = htons(port);
    a.len = sizeof(sockaddr_in6);
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&a.ss);
    s4->sin_family = AF_INET;
    s4->sin_addr.s_addr = htonl(nid.ipv4());
    s4->sin_port = htons(port);
    a.len = sizeof(sockaddr_in);
  }
  return a;
}

std::string addr_string(const sockaddr_storage& a) {
  char b[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr, b, sizeof b);
  else
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr, b, sizeof b);
  return b;
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// A UDP socket bound to one address: DF set on every datagram (the kernel neither
// fragments nor uses its cached path MTU), and the arrival interface and address of each
// datagram received.
class UdpSocket {
 public:
  UdpSocket() = default;
  ~UdpSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  int fd() const { return fd_; }

  Status open(const Nid& nid, uint16_t port) {
    SockAddr a = sock_addr(nid, port);
    fd_ = ::socket(a.family(), SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0) return Status(Code::kInternal, errno_text("socket"));
    int on = 1;
    bool ok;
    if (a.family() == AF_INET6) {
      int probe = IPV6_PMTUDISC_PROBE;
      ok = ::setsockopt(fd_, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &probe, sizeof probe) == 0 &&
           ::setsockopt(fd_, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof on) == 0 &&
           ::setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) == 0;
    } else {
      int probe = IP_PMTUDISC_PROBE;
      ok = ::setsockopt(fd_, IPPROTO_IP, IP_MTU_DISCOVER, &probe, sizeof probe) == 0 &&
           ::setsockopt(fd_, IPPROTO_IP, IP_PKTINFO, &on, sizeof on) == 0;
    }
    if (!ok) return Status(Code::kInternal, errno_text("setsockopt"));
    if (::bind(fd_, a.get(), a.len) < 0) return Status(Code::kInternal, errno_text("bind"));
    return Status::Ok();
  }
  uint16_t port() const {
    sockaddr_storage a{};
    socklen_t n = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n);
    return a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  }
  // The IP and UDP headers' bytes of this socket's datagrams.
  static uint32_t header(int fd) {
    sockaddr_storage a{};
    socklen_t n = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    return a.ss_family == AF_INET6 ? kNvIp6UdpHeader : kNvIpUdpHeader;
  }
  // 0, or the errno of the send (EMSGSIZE: over the interface's MTU).
  static int send_to(int fd, const std::vector<uint8_t>& d, const sockaddr* to, socklen_t len) {
    ssize_t n = ::sendto(fd, d.data(), d.size(), 0, to, len);
    return n < 0 ? errno : 0;
  }
  static int send_to(int fd, const std::vector<uint8_t>& d, const SockAddr& to) {
    return send_to(fd, d, to.get(), to.len);
  }
  struct Got {
    std::vector<uint8_t> bytes;
    sockaddr_storage from{};
    socklen_t from_len = 0;
    std::string arrival_if, arrival_dst;
  };
  // One datagram, waiting at most `wait`; nothing when none came.
  static std::optional<Got> recv(int fd, milliseconds wait) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return std::nullopt;
    Got g;
    g.bytes.resize(kNvMaxPacket);
    iovec iov{g.bytes.data(), g.bytes.size()};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(in6_pktinfo))];
    msghdr m{};
    m.msg_name = &g.from;
    m.msg_namelen = sizeof g.from;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    ssize_t n = ::recvmsg(fd, &m, 0);
    if (n < 0) return std::nullopt;
    g.from_len = m.msg_namelen;
    g.bytes.resize(static_cast<size_t>(n));
    auto arrived = [&g](unsigned ifindex, int family, const void* dst) {
      char name[IF_NAMESIZE] = {};
      if (::if_indextoname(ifindex, name)) g.arrival_if = name;
      char b[INET6_ADDRSTRLEN] = {};
      ::inet_ntop(family, dst, b, sizeof b);
      g.arrival_dst = b;
    };
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
        in_pktinfo pi;
        std::memcpy(&pi, CMSG_DATA(c), sizeof pi);
        arrived(static_cast<unsigned>(pi.ipi_ifindex), AF_INET, &pi.ipi_addr);
      } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
        in6_pktinfo pi;
        std::memcpy(&pi, CMSG_DATA(c), sizeof pi);
        arrived(pi.ipi6_ifindex, AF_INET6, &pi.ipi6_addr);
      }
    }
    return g;
  }

 private:
  int fd_ = -1;
};

// TCP connect from `local` to `peer`:`port` within `timeout`.
Status connect_port(const Nid& local, const Nid& peer, uint16_t port, Duration timeout) {
  SockAddr me = sock_addr(local, 0), to = sock_addr(peer, port);
  int fd = ::socket(me.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status(Code::kInternal, errno_text("socket"));
  std::string target = peer.is_large() ? "[" + addr_string(to.ss) + "]:" + std::to_string(port)
                                       : addr_string(to.ss) + ":" + std::to_string(port);
  Status s = Status::Ok();
  if (::bind(fd, me.get(), me.len) < 0) {
    s = Status(Code::kInternal, errno_text("bind to the local NI's address"));
  } else if (::connect(fd, to.get(), to.len) < 0 && errno != EINPROGRESS) {
    s = Status(Code::kUnreachable, "connect to " + target + ": " + std::strerror(errno));
  } else {
    pollfd p{fd, POLLOUT, 0};
    int ms = static_cast<int>(std::chrono::duration_cast<milliseconds>(timeout).count());
    int r = ::poll(&p, 1, ms);
    int err = 0;
    socklen_t n = sizeof err;
    if (r == 0)
      s = Status(Code::kTimeout, "connect to " + target + ": no answer within " +
                                     std::to_string(ms) + " ms (filtered or black-holed)");
    else if (r < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n) < 0 || err != 0)
      s = Status(Code::kUnreachable,
                 "connect to " + target + ": " + std::strerror(err ? err : errno));
  }
  ::close(fd);
  return s;
}

NvNi ni_of(const Nid& nid) {
  NvNi n;
  n.nid = nid;
  auto ifn = LinkMonitor::interface_of(nid);
  if (ifn.ok()) {
    n.ifname = *ifn;
    auto mtu = LinkMonitor::mtu_of(*ifn);
    if (mtu.ok()) n.mtu = *mtu;
  }
  return n;
}

NvPath path_to(const Nid& peer) {
  NvPath p;
  p.peer = peer;
  return p;
}

// NETVERIFY_INFO's request names the NID it was sent to: the route back is from that
// address.
Buffer encode_asked(const Nid& n) {
  ByteWriter w;
  w.nid(n);
  return w.take();
}
Result<Nid> decode_asked(std::span<const uint8_t> b) {
  ByteReader r(b);
  Nid n = r.nid();
  if (!r.done()) return Status(Code::kProtocol, "malformed NETVERIFY_INFO request");
  return n;
}
// What a node says of itself: name, clock, credits, TCP settings, NIs, the route back.
const RpcMethod<Nid, NvInfo> kInfoRpc{.type = kMsgNetverifyInfo,
                                      .name = "NETVERIFY_INFO",
                                      .exec = Execution::kRepeatable,
                                      .encode_request = encode_asked,
                                      .decode_request = decode_asked,
                                      .encode_reply = encode_nv_info,
                                      .decode_reply = decode_nv_info,
                                      .mode = HandlerMode::kWorker};
// Datagrams of the sizes asked, sent back to the asker's UDP port (the reverse MTU).
const RpcMethod<NvMtuSendReq, NvMtuSendRep> kMtuSendRpc{.type = kMsgNetverifyMtuSend,
                                                        .name = "NETVERIFY_MTU_SEND",
                                                        .exec = Execution::kRepeatable,
                                                        .encode_request = encode_nv_mtu_send_req,
                                                        .decode_request = decode_nv_mtu_send_req,
                                                        .encode_reply = encode_nv_mtu_send_rep,
                                                        .decode_reply = decode_nv_mtu_send_rep,
                                                        .mode = HandlerMode::kWorker};

}  // namespace

NetverifyService::NetverifyService(Net& net, RpcEngine& rpc, LiveConfig& cfg, Clock& clock,
                                   MembershipService* membership)
    : net_(net), rpc_(rpc), cfg_(cfg), clock_(clock), membership_(membership) {
  serve(rpc_, kInfoRpc, [this](Nid&& asked, RpcRequest& req) -> Result<NvInfo> {
    Config c = cfg_.get();
    NvInfo v;
    v.name = c.node.name;
    v.wall_unix_ns = clock_.wall_now().time_since_epoch().count();
    v.peer_credits = c.lnet.peer_credits;
    v.credits = c.lnet.credits;
    v.max_rpcs_in_flight = c.rpc.max_rpcs_in_flight;
    v.max_bulk = c.max_bulk();
    v.tcp = nv_tcp(c);
    for (const NetConfig& n : c.nets) v.nis.push_back(ni_of(n.nid));
    auto route = LinkMonitor::route_to(req.from, asked);
    if (route.ok()) {
      v.route_if = route->ifname;
      v.route_gateway = route->gateway;
    }
    return v;
  });
  serve(rpc_, kMtuSendRpc, [this](NvMtuSendReq&& q, RpcRequest& req) -> Result<NvMtuSendRep> {
    std::vector<Nid> mine = net_.local_nids();
    if (std::find(mine.begin(), mine.end(), q.from) == mine.end())
      return Status(Code::kInvalidArgument, q.from.to_string() + " is not an NI here");
    UdpSocket s;
    Status st = s.open(q.from, 0);
    if (!st.ok()) return st;
    // Only to the address that asked, over the authenticated connection.
    if (req.from.addr_len != q.from.addr_len)
      return Status(Code::kInvalidArgument, "asked from " + req.from.to_string() +
                                                " to send from " + q.from.to_string() +
                                                ": another address family");
    SockAddr to = sock_addr(req.from, q.port);
    const uint32_t header = nv_ip_udp_header(q.from);
    NvMtuSendRep rep;
    for (uint32_t size : q.sizes) {
      NvDatagram d{NvKind::kReverse, q.token, size, {}, {}, {}};
      std::vector<uint8_t> bytes = encode_nv_datagram(d, header);
      int err = 0;
      for (int i = 0; i < 3; ++i) err = UdpSocket::send_to(s.fd(), bytes, to);
      (err == EMSGSIZE ? rep.too_big : rep.sent).push_back(size);
    }
    return rep;
  });
}

NetverifyService::~NetverifyService() { stop(); }

Status NetverifyService::start(TimerQueue&) {
  Config c = cfg_.get();
  for (const NetConfig& n : c.nets) {
    UdpSocket s;
    Status st = s.open(n.nid, n.port);
    if (!st.ok()) {
      PFS_LOG_WARN("netverify: no UDP responder on {} port {}: {}", n.nid.to_string(), n.port,
                   st.message());
      continue;
    }
    fds_.push_back(s.release());
  }
  if (!fds_.empty())
    responder_ = std::thread([this] {
      name_this_thread("pfs-netverify");
      respond();
    });
  return Status::Ok();
}

void NetverifyService::stop() {
  stop_ = true;
  if (responder_.joinable()) responder_.join();
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}

void NetverifyService::respond() {
  std::vector<pollfd> p;
  for (int fd : fds_) p.push_back({fd, POLLIN, 0});
  while (!stop_.load()) {
    if (::poll(p.data(), p.size(), 200) <= 0) continue;
    for (pollfd& x : p) {
      if (!(x.revents & POLLIN)) continue;
      // Drain what is there; each probe gets one small ack.
      for (int i = 0; i < 64; ++i) {
        auto g = UdpSocket::recv(x.fd, milliseconds(0));
        if (!g) break;
        const uint32_t header = UdpSocket::header(x.fd);
        auto d = decode_nv_datagram(g->bytes, header);
        if (!d.ok() || d->kind != NvKind::kProbe) continue;
        NvDatagram ack{
            NvKind::kAck,  d->token,       static_cast<uint32_t>(g->bytes.size() + header),
            g->arrival_if, g->arrival_dst, addr_string(g->from)};
        UdpSocket::send_to(x.fd, encode_nv_datagram(ack, header),
                           reinterpret_cast<const sockaddr*>(&g->from), g->from_len);
      }
    }
  }
}

NvPath NetverifyService::measure(const NetverifyRequest& req, const std::string& name,
                                 const NetConfig& local, const Nid& peer) {
  NvPath p;
  p.peer_name = name;
  p.local = local.nid;
  p.peer = peer;
  NvNi me = ni_of(local.nid);
  p.local_if = me.ifname;
  p.local_mtu = me.mtu;
  Config c = cfg_.get();
  p.peer_credits = c.lnet.peer_credits;
  // What RPCs to this peer get, as the engine has it (own values are keyed by the peer's
  // first NID, as pfsnet tune writes them).
  p.max_rpcs_in_flight = rpc_.max_rpcs_in_flight(net_.peer_of(peer).value_or(peer));
  p.max_bulk = c.max_bulk();
  p.tcp = nv_tcp(c);
  CallOptions co;
  co.timeout = req.timeout;
  co.via = std::make_pair(local.nid, peer);

  // Through routers: no IP path to it from here, so no port or MTU to try; the RPC checks
  // below cross the routers end to end.
  if (net_.routed(peer)) {
    for (const RouteInfo& r : net_.routes())
      if (r.route.net == peer.net() &&
          std::find(p.via.begin(), p.via.end(), r.route.gateway) == p.via.end())
        p.via.push_back(r.route.gateway);
  }
  const bool routed = !p.via.empty();

  // port, handshake and round trip
  if (!routed) p.port = connect_port(local.nid, peer, local.port, req.timeout);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    RpcReply r = rpc_.call(peer, kMsgPing, Buffer(), nullptr, co);
    if (!r.status.ok()) {
      p.handshake = r.status;
      return p;
    }
    double ms = to_ms(r.round_trip());
    best = i == 0 ? ms : std::min(best, ms);
  }
  p.rtt_ms = best;

  // what it says of itself, and the clocks
  std::vector<NvClockSample> samples;
  for (int i = 0; i < 3; ++i) {
    int64_t t0 = clock_.wall_now().time_since_epoch().count();
    Result<NvInfo> info = call(rpc_, kInfoRpc, peer, peer, co);
    int64_t t3 = clock_.wall_now().time_since_epoch().count();
    if (!info.ok()) {
      p.handshake = Status(info.status().code(), "NETVERIFY_INFO: " + info.status().message());
      return p;
    }
    samples.push_back({t0, info->wall_unix_ns, t3});
    p.info = std::move(*info);
  }
  p.clock = nv_clock_offset(samples);
  uint32_t peer_mtu = 0;
  for (const NvNi& n : p.info->nis)
    if (n.nid == peer) peer_mtu = n.mtu;

  // MTU: out (acks from its responder), then back (its reverse probes to our socket)
  UdpSocket s;
  Status st = routed ? Status(Code::kUnreachable, "routed") : s.open(local.nid, 0);
  // How long datagrams may take to come back once sent: a collection ends as soon as every
  // size is in, so only a size that does not cross waits this long (a loaded host's
  // responder may be slow to run).
  milliseconds wait =
      std::min(milliseconds(2000), std::chrono::duration_cast<milliseconds>(req.timeout));
  p.fwd.sender_mtu = p.local_mtu;
  p.fwd.receiver_mtu = peer_mtu;
  p.rev.sender_mtu = peer_mtu;
  p.rev.receiver_mtu = p.local_mtu;
  if (!st.ok()) {
    p.fwd.error = p.rev.error = st.message();
  } else {
    auto collect = [&](NvMtuDir& dir, uint64_t token, NvKind kind, size_t want,
                       std::vector<uint32_t>& crossed) {
      auto until = std::chrono::steady_clock::now() + wait;
      while (crossed.size() < want && std::chrono::steady_clock::now() < until) {
        auto left =
            std::chrono::duration_cast<milliseconds>(until - std::chrono::steady_clock::now());
        auto g = UdpSocket::recv(s.fd(), std::max(milliseconds(1), left));
        if (!g) continue;
        auto d = decode_nv_datagram(g->bytes, nv_ip_udp_header(local.nid));
        if (!d.ok() || d->token != token || d->kind != kind) continue;
        if (std::find(crossed.begin(), crossed.end(), d->size) == crossed.end())
          crossed.push_back(d->size);
        if (kind == NvKind::kAck) {
          dir.arrival_if = d->arrival_if;
          dir.arrival_dst = d->arrival_dst;
          dir.src = d->src;
        } else {
          dir.arrival_if = g->arrival_if;
          dir.arrival_dst = g->arrival_dst;
          dir.src = addr_string(g->from);
        }
      }
    };
    // out
    std::vector<uint32_t> ladder = nv_mtu_ladder(p.local_mtu ? p.local_mtu : 1500, peer_mtu);
    uint64_t token = next_token_.fetch_add(1) ^ (nid_seed(local.nid) << 32);
    SockAddr to = sock_addr(peer, local.port);
    std::vector<uint32_t> tried, crossed;
    for (uint32_t size : ladder) {
      NvDatagram d{NvKind::kProbe, token, size, {}, {}, {}};
      auto bytes = encode_nv_datagram(d, nv_ip_udp_header(local.nid));
      int err = 0;
      for (int i = 0; i < 3; ++i) err = UdpSocket::send_to(s.fd(), bytes, to);
      if (err == 0) tried.push_back(size);
    }
    collect(p.fwd, token, NvKind::kAck, tried.size(), crossed);
    nv_settle_mtu(p.fwd, tried, crossed);
    // back
    NvMtuSendReq q;
    q.from = peer;
    q.port = s.port();
    q.token = next_token_.fetch_add(1) ^ (nid_seed(peer) << 32);
    q.sizes = nv_mtu_ladder(peer_mtu ? peer_mtu : 1500, p.local_mtu);
    Result<NvMtuSendRep> rep = call(rpc_, kMtuSendRpc, peer, q, co);
    if (!rep.ok()) {
      p.rev.error = "NETVERIFY_MTU_SEND: " + rep.status().message();
    } else {
      std::vector<uint32_t> back;
      collect(p.rev, q.token, NvKind::kReverse, rep->sent.size(), back);
      nv_settle_mtu(p.rev, rep->sent, back);
    }
  }

  // bandwidth: a train of writes (the peer stamps arrivals), then of reads (we do)
  if (req.bandwidth) {
    auto train = [&](bool write) -> Result<double> {
      BulkData data = write ? make_bulk(Buffer(req.size)) : nullptr;
      CallBatch batch(rpc_);
      for (int i = 0; i < req.train; ++i) {
        CallOptions o = co;
        if (!write) o.reply_bulk = req.size;
        batch.add(peer, write ? kMsgTuneProbe : kMsgPing, write ? Buffer() : ping_payload(req.size),
                  data, o);
      }
      if (!batch.wait(req.timeout + std::chrono::seconds(5)))
        return Status(Code::kTimeout, "the train did not finish");
      std::vector<int64_t> stamps;
      for (const RpcReply& r : batch.take()) {
        if (r.status.ok() && write && r.payload.size() == 8) {
          int64_t ns = 0;
          std::memcpy(&ns, r.payload.data(), 8);
          stamps.push_back(ns);
        } else if (r.status.ok() && !write) {
          stamps.push_back(r.times.reply_complete.time_since_epoch().count());
        } else {
          return r.status.ok() ? Status(Code::kProtocol, "malformed reply") : r.status;
        }
      }
      auto [lo, hi] = std::minmax_element(stamps.begin(), stamps.end());
      double span = double(*hi - *lo) / 1e9;
      if (span <= 0) return Status(Code::kProtocol, "every RPC of the train arrived at once");
      return double(req.train - 1) * double(req.size) / span;
    };
    // The receive backlog's drops at each end, around the trains.
    auto peer_drops = [&]() -> std::optional<uint64_t> {
      Result<NvInfo> info = call(rpc_, kInfoRpc, peer, peer, co);
      // A peer of an earlier version reports no backlog.
      if (!info.ok() || info->tcp.netdev_max_backlog == 0) return std::nullopt;
      return info->tcp.backlog_drops;
    };
    uint64_t here_before = read_backlog_drops();
    std::optional<uint64_t> there_before = peer_drops();
    for (bool write : {true, false}) {
      std::vector<double> rates;
      std::string err;
      for (int t = 0; t < req.trains; ++t) {
        auto r = train(write);
        if (r.ok())
          rates.push_back(*r);
        else
          err = std::string(write ? "writes" : "reads") + ": " + r.status().message();
      }
      if (rates.empty()) {
        p.bandwidth_error = err;
        break;
      }
      std::sort(rates.begin(), rates.end());
      (write ? p.write_bps : p.read_bps) = rates[rates.size() / 2];
    }
    uint64_t here_after = read_backlog_drops();
    std::optional<uint64_t> there_after = peer_drops();
    if (here_after >= here_before) p.backlog_drops_here = here_after - here_before;
    if (there_before && there_after && *there_after >= *there_before)
      p.backlog_drops_there = *there_after - *there_before;
  }
  return p;
}

Result<NetverifyReport> NetverifyService::run(const NetverifyRequest& req) {
  if (req.train < 2 || req.trains < 1 || req.size == 0)
    return Status(Code::kInvalidArgument, "a bandwidth train needs 2 or more RPCs of data");
  Config c = cfg_.get();
  if (int64_t(req.size) > c.max_bulk())
    return Status(Code::kInvalidArgument,
                  "size must be at most " + std::to_string(c.max_bulk()) + " (2 x maxBlockSize)");
  NetverifyReport rep;
  rep.node = c.node.name;
  rep.limits = req.limits;
  std::optional<StatusTable> table;
  Status table_error = Status(Code::kNotFound, "this node has no MGS");
  bool need_table = req.nodes.empty();
  for (const std::string& n : req.nodes)
    if (!Nid::parse(n).ok()) need_table = true;
  if (need_table && membership_ && (membership_->is_mgs() || membership_->has_agent())) {
    auto t = membership_->status(req.timeout);
    if (t.ok())
      table = std::move(*t);
    else
      table_error = t.status();
  }
  if (need_table && !table)
    return Status(table_error.code(), "the MGS's node list could not be had: " +
                                          table_error.message() + " (name the nodes by NID)");
  std::vector<NetverifyNode> targets;
  if (req.nodes.empty()) {
    for (const StatusNode& n : table->nodes)
      if (n.name != c.node.name) {
        NetverifyNode t;
        t.name = n.name;
        t.state = node_state_name(n.state);
        for (const Nid& nid : n.nids) t.paths.push_back(path_to(nid));
        targets.push_back(std::move(t));
      }
  } else {
    for (const std::string& want : req.nodes) {
      NetverifyNode t;
      const StatusNode* hit = nullptr;
      if (table)
        for (const StatusNode& n : table->nodes)
          if (n.name == want) hit = &n;
      if (hit) {
        t.name = hit->name;
        t.state = node_state_name(hit->state);
        for (const Nid& nid : hit->nids) t.paths.push_back(path_to(nid));
      } else if (auto nid = Nid::parse(want); nid.ok()) {
        if (table)
          for (const StatusNode& n : table->nodes)
            if (std::find(n.nids.begin(), n.nids.end(), *nid) != n.nids.end()) {
              t.name = n.name;
              t.state = node_state_name(n.state);
            }
        t.paths.push_back(path_to(*nid));
      } else {
        return Status(Code::kInvalidArgument,
                      "unknown node '" + want + "': not in the MGS's table, and not a NID");
      }
      targets.push_back(std::move(t));
    }
  }
  for (NetverifyNode& t : targets) {
    std::vector<Nid> peers;
    for (const NvPath& p : t.paths) peers.push_back(p.peer);
    t.paths.clear();
    // Each NID on a network of this node's, from each local NI there; a node on none of
    // them, through its routers (from the NI towards their gateways).
    bool direct = false;
    for (const Nid& peer : peers)
      for (const NetConfig& local : c.nets) direct |= same_net(local.nid, peer);
    for (const Nid& peer : peers) {
      std::optional<Nid> via = direct ? std::nullopt : net_.route_local(peer);
      for (const NetConfig& local : c.nets)
        if (same_net(local.nid, peer) || (via && local.nid == *via)) {
          t.paths.push_back(measure(req, t.name, local, peer));
          t.checks.push_back(judge_path(t.paths.back(), req.limits));
        }
    }
    if (t.paths.empty())
      t.error = "no local NI on the network of any of its NIDs, and no route to them";
    for (const NvPath& p : t.paths)  // asked by NID alone: the name it gives itself
      if (t.name.empty() && p.info) t.name = p.info->name;
  }
  rep.nodes = std::move(targets);
  return rep;
}

}  // namespace pfsnet
