// What an RPC engine's client and server sides share: its options (rpc.* and lnet.* of a
// node's config) and the names of its message types. Not installed.
// Thread safety: RpcOptions is a value. TypeNames is written before traffic starts
// (RpcEngine::define_type / handle) and only read after.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/config.h>
#include <pfsnet/nid.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rpc/nrs.h"
#include "rpc/op_tracker.h"
#include "rpc/reply_cache.h"
#include "rpc/waiter.h"

namespace pfsnet {

struct RpcOptions {
  int64_t max_rpcs_in_flight = 8;
  int workers = 2;
  Duration default_timeout = std::chrono::seconds(50);
  uint32_t max_bulk = 2 * 1024 * 1024;
  // A blocking call() spins this long for its reply before sleeping (one caller at a
  // time); a reply within it costs no thread wake-up. 0 disables spinning.
  std::chrono::microseconds spin{100};
  // Then it waits on its connection's socket and takes the reply itself (Net::receive_here:
  // TCP, one path to the target), so the reply wakes only the caller, not the I/O thread
  // and then the caller. False: it sleeps until the I/O thread hands the reply over.
  bool receive_here = true;
  // Exactly-once execution (rpc/reply_cache.h): what the server keeps per client
  // incarnation, and this engine's own incarnation as a client (0: a random one).
  ReplyCacheOptions replay;
  uint64_t incarnation = 0;
  // Resends (LNet health): a request whose attempt fails on the network (send failed,
  // connection closed before the reply, no reply within the attempt's deadline) is sent
  // again -- on another path when there is a healthier one -- up to retry_count times
  // within its timeout. Each attempt gets timeout / (retry_count + 1).
  int64_t retry_count = 2;
  // Targets with a max_rpcs_in_flight of their own (rpc.peer_rpcs_in_flight), by the NID
  // RPCs are addressed to.
  std::vector<std::pair<Nid, int64_t>> peer_rpcs_in_flight;
  // How blocking callers wait for completions (rpc/waiter.h); it outlives the engine.
  // Null: a condition variable on the net's clock. The in-process cluster gives its own.
  Waiter* waiter = nullptr;
  // The op tracker's history (rpc/op_tracker.h): the slowest RPCs of a window, each end's.
  OpHistoryOptions ops_history;
  // The job id of a call whose CallOptions name none (rpc.jobid_var, rpc.jobid_name
  // resolved in this process: base/job_id.h); "" for none.
  std::string default_job_id;
  // The request scheduling policy as a server (rpc/nrs.h): its kind and, for fair, the
  // slots of asynchronous handlers (worker handlers' are `workers`), idle time and weights.
  NrsPolicyKind nrs_policy = NrsPolicyKind::kFifo;
  FairShareOptions nrs;

  // max_rpcs_in_flight (and per peer), the default timeout (transaction_timeout), max_bulk
  // (2 x maxBlockSize) and retry_count of a node's config.
  static RpcOptions from(const Config& cfg);
  // One attempt's share of the default timeout: what a single ping (recovery, probe) gets.
  Duration attempt_timeout() const { return default_timeout / (retry_count + 1); }
};

// The names of message types, for statistics and errors: pfsnet's own (rpc/msg_types.h)
// from the start, an application's as it defines or serves them.
class TypeNames {
 public:
  TypeNames();
  // REQUIRES: `type` is not one of pfsnet's own under another name.
  void define(uint32_t type, std::string name);
  // "PING", or "type-N" for an unnamed type.
  std::string name(uint32_t type) const;
  // The type named `name`, or 0.
  uint32_t by_name(std::string_view name) const;

 private:
  std::unordered_map<uint32_t, std::string> names_;
};

}  // namespace pfsnet
