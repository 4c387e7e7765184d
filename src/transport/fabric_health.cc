// fabric_health_kind: see fabric_health.h.
#include "transport/fabric_health.h"

#include <cerrno>

namespace pfsnet {

HealthKind fabric_health_kind(FabricSite site, int err) {
  if (err < 0) err = -err;
  switch (err) {
    case ENODEV:
    case ENETDOWN:
      return HealthKind::kLocalNiDown;  // the device (or its port) is gone
    case ECANCELED:
      return HealthKind::kNone;  // flushed by a close of ours
    default:
      break;
  }
  if (site == FabricSite::kConnect) {
    switch (err) {
      case ENODATA:
      case EADDRNOTAVAIL:
      case EAFNOSUPPORT:
      case EINVAL:
        return HealthKind::kPeerNiAddrError;
      case EHOSTUNREACH:
      case ENETUNREACH:
      case ETIMEDOUT:
      case EHOSTDOWN:
        return HealthKind::kPeerNiUnreachable;
      case ECONNREFUSED:
        return HealthKind::kPeerNiConnectionRejected;
      default:
        return HealthKind::kPeerNiConnectError;
    }
  }
  switch (err) {
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
      return HealthKind::kPeerNiUnreachable;
    default:
      return HealthKind::kPeerNiConnectError;
  }
}

std::string_view fabric_site_name(FabricSite site) {
  return site == FabricSite::kConnect ? "connect" : "completion";
}

}  // namespace pfsnet
