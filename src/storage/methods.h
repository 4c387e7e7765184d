// The block service's typed RPC methods (protocol.h has their messages), declared once for
// the service and its clients. BLOCK_WRITE and BLOCK_READ, whose bulk is the point, stay on
// the engine's own calls (block_service.cc, striped_file.cc).
// Thread safety: constants.
#pragma once

#include "rpc/msg_types.h"
#include "rpc/rpc_method.h"
#include "storage/protocol.h"

namespace pfsnet {

// A server's block size, target count and capacity; kNotFound where no target is served.
inline const RpcMethod<Empty, BlockInfo> kBlockInfoRpc{.type = kMsgBlockInfo,
                                                       .name = "BLOCK_INFO",
                                                       .exec = Execution::kRepeatable,
                                                       .encode_request = encode_empty,
                                                       .decode_request = decode_empty,
                                                       .encode_reply = encode_block_info,
                                                       .decode_reply = decode_block_info};

}  // namespace pfsnet
