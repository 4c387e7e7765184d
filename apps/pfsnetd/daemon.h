// Daemon: one pfsnet node as pfsnetd runs it. Wiring only: it builds the node's core
// (rpc/node_core.h) and its services on it (membership, the probe mesh, cluster health,
// netverify, tuning, storage, self-test), hands them to the admin command table and the
// HTTP routes, and follows the NIs' links.
// Threads: start() and stop() from the main thread; the parts have their own.
#pragma once

#include <pfsnet/clock.h>

#include <map>
#include <memory>

#include "admin/admin_commands.h"
#include "admin/admin_server.h"
#include "admin/http_server.h"
#include "admin/node_commands.h"
#include "base/live_config.h"
#include "membership/service.h"
#include "net/net.h"
#include "probe/mesh_service.h"
#include "probe/netverify_service.h"
#include "rpc/node_core.h"
#include "storage/block_service.h"
#include "storage/iobench.h"
#include "storage/tokens.h"
#include "transport/link_monitor.h"
#include "tune/tune_service.h"

namespace pfsnet {

class Daemon {
 public:
  // `keys`: load_cluster_keys of node.cluster_key_file.
  Daemon(Config cfg, ClusterKeys keys);
  ~Daemon();

  Status start();
  // Cancels new and pending RPCs, finishes admin sessions, closes connections, removes the
  // admin socket. Bounded by transaction_timeout.
  void stop();

  // SIGHUP: re-reads `path`. A broken file is refused (logged) and the old settings stay;
  // otherwise the keys that can change at run time are applied and the others are logged
  // as waiting for a restart. The cluster keys are read again too (a rotation's next key
  // taken in, a commit, a retirement): the next handshakes use them; a broken key file is
  // refused (logged) and the old keys stay.
  Status reload(const std::string& path);

 private:
  // Maps each local NI to its interface and follows their link state.
  void watch_links();

  LiveConfig cfg_;
  Status init_;  // what building the transport options found wrong (start() returns it)
  TransportOptions transport_;  // its cluster_key is the ring every transport holds
  // Clock, statistics, Net, the RPC engine, pinger, health monitor and their driver.
  std::unique_ptr<NodeCore> core_;
  Clock& clock_;
  RpcStats& stats_;
  Net& net_;
  RpcEngine& rpc_;
  std::unique_ptr<MembershipService> membership_;
  std::unique_ptr<MeshService> mesh_;  // its probes' callbacks use it: stopped with rpc_
  std::unique_ptr<NetverifyService> netverify_;
  std::unique_ptr<ClusterHealthService> cluster_health_;
  std::unique_ptr<TuneService> tune_;
  std::unique_ptr<BlockService> storage_;    // after rpc_: its replies go through it
  std::unique_ptr<TokenService> tokens_;     // likewise
  std::unique_ptr<IobenchService> iobench_;  // likewise; uses tokens_
  AdminCommands commands_;
  std::unique_ptr<NodeParts> parts_;
  std::unique_ptr<AdminServer> admin_;
  std::unique_ptr<HttpServer> http_;
  LinkMonitor links_;
  std::map<std::string, std::vector<Nid>> ni_ifaces_;  // interface -> local NIs on it
  bool stopped_ = false;
};

}  // namespace pfsnet
