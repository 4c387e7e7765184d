// The membership and probe-mesh RPC methods (protocol.h has their messages and codec),
// each declared once: the MGS serves them, every node calls them.
// Thread safety: constants.
#pragma once

#include "membership/protocol.h"
#include "rpc/rpc_method.h"

namespace pfsnet {

inline const RpcMethod<RegisterReq, RegisterRep> kMgsRegisterRpc{
    .type = kMsgMgsRegister,
    .name = "MGS_REGISTER",
    .exec = Execution::kOnceRestartSafe,
    .encode_request = encode,
    .decode_request = decode_register_req,
    .encode_reply = encode,
    .decode_reply = decode_register_rep};
inline const RpcMethod<PingReq, PingRep> kMgsPingRpc{.type = kMsgMgsPing,
                                                     .name = "MGS_PING",
                                                     .exec = Execution::kOnceRestartSafe,
                                                     .encode_request = encode,
                                                     .decode_request = decode_ping_req,
                                                     .encode_reply = encode,
                                                     .decode_reply = decode_ping_rep};
inline const RpcMethod<ReportReq, PingRep> kMgsReportRpc{.type = kMsgMgsReport,
                                                         .name = "MGS_REPORT",
                                                         .exec = Execution::kOnceRestartSafe,
                                                         .encode_request = encode,
                                                         .decode_request = decode_report_req,
                                                         .encode_reply = encode,
                                                         .decode_reply = decode_ping_rep};
// A page of the MGS's table, in the reply's bulk, built on a worker.
inline const RpcMethod<PageReq, StatusTable> kMgsStatusRpc{.type = kMsgMgsStatus,
                                                           .name = "MGS_STATUS",
                                                           .exec = Execution::kRepeatable,
                                                           .encode_request = encode,
                                                           .decode_request = decode_page_req,
                                                           .encode_reply = encode,
                                                           .decode_reply = decode_status_rep,
                                                           .mode = HandlerMode::kWorker,
                                                           .reply_in = ReplyIn::kBulk};
// The releases of a page of the MGS's table (not in MGS_STATUS: an 8827b49 node decodes
// that to its last byte). An MGS of a release before it answers "no handler".
inline const RpcMethod<PageReq, ReleasesPage> kMgsReleasesRpc{.type = kMsgMgsReleases,
                                                              .name = "MGS_RELEASES",
                                                              .exec = Execution::kRepeatable,
                                                              .encode_request = encode,
                                                              .decode_request = decode_page_req,
                                                              .encode_reply = encode,
                                                              .decode_reply = decode_releases_rep,
                                                              .mode = HandlerMode::kWorker,
                                                              .reply_in = ReplyIn::kBulk};
// The cluster's minimum release level: a check, or a commit that raises it (kept in a file
// or in etcd before the answer). An MGS of a release before it answers "no handler".
inline const RpcMethod<UpgradeReq, UpgradeRep> kMgsUpgradeRpc{.type = kMsgMgsUpgrade,
                                                              .name = "MGS_UPGRADE",
                                                              .exec = Execution::kRepeatable,
                                                              .encode_request = encode,
                                                              .decode_request = decode_upgrade_req,
                                                              .encode_reply = encode,
                                                              .decode_reply = decode_upgrade_rep,
                                                              .mode = HandlerMode::kWorker};
// State changes, acted on by a worker (act_on may close connections).
inline const RpcMethod<NotifyReq, Empty> kMgsNotifyRpc{.type = kMsgMgsNotify,
                                                       .name = "MGS_NOTIFY",
                                                       .exec = Execution::kOnceRestartSafe,
                                                       .encode_request = encode,
                                                       .decode_request = decode_notify_req,
                                                       .encode_reply = encode_empty,
                                                       .decode_reply = decode_empty,
                                                       .mode = HandlerMode::kWorker};
// A notification a server passes on to many clients (MembershipService answers once every
// client answered or its deadline passed).
inline const RpcMethod<RelayReq, RelayRep> kMgsRelayRpc{.type = kMsgMgsRelay,
                                                        .name = "MGS_RELAY",
                                                        .exec = Execution::kOnceRestartSafe,
                                                        .encode_request = encode,
                                                        .decode_request = decode_relay_req,
                                                        .encode_reply = encode,
                                                        .decode_reply = decode_relay_rep};
inline const RpcMethod<MeshSyncReq, MeshSyncRep> kMeshSyncRpc{
    .type = kMsgMeshSync,
    .name = "MESH_SYNC",
    .exec = Execution::kOnceRestartSafe,
    .encode_request = encode,
    .decode_request = decode_mesh_sync_req,
    .encode_reply = encode,
    .decode_reply = decode_mesh_sync_rep};
// A page of the mesh's rows, in the reply's bulk, built on a worker.
inline const RpcMethod<PageReq, MeshMatrix> kMeshMatrixRpc{.type = kMsgMeshMatrix,
                                                           .name = "MESH_MATRIX",
                                                           .exec = Execution::kRepeatable,
                                                           .encode_request = encode,
                                                           .decode_request = decode_page_req,
                                                           .encode_reply = encode,
                                                           .decode_reply = decode_mesh_matrix,
                                                           .mode = HandlerMode::kWorker,
                                                           .reply_in = ReplyIn::kBulk};

}  // namespace pfsnet
