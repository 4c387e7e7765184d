#include <pfsnet/status.h>

namespace pfsnet {

std::string_view health_kind_name(HealthKind k) {
  switch (k) {
    case HealthKind::kNone:
      return "NONE";
    case HealthKind::kLocalNiDown:
      return "LOCAL_NI_DOWN";
    case HealthKind::kLocalNiUp:
      return "LOCAL_NI_UP";
    case HealthKind::kLocalNiSendTimeout:
      return "LOCAL_NI_SEND_TIMEOUT";
    case HealthKind::kPeerNiAddrError:
      return "PEER_NI_ADDR_ERROR";
    case HealthKind::kPeerNiUnreachable:
      return "PEER_NI_UNREACHABLE";
    case HealthKind::kPeerNiConnectError:
      return "PEER_NI_CONNECT_ERROR";
    case HealthKind::kPeerNiConnectionRejected:
      return "PEER_NI_CONNECTION_REJECTED";
    case HealthKind::kPeerNiCorrupt:
      return "PEER_NI_CORRUPT";
  }
  return "UNKNOWN";
}

std::string_view code_name(Code c) {
  switch (c) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::kTimeout:
      return "TIMEOUT";
    case Code::kUnreachable:
      return "UNREACHABLE";
    case Code::kRejected:
      return "REJECTED";
    case Code::kClosed:
      return "CLOSED";
    case Code::kCancelled:
      return "CANCELLED";
    case Code::kProtocol:
      return "PROTOCOL_ERROR";
    case Code::kNotFound:
      return "NOT_FOUND";
    case Code::kRemoteError:
      return "REMOTE_ERROR";
    case Code::kPeerDead:
      return "PEER_DEAD";
    case Code::kInternal:
      return "INTERNAL";
    case Code::kOutcomeUnknown:
      return "OUTCOME_UNKNOWN";
    case Code::kCorrupt:
      return "CORRUPT";
  }
  return "UNKNOWN";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string s(code_name(code_));
  if (kind_ != HealthKind::kNone) {
    s += " (";
    s += health_kind_name(kind_);
    s += ")";
  }
  if (!msg_.empty()) {
    s += ": ";
    s += msg_;
  }
  return s;
}

}  // namespace pfsnet
