// BlockService: the block server of a node with [storage] targets -- the paper's Virtual
// Shared Disk server. It serves BLOCK_INFO, BLOCK_WRITE and BLOCK_READ (storage/protocol.h)
// on the node's RPC engine:
//
//   request -> waits for a block buffer (BlockBuffers; holding its receive credit, no
//   thread) -> a storage thread does the target's I/O -> with an emulated disk rate
//   ([storage] disk_mbyte), the reply waits until the target's DiskModel says the
//   transfer is done -> reply; the buffer is free again (a read's once its data is sent).
//
// Exactly-once across its own restart: each target keeps which writes of each client it
// executed (storage/last_rcvd.h, in the target's directory), so a write resent after the
// server was killed between executing it and replying is answered done, not run again.
//
// Its statistics go beside the RPC ones: each request's wait for a buffer as message type
// BLOCK_BUFFER_WAIT and each transfer's time on its target (the emulated time included) as
// BLOCK_DISK, in the same intervals as the messages' execution times; stats() has the
// buffers' use and waits and the targets' totals (admin `storage`, /metrics).
//
// Threads: handlers run on I/O threads and never block; the I/O on `threads` storage
// threads; replies held for the emulated disk on the node's timer queue; stats() from any
// thread. stop() before the engine shuts down.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/config.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "rpc/fence.h"
#include "rpc/node_part.h"
#include "rpc/rpc_engine.h"
#include "rpc/worker_pool.h"
#include "stats/rpc_stats.h"
#include "storage/block_buffers.h"
#include "storage/block_store.h"
#include "storage/disk_model.h"
#include "storage/last_rcvd.h"
#include "storage/protocol.h"
#include "transport/timer_queue.h"

namespace pfsnet {

struct BlockServiceOptions {
  std::vector<std::string> targets;  // "mem" or a directory each; none: not a block server
  uint32_t block_size = 256 << 10;
  size_t buffers = 64;
  int threads = 4;
  double disk_bytes_per_s = 0;  // per target; 0: the target's own speed
  uint64_t capacity = 1ull << 30;
  // The MGS's verdicts (rpc/fence.h; outlives the service): I/O of a client declared dead
  // is refused (kPeerDead) until it registered again. Null: none refused.
  const Fence* fence = nullptr;

  static BlockServiceOptions from(const Config& cfg);
};

struct TargetStats {
  std::string where;  // "mem", "DIR (O_DIRECT)", "DIR (page cache)"
  uint64_t writes = 0, reads = 0, bytes_written = 0, bytes_read = 0, errors = 0;
  Duration busy{0};  // emulated disk time (0 without emulation)
};

struct BlockServiceStats {
  bool serving = false;
  uint32_t block_size = 0;
  double disk_bytes_per_s = 0;
  BlockBufferStats buffers;
  WorkerStats threads;
  std::vector<TargetStats> targets;
  uint64_t evicted_refused = 0;  // requests of evicted clients refused
  // Resent writes a target's last_rcvd says ran (answered done, not run again), and ones it
  // could not tell about (refused).
  uint64_t resends_answered = 0, resends_unknown = 0;
};

class BlockService final : public NodePart {
 public:
  // Registers the block messages on `rpc` (before traffic); until open() they are
  // refused with kNotFound ("no block targets here"). `stats` (optional) outlives it;
  // `timers` (the node's timer queue) holds the replies the emulated disk delays.
  BlockService(BlockServiceOptions opts, RpcEngine& rpc, RpcStats* stats, Clock& clock,
               TimerQueue& timers);
  ~BlockService() override;

  const char* part_name() const override { return "storage"; }
  // Opens the targets and starts the storage threads -- before the NIs listen, so a block
  // request is never told "no block targets here" by a node that has them. Errors: a target
  // that cannot be opened. Nothing to do without targets.
  Status open() override;
  // Requests waiting get kCancelled; transfers under way finish. Idempotent.
  void stop() override;
  bool serving() const { return serving_.load(); }
  BlockServiceStats stats() const;

 private:
  struct Op;
  void on_io(uint32_t type, RpcRequest& req, Responder resp);
  // A request for one whole block (offset 0, the block size): what a target may keep or
  // share without a copy.
  bool whole(const BlockIo& io) const { return io.offset == 0 && io.length == opts_.block_size; }
  void run(const std::shared_ptr<Op>& op);
  void finish(const std::shared_ptr<Op>& op);

  const BlockServiceOptions opts_;
  std::atomic<uint64_t> evicted_refused_{0};
  std::atomic<uint64_t> resends_answered_{0}, resends_unknown_{0};
  RpcEngine& rpc_;
  RpcStats* const stats_;
  Clock& clock_;
  std::atomic<bool> serving_{false};
  std::shared_ptr<BlockBuffers> buffers_;
  std::unique_ptr<WorkerPool> io_;
  TimerQueue& timers_;
  // What a held reply finds when its time comes: the service, or null once stopped (the
  // reply is then dropped: kCancelled). stop() waits for one being sent.
  struct Held {
    Mutex mu;
    BlockService* svc GUARDED_BY(mu) = nullptr;
  };
  std::shared_ptr<Held> held_ = std::make_shared<Held>();
  std::vector<std::unique_ptr<BlockStore>> stores_;
  std::vector<std::unique_ptr<LastRcvd>> executed_;  // per target, beside stores_
  mutable Mutex mu_;
  std::vector<DiskModel> disks_ GUARDED_BY(mu_);
  std::vector<TargetStats> target_stats_ GUARDED_BY(mu_);
};

}  // namespace pfsnet
