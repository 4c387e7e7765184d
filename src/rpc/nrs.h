// The network request scheduler's policies (Lustre's NRS in ptlrpc; Ceph's mClock): the
// order in which a server hands the requests that have arrived -- after exactly-once
// admission -- to their handlers. `fifo` hands each over as it arrives (what a server did
// before there were policies: the worker pool's queue and the handlers' own queues are
// first come, first served); the server then keeps no state here at all.
//
// `fair` (Lustre's crrn, client round-robin, with mClock's reservation of a slot):
//   flows     a client NID and, when the request names one, its job id: two jobs sharing
//             one client are two flows (LU-7982: jobs starving each other through one
//             client), one job on two clients is two flows.
//   slots     at most `slots` requests are in service at once -- from being handed to
//             their handler until their reply is sent (a worker's run, an asynchronous
//             handler's wait for a buffer or the disk). The rest wait here, each flow in
//             its own queue, arrival order within it.
//   order     when a slot frees, the flows with requests waiting take turns: a flow of
//             weight w (client_weights by NID, job_weights by job id; 1 when named by
//             neither, the job's when both) takes up to w requests a turn.
//   reserve   a flow that has a request in service already takes another only while more
//             slots stay free than other flows present with none in service (present: a
//             request waiting or in service, or one ended within `idle`), counted up to
//             `reserve` (1) and half the slots. So a greedy client with 256 requests in
//             flight leaves a slot free, and the next small request of a client lately
//             heard from goes straight into service instead of waiting for one of the
//             greedy client's to end; alone, the greedy client uses every slot. The price
//             is the slot idle between the small requests: on the manual clock (8 slots,
//             1 MiB at 1 GiB/s, three clients with one small RPC in flight;
//             nrs_sim_test.cc) reserve 0 -- Lustre's crrn -- left the small RPCs' p99 at
//             6.4x their p99 alone and the greedy client 0.97x of its fifo throughput;
//             reserve 1: 1.29x and 0.85x; reserve 2: 1.00x and 0.75x.
//
// Pure: the caller passes the time and keeps the requests (this holds their ids). Memory:
// one entry per flow seen (dropped 10 minutes after its last request) and one per request
// waiting. Threads: none; the owner serialises calls.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pfsnet {

enum class NrsPolicyKind { kFifo, kFair };
const char* nrs_policy_name(NrsPolicyKind k);  // "fifo", "fair"
Result<NrsPolicyKind> parse_nrs_policy(std::string_view name);

struct NrsFlowKey {
  Nid client;
  std::string job;  // "" when the request named none
  bool operator==(const NrsFlowKey&) const = default;
  std::string to_string() const;  // "198.18.0.5@tcp" or "198.18.0.5@tcp job alpha.1"
};

struct NrsFlowKeyHash {
  size_t operator()(const NrsFlowKey& k) const;
};

struct FairShareOptions {
  int slots = 8;
  Duration idle = std::chrono::seconds(1);
  int reserve = 1;
  std::map<std::string, int64_t> client_weights;  // by NID as Nid::to_string() writes it
  std::map<std::string, int64_t> job_weights;
};

// What one flow got from the policy since it was first seen.
struct NrsFlowStats {
  NrsFlowKey key;
  int64_t weight = 1;
  uint64_t requests = 0, bytes = 0;  // handed to their handlers
  // Of those, the ones the policy held (a slot it asked for was refused while it waited),
  // their bytes, and their time here.
  uint64_t held = 0, held_bytes = 0;
  Duration held_total{0}, held_max{0};
  size_t waiting = 0;  // now
  int active = 0;      // in service now
};

class FairShare {
 public:
  explicit FairShare(FairShareOptions o = {});

  // New slots, idle time and weights; requests waiting and in service stay.
  void set_options(FairShareOptions o);
  const FairShareOptions& options() const { return opts_; }

  // A request of `flow` carrying `bytes` (payload and bulk) arrived at `now`; `id` is the
  // caller's name for it.
  void push(const NrsFlowKey& flow, uint64_t bytes, TimePoint now, uint64_t id);
  // The next request the policy lets into service at `now`, if any: in service until
  // done() is called for its flow. `held`: set to whether the policy held it (refused it a
  // slot while it waited).
  std::optional<uint64_t> pop(TimePoint now, bool* held = nullptr);
  // A request of `flow` that pop() gave left service (its reply was sent).
  void done(const NrsFlowKey& flow, TimePoint now);
  // Every request waiting, in arrival order, handed over now whatever the slots (the policy
  // is being replaced, or the server stops); each is in service until done().
  std::vector<uint64_t> drain(TimePoint now);

  size_t waiting() const { return waiting_; }
  int active() const { return active_; }
  // Every flow seen in the last 10 minutes, most held first.
  std::vector<NrsFlowStats> flows() const;

 private:
  struct Waiting {
    uint64_t id, bytes;
    TimePoint arrived;
    uint64_t refusals;  // refusals_ when it came: held when the policy said no since
  };
  struct Flow {
    NrsFlowStats stats;
    std::deque<Waiting> queue;
    int64_t turn_left = 0;  // requests left of its turn
    bool in_ring = false;
    bool idle_listed = false;  // in idle_ (present, nothing waiting or in service)
    std::list<std::pair<TimePoint, NrsFlowKey>>::iterator idle_pos;
    TimePoint last{};  // its last arrival or end
  };
  using Flows = std::unordered_map<NrsFlowKey, Flow, NrsFlowKeyHash>;

  int64_t weight_of(const NrsFlowKey& k) const;
  // Flows whose last request ended more than `idle` before `now` are no longer present;
  // flows silent for 10 minutes go.
  void expire(TimePoint now);
  void unlist_idle(Flow& f);
  // Whether `f`, with a request waiting, may take a free slot now.
  bool may_start(const Flow& f) const;
  // `held`: whether the policy held it.
  uint64_t take(Flow& f, TimePoint now, bool* held = nullptr);
  std::optional<uint64_t> next(TimePoint now, bool* held);

  FairShareOptions opts_;
  Flows flows_;
  std::deque<NrsFlowKey> ring_;  // flows with requests waiting, in turn order
  size_t ring_unserved_ = 0;     // of those, the ones with none in service
  // Present flows with nothing waiting or in service, by when their last request ended.
  std::list<std::pair<TimePoint, NrsFlowKey>> idle_;
  size_t waiting_ = 0;
  uint64_t refusals_ = 0;  // pop() calls that left a request waiting
  int active_ = 0;
  TimePoint swept_{};
};

}  // namespace pfsnet
