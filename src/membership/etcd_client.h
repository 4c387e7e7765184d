// EtcdClient: the few etcd v3 calls MGS leadership needs (leader_lease.h), over etcd's
// HTTP/JSON gateway (/v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke, /v3/kv/txn).
// HTTP/JSON rather than gRPC: cpp-httplib and nlohmann-json are already dependencies, the
// gateway is on etcd's client port in every 3.x, and these calls are a few a second --
// gRPC would add protobuf, gRPC and generated code for them.
//
// Endpoints: "http://host:port" (or "host:port"); a call that cannot reach one tries the
// next, and the client keeps to the one that answered. Every call is bounded by `timeout`
// per endpoint. Keys and values are bytes (base64 on the wire, as the gateway wants).
//
// Thread safety: none; one thread makes the calls (they block).
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "membership/leader_lease.h"

namespace pfsnet {

class EtcdClient {
 public:
  // Invalid endpoints (empty list, not http://, no port): an error.
  static Result<std::unique_ptr<EtcdClient>> create(const std::vector<std::string>& endpoints,
                                                    Duration timeout);
  ~EtcdClient();

  struct Grant {
    int64_t lease = 0;
    Duration ttl{};
  };
  Result<Grant> grant(Duration ttl);
  // The lease's TTL as etcd answered (renewed); zero when it does not exist any more.
  Result<Duration> keepalive(int64_t lease);
  Status revoke(int64_t lease);
  // Creates `key` = `value` on `lease` if `key` does not exist; else reads it.
  Result<LeaderLease::Campaign> campaign(const std::string& key, const std::string& value,
                                         int64_t lease);
  // Puts every (key, value) in one transaction (at most 64), only while `leader_key` was
  // created at revision `epoch` (its holder still leads): kRejected otherwise.
  Status put_if_leader(const std::string& leader_key, uint64_t epoch,
                       const std::vector<std::pair<std::string, std::string>>& kvs);
  // Every key under `prefix` and its value, in key order (page by page).
  Result<std::vector<std::pair<std::string, std::string>>> range_prefix(const std::string& prefix);
  // The endpoint that answered last ("host:port").
  std::string endpoint() const;

 private:
  struct Endpoint;
  explicit EtcdClient(std::vector<std::unique_ptr<Endpoint>> eps);
  // POSTs `body` to `path` on the current endpoint, then the others: the JSON answer.
  Result<std::string> post(const std::string& path, const std::string& body);

  std::vector<std::unique_ptr<Endpoint>> eps_;
  size_t cur_ = 0;
};

// Base64 (RFC 4648, padded), as etcd's gateway carries bytes; decode: nullopt if malformed.
std::string base64_encode(const std::string& s);
std::optional<std::string> base64_decode(const std::string& s);

}  // namespace pfsnet
