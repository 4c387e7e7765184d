// The message types of pfsnet's own services: every id and name in one table, so two
// services can never share an id (msg_types_test checks the table) and every node names
// the types alike in statistics and errors. PING and BRW_* are public
// (<pfsnet/msg_types.h>); the rest are internal. Ids from kMsgFirstUser up are the
// applications' own (RpcEngine::handle / define_type).
// Thread safety: constants.
#pragma once

#include <pfsnet/msg_types.h>

#include <cstdint>
#include <string_view>

namespace pfsnet {

// membership/protocol.h: the scalable pinger.
inline constexpr uint32_t kMsgMgsRegister = 16;
inline constexpr uint32_t kMsgMgsPing = 17;
inline constexpr uint32_t kMsgMgsNotify = 18;
inline constexpr uint32_t kMsgMgsStatus = 19;
inline constexpr uint32_t kMsgMgsReport = 22;
inline constexpr uint32_t kMsgMgsRelay = 39;  // a notification a server passes on to clients
// The release each node of the MGS's table named in its handshake (wire version 2): not
// in MGS_STATUS, which a node of 8827b49 decodes to its last byte.
inline constexpr uint32_t kMsgMgsReleases = 41;
// The cluster's minimum release level: checked against the table, or raised (issue 69).
inline constexpr uint32_t kMsgMgsUpgrade = 42;
// probe/mesh_service.h: the probe mesh (rows to the MGS, the matrix from it, the probes).
inline constexpr uint32_t kMsgMeshSync = 23;
inline constexpr uint32_t kMsgMeshMatrix = 24;
inline constexpr uint32_t kMsgMeshProbe = 25;
// probe/netverify_service.h: what a node says of itself, and reverse MTU probes.
inline constexpr uint32_t kMsgNetverifyInfo = 26;
inline constexpr uint32_t kMsgNetverifyMtuSend = 27;
// probe/cluster_health_service.h: a node's own problems to the MGS, and every node's back.
inline constexpr uint32_t kMsgHealthReport = 28;
inline constexpr uint32_t kMsgHealthCluster = 29;
// probe/health_mutes.h: the cluster's muted problems, kept by the MGS (issue 70).
inline constexpr uint32_t kMsgHealthMute = 43;
// health/view.h: the cluster's list judged at the MGS (probe/health_list.h; issue 70).
inline constexpr uint32_t kMsgHealthList = 44;
// rpc/router_pinger.h: is a gateway alive, does it route, which of its NIs are up (issue 71).
inline constexpr uint32_t kMsgRouterPing = 45;
// selftest/selftest.h: one client's share of a self-test step.
inline constexpr uint32_t kMsgSelftestRun = 20;
// tune/tune.h: the packet-train probe.
inline constexpr uint32_t kMsgTuneProbe = 21;

// storage/block_service.h: the block server. The last two are not sent: the block server
// records its buffer waits and its targets' transfer times under them, beside its
// messages' execution times, so `diag rpc message` shows them with the same intervals.
inline constexpr uint32_t kMsgBlockInfo = 30;
inline constexpr uint32_t kMsgBlockWrite = 31;
inline constexpr uint32_t kMsgBlockRead = 32;
inline constexpr uint32_t kMsgBlockBufferWait = 33;
inline constexpr uint32_t kMsgBlockDisk = 34;
inline constexpr uint32_t kMsgIobench = 35;  // pfsnet bench gpfs: a client's share of a cell
// storage/tokens.h: byte-range write tokens.
inline constexpr uint32_t kMsgTokenAcquire = 36;
inline constexpr uint32_t kMsgTokenRevoke = 37;
inline constexpr uint32_t kMsgTokenRelease = 38;

// rpc/reply_cache.h: a client's word that it is finished with requests (the engine's own).
inline constexpr uint32_t kMsgRpcDone = 4;
// rpc/rpc_server.h: not sent; a server records under it how long each request a worker ran
// waited for one, so `diag rpc` shows the queue beside the execution times.
inline constexpr uint32_t kMsgRpcQueue = 40;

// The cluster watching itself: the pinger's, the probe mesh's, netverify's, cluster health's
// and the tuner's messages, and the engine's own RPC_DONE. How late they are is what those
// services report (DEAD and SUSPECT, the mesh's cells, netverify's verdicts), so SLOW_OPS
// sets none of them against its type's p99 (a mesh probe waiting for a connection to a node
// that just died is that node's DEAD, not every prober's SLOW_OPS).
constexpr bool monitoring_msg(uint32_t type) {
  switch (type) {
    case kMsgMgsRegister:
    case kMsgMgsPing:
    case kMsgMgsNotify:
    case kMsgMgsStatus:
    case kMsgMgsReport:
    case kMsgMgsRelay:
    case kMsgMgsReleases:
    case kMsgMeshSync:
    case kMsgMeshMatrix:
    case kMsgMeshProbe:
    case kMsgNetverifyInfo:
    case kMsgNetverifyMtuSend:
    case kMsgHealthReport:
    case kMsgHealthCluster:
    case kMsgHealthMute:
    case kMsgHealthList:
    case kMsgRouterPing:
    case kMsgTuneProbe:
    case kMsgRpcDone:
      return true;
    default:
      return false;
  }
}

// The requests a server's scheduling policy (rpc/nrs.h) orders: the data path's -- self-test
// BRW, the block service's reads and writes and its info -- and every application type.
// Not the rest: the cluster watching itself (monitoring_msg) and PING must not queue
// behind a busy client's work, and SELFTEST_RUN, IOBENCH and the token messages wait for
// other requests (a whole test's, a revoked token's release) that the policy could hold
// behind them.
constexpr bool nrs_scheduled(uint32_t type) {
  return type == kMsgBrwWrite || type == kMsgBrwRead || type == kMsgBlockWrite ||
         type == kMsgBlockRead || type == kMsgBlockInfo || type >= kMsgFirstUser;
}

struct MsgType {
  uint32_t id;
  std::string_view name;
};

inline constexpr MsgType kMsgTypes[] = {
    {kMsgPing, "PING"},
    {kMsgBrwWrite, "BRW_WRITE"},
    {kMsgBrwRead, "BRW_READ"},
    {kMsgMgsRegister, "MGS_REGISTER"},
    {kMsgMgsPing, "MGS_PING"},
    {kMsgMgsNotify, "MGS_NOTIFY"},
    {kMsgMgsStatus, "MGS_STATUS"},
    {kMsgMgsReport, "MGS_REPORT"},
    {kMsgMgsRelay, "MGS_RELAY"},
    {kMsgMgsReleases, "MGS_RELEASES"},
    {kMsgMgsUpgrade, "MGS_UPGRADE"},
    {kMsgMeshSync, "MESH_SYNC"},
    {kMsgMeshMatrix, "MESH_MATRIX"},
    {kMsgMeshProbe, "MESH_PROBE"},
    {kMsgNetverifyInfo, "NETVERIFY_INFO"},
    {kMsgNetverifyMtuSend, "NETVERIFY_MTU_SEND"},
    {kMsgHealthReport, "HEALTH_REPORT"},
    {kMsgHealthCluster, "HEALTH_CLUSTER"},
    {kMsgHealthMute, "HEALTH_MUTE"},
    {kMsgHealthList, "HEALTH_LIST"},
    {kMsgRouterPing, "ROUTER_PING"},
    {kMsgSelftestRun, "SELFTEST_RUN"},
    {kMsgTuneProbe, "TUNE_PROBE"},
    {kMsgBlockInfo, "BLOCK_INFO"},
    {kMsgBlockWrite, "BLOCK_WRITE"},
    {kMsgBlockRead, "BLOCK_READ"},
    {kMsgBlockBufferWait, "BLOCK_BUFFER_WAIT"},
    {kMsgBlockDisk, "BLOCK_DISK"},
    {kMsgIobench, "IOBENCH"},
    {kMsgTokenAcquire, "TOKEN_ACQUIRE"},
    {kMsgTokenRevoke, "TOKEN_REVOKE"},
    {kMsgTokenRelease, "TOKEN_RELEASE"},
    {kMsgRpcDone, "RPC_DONE"},
    {kMsgRpcQueue, "RPC_QUEUE"},
};

// The registered name of `id`; empty when it is not one of pfsnet's own.
constexpr std::string_view msg_type_name(uint32_t id) {
  for (const MsgType& t : kMsgTypes)
    if (t.id == id) return t.name;
  return {};
}

}  // namespace pfsnet
