#include "rpc/recovery_pinger.h"

#include "base/log.h"
#include "rpc/msg_types.h"

namespace pfsnet {

void RecoveryPinger::run(TimePoint now) {
  for (const RecoveryTarget& t : net_.recovery_due(now)) {
    sent_.fetch_add(1);
    PFS_LOG_DEBUG("recovery ping {} -> {} (recovering the {} NI)", t.local.to_string(),
                  t.peer.to_string(), t.for_local_ni ? "local" : "peer");
    CallOptions o;
    o.timeout = timeout_;
    o.via = std::make_pair(t.local, t.peer);
    rpc_.call_async(
        t.peer, kMsgPing, Buffer{}, nullptr,
        [this, t](RpcReply&& r) {
          if (r.status.ok()) {
            answered_.fetch_add(1);
            PFS_LOG_INFO("recovery ping {} -> {} answered", t.local.to_string(),
                         t.peer.to_string());
          } else {
            PFS_LOG_DEBUG("recovery ping {} -> {} failed: {}", t.local.to_string(),
                          t.peer.to_string(), r.status.to_string());
          }
        },
        o);
  }
}

}  // namespace pfsnet
