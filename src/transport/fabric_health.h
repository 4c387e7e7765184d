// What a fabric error says about health (LNet health, docs/sources.md): the connection manager's
// events and the completion errors of posted operations, as libfabric reports them (an errno),
// mapped to the LNet health kinds. Used by the fabric transport where it reads its event and
// completion queues; the table is in docs/rdma.md.
//
//   where        rdma_cm event / verbs status          libfabric err         kind
//   connecting   ADDR_ERROR (address resolution)       ENODATA EADDRNOTAVAIL PEER_NI_ADDR_ERROR
//                                                      EAFNOSUPPORT EINVAL
//   connecting   ROUTE_ERROR, UNREACHABLE              EHOSTUNREACH          PEER_NI_UNREACHABLE
//                                                      ENETUNREACH ETIMEDOUT
//                                                      EHOSTDOWN
//   connecting   REJECTED                              ECONNREFUSED PEER_NI_CONNECTION_REJECTED
//   connecting   CONNECT_ERROR                         ECONNABORTED ENOTCONN PEER_NI_CONNECT_ERROR
//                                                      ECONNRESET (others)
//   either       DEVICE_REMOVAL                        ENODEV ENETDOWN       LOCAL_NI_DOWN
//   completion   RETRY_EXC / RNR_RETRY_EXC (no ack)    ETIMEDOUT             PEER_NI_UNREACHABLE
//   completion   connection reset / remote error       ECONNRESET EPIPE EIO  PEER_NI_CONNECT_ERROR
//                                                      (others)
//   completion   flushed by our own close              ECANCELED             none
//   -            ADDR_CHANGE                           (not reported)        none: like LNet, the
//                                                                            link monitor decides
//
// LOCAL_NI_DOWN takes the NI out of selection until its link comes back up (the link
// monitor's LOCAL_NI_UP); every other kind demerits the peer NI, and recovery pings
// restore it.
// Pure functions.
#pragma once

#include <pfsnet/status.h>

#include <string_view>

namespace pfsnet {

enum class FabricSite : unsigned char {
  kConnect,     // an error event of the connection manager while connecting
  kCompletion,  // a posted send, receive or RMA completed in error
};

HealthKind fabric_health_kind(FabricSite site, int err);
std::string_view fabric_site_name(FabricSite site);

}  // namespace pfsnet
