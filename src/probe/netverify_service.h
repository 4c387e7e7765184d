// NetverifyService: `pfsnet netverify`'s I/O (the checks and their verdicts are in
// netverify.h). On every node it serves NETVERIFY_INFO (msg 26: its name, wall clock,
// settings, NIs with interface and MTU, and how its kernel routes back to the asker) and
// NETVERIFY_MTU_SEND (msg 27: reverse MTU probes to the asker's address), and answers
// netverify datagrams on each NI's address and port over UDP. run() measures every path
// from this node to the nodes asked for -- by default every other node of the MGS's table
// -- one path after another, each step bounded by the request's timeout.
//
// Threads: start/stop from one thread; run() from any thread (admin sessions; several at
// once are allowed but measure each other); the responder has its own thread.
#pragma once

#include <pfsnet/clock.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "base/live_config.h"
#include "membership/service.h"
#include "net/net.h"
#include "probe/netverify.h"
#include "rpc/node_part.h"
#include "rpc/rpc_engine.h"

namespace pfsnet {

struct NetverifyRequest {
  // Node names of the MGS's table or NIDs; empty: every node of the table but this one.
  std::vector<std::string> nodes;
  NvLimits limits;
  bool bandwidth = true;    // measure bandwidth (the slowest check)
  uint32_t size = 1 << 20;  // bulk RPC size of the bandwidth trains
  int train = 8, trains = 3;
  Duration timeout = std::chrono::seconds(5);  // each RPC, connect and datagram wait
};

struct NetverifyNode {
  std::string name;   // "" when asked by NID alone
  std::string state;  // the MGS's state of it ("" when not from the table)
  std::vector<NvPath> paths;
  std::vector<std::vector<NvCheck>> checks;  // per path
  std::string error;                         // why no path was tried
};

struct NetverifyReport {
  std::string node;  // this node
  std::vector<NetverifyNode> nodes;
  NvLimits limits;
};

class NetverifyService final : public NodePart {
 public:
  // Serves NETVERIFY_INFO and NETVERIFY_MTU_SEND on `rpc` from now on. Everything must
  // outlive the service; `membership` may be null (then nodes must be named by NID).
  NetverifyService(Net& net, RpcEngine& rpc, LiveConfig& cfg, Clock& clock,
                   MembershipService* membership);
  ~NetverifyService() override;
  NetverifyService(const NetverifyService&) = delete;
  NetverifyService& operator=(const NetverifyService&) = delete;

  const char* part_name() const override { return "netverify"; }
  // Starts answering datagrams on each NI's address and port (on a thread of its own: it
  // answers, it does not keep time). An NI whose UDP port cannot be bound is logged and
  // left out (its forward MTU probes then fail at the asker).
  Status start(TimerQueue& queue) override;
  void stop() override;

  Result<NetverifyReport> run(const NetverifyRequest& req);

 private:
  void respond();
  NvPath measure(const NetverifyRequest& req, const std::string& name, const NetConfig& local,
                 const Nid& peer);

  Net& net_;
  RpcEngine& rpc_;
  LiveConfig& cfg_;
  Clock& clock_;
  MembershipService* membership_;
  std::vector<int> fds_;  // the responder's sockets; set before its thread starts
  std::atomic<bool> stop_{false};
  std::thread responder_;
  std::atomic<uint64_t> next_token_{1};
};

}  // namespace pfsnet
