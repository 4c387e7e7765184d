// Status and Result<T>: network failures are expected outcomes and travel as values.
// A Status carries a Code telling the caller what to do and, where the failure is a
// network health event, the LNet health error kind (LNet health, docs/sources.md).
// Thread safety: plain values; copy freely.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace pfsnet {

// LNet health error kinds (LNet health design). kNone when the failure is not a
// health event (bad argument, remote handler error, ...).
enum class HealthKind : unsigned char {
  kNone = 0,
  kLocalNiDown,
  kLocalNiUp,
  kLocalNiSendTimeout,
  kPeerNiAddrError,
  kPeerNiUnreachable,
  kPeerNiConnectError,
  kPeerNiConnectionRejected,
  // Beyond LNet's kinds: a message from the peer NI failed its data checksum (payload and
  // bulk, wire/data_crc.h) -- something between the two ends damages bytes.
  kPeerNiCorrupt,
};
inline constexpr int kNumHealthKinds = 9;
// "LOCAL_NI_SEND_TIMEOUT" etc.; "NONE" for kNone.
std::string_view health_kind_name(HealthKind k);

enum class Code : unsigned char {
  kOk = 0,
  kInvalidArgument,  // caller's mistake; do not retry
  kTimeout,          // deadline passed; may retry elsewhere
  kUnreachable,      // could not reach the peer (connect failed, no route)
  kRejected,         // peer refused us (authentication, protocol version)
  kClosed,           // connection closed while the operation was in flight
  kCancelled,        // shut down locally
  kProtocol,         // malformed input from the peer
  kNotFound,         // unknown peer, message type, key
  kRemoteError,      // the remote handler failed
  kInternal,         // a bug
  kPeerDead,         // the MGS declared the peer dead; no attempt is made until it returns
  kCorrupt,          // data failed its checksum on the way (resent; this after the last try)
  // The server cannot tell whether the request ran (its record of the client's requests
  // went: the client was evicted or silent past rpc.reply_cache_idle, or a block write
  // older than its target's last_rcvd): not run again. Not a failure: it may have run.
  kOutcomeUnknown,
};
std::string_view code_name(Code c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string msg, HealthKind kind = HealthKind::kNone)
      : code_(code), kind_(kind), msg_(std::move(msg)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  HealthKind health_kind() const { return kind_; }
  const std::string& message() const { return msg_; }
  // "TIMEOUT (LOCAL_NI_SEND_TIMEOUT): message" or "OK".
  std::string to_string() const;

 private:
  Code code_ = Code::kOk;
  HealthKind kind_ = HealthKind::kNone;
  std::string msg_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}                        // NOLINT: implicit by design
  Result(Status s) : status_(std::move(s)) { assert(!status_.ok()); }  // NOLINT

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  T value_or(T other) const& { return ok() ? *value_ : std::move(other); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace pfsnet
