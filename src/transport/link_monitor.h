// LinkMonitor: the kernel's link state through rtnetlink (RTMGRP_LINK), so the daemon
// can mark a local NI down when its interface goes down and up when it comes back
// (LNet health's LOCAL_NI_DOWN / LOCAL_NI_UP). A link is up when it is administratively
// up and has carrier (IFF_UP and IFF_RUNNING).
// Threads: the callback runs on the monitor's own thread; start/stop from one thread.
#pragma once

#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

namespace pfsnet {

class LinkMonitor {
 public:
  using Callback = std::function<void(const std::string& ifname, bool up)>;

  LinkMonitor() = default;
  ~LinkMonitor();
  LinkMonitor(const LinkMonitor&) = delete;
  LinkMonitor& operator=(const LinkMonitor&) = delete;

  // Opens the netlink socket and starts the thread. `cb` is told of every link message
  // (new link state); it must not block.
  Status start(Callback cb);
  // Stops the thread; returns within ~200 ms.
  void stop();

  // The interface that holds the address of `nid` (IPv4 or IPv6), e.g. "veth0".
  static Result<std::string> interface_of(const Nid& nid);
  // Whether `ifname` is up with carrier now.
  static Result<bool> link_up(const std::string& ifname);
  // Its MTU now (bytes of an IP packet).
  static Result<uint32_t> mtu_of(const std::string& ifname);
  // Its speed as the kernel (ethtool) reports it, Mbit/s; kNotFound when the driver does
  // not know one (loopback, TUN).
  static Result<uint32_t> speed_of(const std::string& ifname);
  // Whether it is a loopback interface (whose counters every address on it shares).
  static Result<bool> is_loopback(const std::string& ifname);
  // The bytes it sent and received, as /proc/net/dev of this network namespace says.
  struct Counters {
    uint64_t tx_bytes = 0, rx_bytes = 0;
  };
  static Result<Counters> counters_of(const std::string& ifname);
  // Where the kernel sends a packet from `src` to `dst` (the addresses of two NIDs of one
  // family), as `ip route get DST from SRC` says: the interface, and the gateway ("" when
  // direct).
  struct Route {
    std::string ifname, gateway;
  };
  static Result<Route> route_to(const Nid& dst, const Nid& src);

 private:
  void run();

  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  Callback cb_;
};

}  // namespace pfsnet
