// pfsnet::Node: a pfsnet node inside an application, wired from a Config -- its NIs over
// TCP (under the decorator that holds frames for link emulation and fault delays),
// credits, health and multi-rail, the RPC engine with PING served, the GPFS-style RPC
// statistics and the node's timers. What examples/ping_client and an application need;
// pfsnetd adds the admin socket, membership and tuning on top of the same parts.
//
// Threads: every function from any thread; handlers and async callbacks run on I/O or
// worker threads and must not block (HandlerMode::kWorker handlers may).
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/config.h>
#include <pfsnet/msg_types.h>
#include <pfsnet/ni_info.h>
#include <pfsnet/nid.h>
#include <pfsnet/rpc.h>
#include <pfsnet/stats.h>
#include <pfsnet/status.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pfsnet {

class Node {
 public:
  // Builds a node on every [[net]] NI of `cfg` (at least one), authenticating peers with
  // `cluster_key` (at least 16 bytes; load_cluster_key reads a key file), without
  // listening yet: register the handlers, then listen(). A node serves a message type from
  // its first connection on, so no peer is ever told "no handler" for one it serves while
  // it starts (a permanent NOT_FOUND its client would not resend). Errors: no NI, a short
  // key, a bad [tls] setting.
  static Result<std::unique_ptr<Node>> create(const Config& cfg, std::string cluster_key);
  // Listens on every NI and starts the node's timers; until then calls fail and peers'
  // connects are refused (PEER_NI_CONNECT_ERROR: resent within their deadline). Errors: an
  // address that cannot be bound; a stopped node. Idempotent.
  Status listen();
  // create() and listen() in one, for a node that serves only PING or registers its
  // handlers before any peer knows of it.
  static Result<std::unique_ptr<Node>> start(const Config& cfg, std::string cluster_key);
  // Stops: pending RPCs fail with kCancelled, connections close. Idempotent.
  void stop();
  ~Node();

  // Serves `type` (kMsgFirstUser and up for an application's own). A request runs once
  // however often the network delivers it, unless `exec` is kRepeatable (see
  // Execution). REQUIRES: before listen() (or, after it, before any peer can send that
  // type: the handler table is not guarded against a request being served).
  void handle(uint32_t type, std::string name, Handler h, HandlerMode mode,
              Execution exec = Execution::kOnce);

  // An RPC to the node owning `dst`: a reply or an error within opts.timeout (default
  // lnet.transaction_timeout), resent on another rail where there is one.
  RpcReply call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk = nullptr,
                CallOptions opts = {});
  void call_async(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                  std::function<void(RpcReply&&)> done, CallOptions opts = {});

  const std::vector<Nid>& nids() const;
  std::vector<NiInfo> nis() const;
  std::vector<NiInfo> peers() const;
  // The RPC statistics this node kept (as `pfsnet diag rpc` shows a daemon's).
  StatsReport stats(const StatsQuery& q) const;

 private:
  struct Impl;
  explicit Node(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pfsnet
