#include "transport/link_monitor.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/ethtool.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/log.h"
#include "base/thread_name.h"

namespace pfsnet {

LinkMonitor::~LinkMonitor() { stop(); }

Status LinkMonitor::start(Callback cb) {
  cb_ = std::move(cb);
  fd_ = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd_ < 0)
    return Status(Code::kInternal, std::string("netlink socket: ") + std::strerror(errno));
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = RTMGRP_LINK;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0) {
    int e = errno;
    ::close(fd_);
    fd_ = -1;
    return Status(Code::kInternal, std::string("netlink bind: ") + std::strerror(e));
  }
  stop_ = false;
  thread_ = std::thread([this] {
    name_this_thread("pfs-links");
    run();
  });
  return Status::Ok();
}

void LinkMonitor::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void LinkMonitor::run() {
  std::vector<char> buf(16384);
  while (!stop_.load()) {
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, 200);
    if (r <= 0) continue;
    ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n <= 0) {
      if (n < 0 && errno == ENOBUFS)
        PFS_LOG_WARN("link monitor: netlink overrun; some link events were lost");
      continue;
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, static_cast<unsigned>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) continue;
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) continue;
      auto* ifi = static_cast<ifinfomsg*>(NLMSG_DATA(h));
      std::string name;
      int len = static_cast<int>(IFLA_PAYLOAD(h));
      for (auto* a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len))
        if (a->rta_type == IFLA_IFNAME)
          name.assign(static_cast<const char*>(RTA_DATA(a)),
                      strnlen(static_cast<const char*>(RTA_DATA(a)), RTA_PAYLOAD(a)));
      if (name.empty()) continue;
      bool up = h->nlmsg_type == RTM_NEWLINK && (ifi->ifi_flags & IFF_UP) &&
                (ifi->ifi_flags & IFF_RUNNING);
      if (cb_) cb_(name, up);
    }
  }
}

Result<std::string> LinkMonitor::interface_of(const Nid& nid) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) < 0)
    return Status(Code::kInternal, std::string("getifaddrs: ") + std::strerror(errno));
  std::string found, loopback;
  if (nid.addr_len == 16) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6) continue;
      const auto* a = reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr.s6_addr;
      if (std::memcmp(a, nid.addr.data(), 16) == 0) {
        found = i->ifa_name;
        break;
      }
    }
    ::freeifaddrs(list);
    if (found.empty()) return Status(Code::kNotFound, "no interface holds the address");
    return found;
  }
  const uint32_t addr = nid.ipv4();
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    uint32_t a = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    if (a == addr) {
      found = i->ifa_name;
      break;
    }
    // Every address of a loopback interface's prefix is local (127.0.0.0/8 on lo).
    if ((i->ifa_flags & IFF_LOOPBACK) && i->ifa_netmask) {
      uint32_t mask = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
      if ((a & mask) == (addr & mask)) loopback = i->ifa_name;
    }
  }
  if (found.empty()) found = loopback;
  ::freeifaddrs(list);
  if (found.empty()) return Status(Code::kNotFound, "no interface holds the address");
  return found;
}

namespace {

// An interface ioctl (SIOCGIFFLAGS, SIOCGIFMTU) on `ifname`.
Result<ifreq> if_ioctl(const std::string& ifname, unsigned long request) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Status(Code::kInternal, std::string("socket: ") + std::strerror(errno));
  ifreq req{};
  std::strncpy(req.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  int r = ::ioctl(s, request, &req);
  int e = errno;
  ::close(s);
  if (r < 0) return Status(Code::kNotFound, ifname + ": " + std::strerror(e));
  return req;
}

}  // namespace

Result<bool> LinkMonitor::link_up(const std::string& ifname) {
  auto req = if_ioctl(ifname, SIOCGIFFLAGS);
  if (!req.ok()) return req.status();
  return (req->ifr_flags & IFF_UP) && (req->ifr_flags & IFF_RUNNING);
}

