// fabric_health_kind: see fabric_health.h.
#include "transport/fabric_health.h"

#include <cerrno>

#include "transport/tcp_transport.h"

namespace pfsnet {

// What the fabric says differently from a socket's errno (health_kind_for_errno, shared
// with the TCP LND, decides the rest): a removed device, our own flush, a rejection by
// the connection manager, an address the CM could not resolve, and no ack on an open
// connection.
HealthKind fabric_health_kind(FabricSite site, int err) {
  if (err < 0) err = -err;
  if (err == ENODEV) return HealthKind::kLocalNiDown;  // DEVICE_REMOVAL
  if (err == ECANCELED) return HealthKind::kNone;      // flushed by a close of ours
  if (site == FabricSite::kConnect) {
    if (err == ECONNREFUSED) return HealthKind::kPeerNiConnectionRejected;  // REJECTED
    if (err == ENODATA) return HealthKind::kPeerNiAddrError;                // ADDR_ERROR
  } else if (err == EHOSTDOWN || err == EINVAL || err == EADDRNOTAVAIL || err == EAFNOSUPPORT ||
             err == EADDRINUSE) {
    return HealthKind::kPeerNiConnectError;  // not address errors on an open connection
  }
  return health_kind_for_errno(err);
}

std::string_view fabric_site_name(FabricSite site) {
  return site == FabricSite::kConnect ? "connect" : "completion";
}

}  // namespace pfsnet
