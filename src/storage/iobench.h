// The GPFS paper's benchmark (the GPFS 1.4 paper, "pfsnet bench gpfs"): N client nodes x T threads,
// each thread issuing R sequential requests of S bytes to its own segment of one shared
// striped file -- thread g of the job (node i, thread t: g = i x T + t) owns bytes
// [g x R x S, (g + 1) x R x S) -- after a barrier; the job time runs from the first
// thread's start to the last one's end, and the figure is all bytes / job time.
//
// The node that runs the command coordinates with IOBENCH RPCs to the client nodes'
// daemons, per cell of the matrix and per operation:
//   prepare  the client opens the file (a fresh pagepool: nothing cached) and starts its T
//            threads, which wait at the barrier; it answers when they are ready
//   go       sent to every client once all are ready: the threads run; the answer comes
//            when the last one ends, with the node's first start and last end (wall clock,
//            as the paper's tasks reported theirs) and its CPU time over the run
//   cpu      any node (a server): its process CPU time so far, read before and after
// A write request's 16 first bytes carry its offset, which the read that follows it in
// the same cell checks. A write ends when the node's flush returns: the figure counts data
// the servers acknowledged, not data in the pagepool.
//
// iobench.cc has the messages, the spec and the coordinator; iobench_service.cc a client
// node's side.
// Threads: IobenchService answers on RPC threads and runs jobs on threads of its own
// (joined by stop or its destructor); run_iobench blocks its caller for the whole matrix.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "rpc/node_part.h"
#include "rpc/rpc_method.h"
#include "storage/striped_file.h"

namespace pfsnet {

// One IOBENCH request: a client's share of a cell, or a CPU reading.
struct IobenchRequest {
  static constexpr int kMaxThreads = 256;
  static constexpr size_t kMaxServers = 1024;
  std::string phase = "prepare";  // "prepare", "go" or "cpu"
  uint64_t job = 0;
  std::string file;            // prepare: the striped file
  std::vector<Nid> servers;    // prepare: its layout (1..kMaxServers)
  std::string op = "write";    // prepare: "write" or "read"
  int threads = 1;             // prepare: 1..kMaxThreads
  uint64_t requests = 1;       // prepare: per thread, >= 1
  uint32_t size = 256 << 10;   // prepare: bytes per request, 1..64 MiB
  uint64_t first_segment = 0;  // prepare: this node's first thread's segment
  bool verify = false;         // prepare, read: check the offsets the writes left
  bool direct = false;         // prepare, write: O_DIRECT's writes (direct_writes)

  Buffer encode() const;  // wire/byte_codec.h fields
};
// Decodes a peer's IOBENCH request; every field checked (kProtocol).
Result<IobenchRequest> decode_iobench_request(std::span<const uint8_t> payload);

// A client node's run (go), or a CPU reading (cpu: only cpu_s).
struct IobenchNodeResult {
  uint64_t bytes = 0, errors = 0;
  std::string first_error;
  int64_t start_unix_ns = 0, end_unix_ns = 0;  // first thread's start, last one's end
  double cpu_s = 0;                            // process CPU (user + system)
};
Buffer encode_iobench_result(const IobenchNodeResult& r);
Result<IobenchNodeResult> decode_iobench_result(std::span<const uint8_t> payload);

// A client's share of a cell (prepare, then go), or a CPU reading. A prepare is answered
// when the client's threads wait at the barrier, a go when they have run.
extern const RpcMethod<IobenchRequest, IobenchNodeResult> kIobenchRpc;

// Serves IOBENCH on `rpc` for this node. `options` gives the striped files' options (the
// node's pagepool and prefetch depth, read at each prepare). A prepared job that gets no
// `go` within `barrier_timeout` is dropped, its threads ended.
class IobenchService final : public NodePart {
 public:
  // `clock` gives the threads' start and end times (wall_now).
  IobenchService(RpcEngine& rpc, Clock& clock, std::function<StripedFileOptions()> options,
                 Duration barrier_timeout = std::chrono::seconds(60));
  ~IobenchService() override;
  const char* part_name() const override { return "iobench"; }
  // Ends every job (their threads see the barrier or their file fail) and joins them.
  void stop() override;

 private:
  struct Job;
  void handle(IobenchRequest&& q, TypedResponder<IobenchNodeResult> r);
  void prepare(const IobenchRequest& q, TypedResponder<IobenchNodeResult> r);
  void go(uint64_t id, TypedResponder<IobenchNodeResult> r);
  void reap_finished() EXCLUDES(mu_);

  RpcEngine& rpc_;
  Clock& clock_;
  std::function<StripedFileOptions()> options_;
  const Duration barrier_timeout_;
  Mutex mu_;
  std::map<uint64_t, std::shared_ptr<Job>> jobs_ GUARDED_BY(mu_);
  std::vector<std::thread> running_ GUARDED_BY(mu_);   // jobs' threads
  std::vector<std::thread> finished_ GUARDED_BY(mu_);  // jobs' threads ended, to join
  bool stopped_ GUARDED_BY(mu_) = false;
};

// The benchmark as the admin command describes it (from_json checks every field).
struct IobenchSpec {
  std::vector<Nid> clients;  // nodes in order: a cell of n nodes uses the first n
  std::vector<Nid> servers;  // the file's layout
  std::vector<int> nodes = {1};
  std::vector<int> threads = {1};
  uint64_t requests = 2000;   // per thread (the paper's 2,000)
  uint64_t cell_bytes = 0;    // instead: at least this many bytes per cell (requests grow)
  uint32_t size = 256 << 10;  // the paper's 256 KB
  std::vector<std::string> ops = {"write", "read"};
  std::string file = "iobench";
  double timeout_s = 3600;  // per cell and operation
  bool direct = false;      // writes as O_DIRECT's: no pagepool copy, no write-behind

  static Result<IobenchSpec> from_json(const nlohmann::json& j);
  // Requests per thread in a cell of n nodes x t threads.
  uint64_t requests_for(int n, int t) const;
};

// Runs the matrix from this node; `progress` (if set) gets each cell as it ends. Returns
// {"cells": [{nodes, threads, op, requests, bytes, job_s, mib_s, mb_s, client_cpu,
// server_cpu, errors, first_error}, ...], "peak": {op: mib_s}, ...}. CPU figures are cores
// busy over the job time (CPU seconds / job seconds), summed over the nodes.
Result<nlohmann::json> run_iobench(RpcEngine& rpc, const IobenchSpec& spec,
                                   const std::function<void(const nlohmann::json&)>& progress);

}  // namespace pfsnet