Result<LinkMonitor::Route> LinkMonitor::route_to(const Nid& dst, const Nid& src) {
  if (dst.addr_len != src.addr_len || (dst.addr_len != 4 && dst.addr_len != 16))
    return Status(Code::kInvalidArgument, "no route between address families");
  const bool v6 = dst.addr_len == 16;
  int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return Status(Code::kInternal, std::string("netlink: ") + std::strerror(errno));
  struct {
    nlmsghdr h;
    rtmsg r;
    char attrs[2 * RTA_SPACE(16)];
  } req{};
  req.h.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  req.h.nlmsg_type = RTM_GETROUTE;
  req.h.nlmsg_flags = NLM_F_REQUEST;
  req.h.nlmsg_seq = 1;
  req.r.rtm_family = v6 ? AF_INET6 : AF_INET;
  auto add = [&](unsigned short type, const Nid& n) {
    auto* a =
        reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) + NLMSG_ALIGN(req.h.nlmsg_len));
    a->rta_type = type;
    a->rta_len = static_cast<unsigned short>(RTA_LENGTH(n.addr_len));
    std::memcpy(RTA_DATA(a), n.addr.data(), n.addr_len);  // network byte order already
    req.h.nlmsg_len = NLMSG_ALIGN(req.h.nlmsg_len) + RTA_ALIGN(a->rta_len);
  };
  add(RTA_DST, dst);
  req.r.rtm_dst_len = static_cast<unsigned char>(8 * dst.addr_len);
  add(RTA_SRC, src);
  req.r.rtm_src_len = static_cast<unsigned char>(8 * src.addr_len);
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::vector<char> buf(8192);
  ssize_t n = -1;
  if (::send(fd, &req, req.h.nlmsg_len, 0) >= 0) n = ::recv(fd, buf.data(), buf.size(), 0);
  int e = errno;
  ::close(fd);
  if (n < 0) return Status(Code::kInternal, std::string("RTM_GETROUTE: ") + std::strerror(e));
  Route out;
  int oif = 0;
  for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, static_cast<unsigned>(n));
       h = NLMSG_NEXT(h, n)) {
    if (h->nlmsg_type == NLMSG_ERROR) {
      auto* err = static_cast<nlmsgerr*>(NLMSG_DATA(h));
      return Status(Code::kUnreachable, std::string("no route: ") + std::strerror(-err->error));
    }
    if (h->nlmsg_type != RTM_NEWROUTE) continue;
    auto* r = static_cast<rtmsg*>(NLMSG_DATA(h));
    int len = static_cast<int>(RTM_PAYLOAD(h));
    for (auto* a = RTM_RTA(r); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
      if (a->rta_type == RTA_OIF) std::memcpy(&oif, RTA_DATA(a), sizeof oif);
      if (a->rta_type == RTA_GATEWAY) {
        char b[INET6_ADDRSTRLEN] = {};
        ::inet_ntop(v6 ? AF_INET6 : AF_INET, RTA_DATA(a), b, sizeof b);
        out.gateway = b;
      }
    }
  }
  char name[IF_NAMESIZE] = {};
  if (oif <= 0 || !::if_indextoname(static_cast<unsigned>(oif), name))
    return Status(Code::kNotFound, "the route names no interface");
  out.ifname = name;
  return out;
}

Result<uint32_t> LinkMonitor::mtu_of(const std::string& ifname) {
  auto req = if_ioctl(ifname, SIOCGIFMTU);
  if (!req.ok()) return req.status();
  if (req->ifr_mtu <= 0) return Status(Code::kNotFound, ifname + ": no MTU");
  return static_cast<uint32_t>(req->ifr_mtu);
}

Result<uint32_t> LinkMonitor::speed_of(const std::string& ifname) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Status(Code::kInternal, std::string("socket: ") + std::strerror(errno));
  ethtool_cmd cmd{};
  cmd.cmd = ETHTOOL_GSET;
  ifreq req{};
  std::strncpy(req.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  req.ifr_data = reinterpret_cast<char*>(&cmd);
  int r = ::ioctl(s, SIOCETHTOOL, &req);
  int e = errno;
  ::close(s);
  if (r < 0) return Status(Code::kNotFound, ifname + ": no speed: " + std::strerror(e));
  uint32_t mbit = ethtool_cmd_speed(&cmd);
  if (mbit == 0 || mbit == static_cast<uint32_t>(SPEED_UNKNOWN))
    return Status(Code::kNotFound, ifname + ": speed not known");
  return mbit;
}

Result<bool> LinkMonitor::is_loopback(const std::string& ifname) {
  auto req = if_ioctl(ifname, SIOCGIFFLAGS);
  if (!req.ok()) return req.status();
  return (req->ifr_flags & IFF_LOOPBACK) != 0;
}

Result<LinkMonitor::Counters> LinkMonitor::counters_of(const std::string& ifname) {
  FILE* f = std::fopen("/proc/net/dev", "re");
  if (!f) return Status(Code::kNotFound, std::string("/proc/net/dev: ") + std::strerror(errno));
  char line[512];
  Result<Counters> out = Status(Code::kNotFound, ifname + ": not in /proc/net/dev");
  while (std::fgets(line, sizeof line, f)) {
    // "  eth0: RX bytes packets errs drop fifo frame compressed multicast TX bytes ..."
    char* colon = std::strchr(line, ':');
    if (!colon) continue;
    char* name = line;
    while (*name == ' ') ++name;
    if (std::string(name, colon) != ifname) continue;
    unsigned long long v[9];
    if (std::sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                    &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) == 9)
      out = Counters{v[8], v[0]};
    break;
  }
  std::fclose(f);
  return out;
}

}  // namespace pfsnet
