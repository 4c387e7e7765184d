#include "storage/block_service.h"

#include <cstring>
#include <filesystem>

#include "base/log.h"
#include "storage/methods.h"
#include "storage/protocol.h"

namespace pfsnet {

BlockServiceOptions BlockServiceOptions::from(const Config& cfg) {
  BlockServiceOptions o;
  o.targets = cfg.storage.targets;
  o.block_size = static_cast<uint32_t>(cfg.storage.block_size);
  o.buffers = static_cast<size_t>(cfg.storage.buffers);
  o.threads = static_cast<int>(cfg.storage.threads);
  o.disk_bytes_per_s = cfg.storage.disk_mbyte * 1024 * 1024;  // the paper's MB: 1024^2 bytes
  o.capacity = static_cast<uint64_t>(cfg.storage.capacity);
  return o;
}

struct BlockService::Op {
  uint32_t type = 0;
  BlockIo io;
  Nid client;  // a write's, for last_rcvd
  uint64_t incarnation = 0, xid = 0;
  Buffer data;                       // a write's bulk
  std::optional<uint32_t> data_crc;  // its CRC, from the client's seal
  Buffer buf;                        // the block buffer
  SharedBlock block;  // a whole block read, shared with the target (no copy), and its CRC
  Responder resp;
  bool queued_for_buffer = false;  // set under the pool's lock, before its buffer comes
  TimePoint io_start{};
  Status status;
};

BlockService::BlockService(BlockServiceOptions opts, RpcEngine& rpc, RpcStats* stats, Clock& clock,
                           TimerQueue& timers)
    : opts_(std::move(opts)), rpc_(rpc), stats_(stats), clock_(clock), timers_(timers) {
  serve(rpc_, kBlockInfoRpc, [this](Empty&&, RpcRequest&) -> Result<BlockInfo> {
    if (!serving()) return Status(Code::kNotFound, "no block targets here");
    return BlockInfo{opts_.block_size, static_cast<uint32_t>(opts_.targets.size()), opts_.capacity};
  });
  // A write runs once; a copy after this server's restart is answered from its target's
  // last_rcvd (a memory target's data went with the process: the copy writes it again).
  rpc_.handle_async(
      kMsgBlockWrite, "BLOCK_WRITE",
      [this](RpcRequest& req, Responder resp) { on_io(kMsgBlockWrite, req, std::move(resp)); },
      Execution::kOnceRestartSafe);
  // A read changes nothing, and its reply (a block) is too large to keep for a resend.
  rpc_.handle_async(
      kMsgBlockRead, "BLOCK_READ",
      [this](RpcRequest& req, Responder resp) { on_io(kMsgBlockRead, req, std::move(resp)); },
      Execution::kRepeatable);
}

BlockService::~BlockService() { stop(); }

Status BlockService::open() {
  if (opts_.targets.empty() || serving()) return Status::Ok();
  for (const std::string& t : opts_.targets) {
    auto s = open_block_store(t, opts_.block_size, opts_.capacity);
    if (!s.ok())
      return Status(s.status().code(), "storage target " + t + ": " + s.status().message());
    stores_.push_back(std::move(*s));
    // A directory target keeps its record of executed writes beside its files
    // (storage/last_rcvd.h). A memory target's data goes with the process, and the engine's
    // reply cache answers resends within one run: none there, nor (yet) on a block device.
    std::error_code ec;
    executed_.emplace_back();
    if (std::filesystem::is_directory(t, ec)) {
      auto rec = LastRcvd::open(t + "/#last_rcvd");
      if (!rec.ok())
        return Status(rec.status().code(), "storage target " + t + ": " + rec.status().message());
      executed_.back() = std::move(*rec);
    }
  }
  {
    MutexLock lk(mu_);
    for (const auto& s : stores_) {
      disks_.emplace_back(opts_.disk_bytes_per_s);
      target_stats_.push_back(TargetStats{s->describe()});
    }
  }
  buffers_ = BlockBuffers::make(opts_.buffers, opts_.block_size, clock_);
  io_ = std::make_unique<WorkerPool>(opts_.threads, clock_, "pfs-disk");
  {
    MutexLock lk(held_->mu);
    held_->svc = this;
  }
  serving_ = true;
  std::string where;
  for (const auto& s : stores_) where += (where.empty() ? "" : ", ") + s->describe();
  PFS_LOG_INFO("block server: {} target(s) [{}], block {} bytes, {} buffers, {} threads{}",
               stores_.size(), where, opts_.block_size, opts_.buffers, opts_.threads,
               opts_.disk_bytes_per_s > 0 ? fmt::format(", disk emulated at {:.1f} MB/s per target",
                                                        opts_.disk_bytes_per_s / (1024 * 1024))
                                          : std::string());
  return Status::Ok();
}

void BlockService::stop() {
  if (!serving_.exchange(false)) return;
  buffers_->stop();  // waiters are answered kCancelled
  io_->stop();       // transfers under way finish
  MutexLock lk(held_->mu);
  held_->svc = nullptr;  // replies held for the emulated disk are dropped: kCancelled
}

void BlockService::on_io(uint32_t type, RpcRequest& req, Responder resp) {
  RpcResponse r;
  if (!serving()) {
    r.status = Status(Code::kNotFound, "no block targets here");
    resp.reply(std::move(r));
    return;
  }
  if (auto why = opts_.fence ? opts_.fence->evicted(req.from) : std::nullopt) {
    // Evicted: what it writes now would be under a token another node may hold since.
    evicted_refused_.fetch_add(1, std::memory_order_relaxed);
    r.status = Status(Code::kPeerDead, "refused: " + *why + "; register again first");
    resp.reply(std::move(r));
    return;
  }
  auto io = decode_block_io(req.payload.span(), opts_.block_size);
  if (!io.ok()) {
    r.status = io.status();
  } else if (io->target >= stores_.size()) {
    r.status =
        Status(Code::kInvalidArgument, "no target " + std::to_string(io->target) + " here (" +
                                           std::to_string(stores_.size()) + " targets)");
  } else if (type == kMsgBlockWrite && req.bulk.size() != io->length) {
    r.status = Status(Code::kProtocol, "BLOCK_WRITE of " + std::to_string(io->length) +
                                           " bytes carries " + std::to_string(req.bulk.size()));
  }
  const bool recorded = type == kMsgBlockWrite && req.incarnation != 0 && io.ok() &&
                        io->target < executed_.size() && executed_[io->target];
  if (r.status.ok() && recorded) {
    // A resend of a write this target executed before this server restarted (the engine's
    // reply cache went with the process; the record did not): done, not run again.
    switch (executed_[io->target]->seen(req.from, req.incarnation, req.xid)) {
      case LastRcvd::Seen::kRan:
        resends_answered_.fetch_add(1, std::memory_order_relaxed);
        PFS_LOG_INFO(
            "block server: BLOCK_WRITE xid {} of {} ran before this server restarted: "
            "answered from target {}'s last_rcvd, not run again",
            req.xid, req.from.to_string(), io->target);
        resp.reply(std::move(r));
        return;
      case LastRcvd::Seen::kUnknown:
        resends_unknown_.fetch_add(1, std::memory_order_relaxed);
        r.status = Status(Code::kOutcomeUnknown,
                          "BLOCK_WRITE xid " + std::to_string(req.xid) +
                              " is older than every write of its client target " +
                              std::to_string(io->target) +
                              "'s last_rcvd still holds: whether it ran cannot be told, so it "
                              "is not run again");
        break;
      case LastRcvd::Seen::kNew:
        break;
    }
  }
  if (!r.status.ok()) {
    resp.reply(std::move(r));
    return;
  }
  auto op = std::make_shared<Op>();
  op->type = type;
  op->io = std::move(*io);
  if (recorded) {
    op->client = req.from;
    op->incarnation = req.incarnation;
    op->xid = req.xid;
  }
  op->data = std::move(req.bulk);
  op->data_crc = req.bulk_crc;
  op->resp = std::move(resp);
  auto queued = [this, op](size_t ahead) {  // `pfsnet diag ops`: what it waits for
    op->queued_for_buffer = true;
    op->resp.waiting_for("a block buffer: all " + std::to_string(buffers_->count()) + " of " +
                         std::to_string(buffers_->buffer_size() >> 10) + " KiB in use, " +
                         std::to_string(ahead) + " request(s) ahead (storage.buffers)");
  };
  buffers_->acquire(
      [this, op](Buffer buf, Duration waited) {
        if (stats_) stats_->record_exec(RawExecRecord{waited.count(), kMsgBlockBufferWait});
        if (op->queued_for_buffer) op->resp.resumed();  // executing again
        if (buf.empty()) {
          op->resp.reply(RpcResponse{Status(Code::kCancelled, "block server stopping"), {}, {}});
          return;
        }
        op->buf = std::move(buf);
        // A target in memory takes or shares a whole block without a copy, written or read:
        // no storage thread needed (a hand-off cost more than the work).
        if (whole(op->io) && !stores_[op->io.target]->blocks_thread()) return run(op);
        if (!io_->submit([this, op] { run(op); }))
          op->resp.reply(RpcResponse{Status(Code::kCancelled, "block server stopping"), {}, {}});
      },
      queued);
}

void BlockService::run(const std::shared_ptr<Op>& op) {
  BlockStore& store = *stores_[op->io.target];
  const BlockIo& io = op->io;
  op->io_start = clock_.now();
  if (op->type == kMsgBlockWrite) {
    // Through the block buffer only when the target goes faster from aligned memory and
    // the request's is not (received blocks of 64 KiB and more are).
    std::span<const uint8_t> src = op->data.span();
    const bool realign =
        store.wants_aligned() && reinterpret_cast<uintptr_t>(src.data()) % 4096 != 0;
    if (whole(io) && !realign) {
      // The target may keep the request's memory as the block ("mem" does).
      op->status = store.write_block(io.file, io.block, std::move(op->data), op->data_crc);
    } else {
      if (realign) {
        std::memcpy(op->buf.data(), src.data(), src.size());
        src = std::span<const uint8_t>(op->buf.data(), src.size());
      }
      op->status = store.write(io.file, io.block, io.offset, src);
    }
    op->data = Buffer();
    // In the target, so in its record before the reply: a server killed from here on
    // answers the resend from the record at its restart.
    if (op->status.ok() && op->incarnation != 0)
      op->status = executed_[io.target]->ran(op->client, op->incarnation, op->xid);
  } else if (whole(io) && (op->block = store.read_block(io.file, io.block)).data) {
    op->status = Status::Ok();
  } else {
    op->status = store.read(io.file, io.block, io.offset, op->buf.span().first(io.length));
  }
  TimePoint done;
  {
    MutexLock lk(mu_);
    done = disks_[io.target].schedule(op->io_start, io.length);
    TargetStats& t = target_stats_[io.target];
    if (!op->status.ok()) {
      ++t.errors;
    } else if (op->type == kMsgBlockWrite) {
      ++t.writes;
      t.bytes_written += io.length;
    } else {
      ++t.reads;
      t.bytes_read += io.length;
    }
    t.busy = disks_[io.target].busy();
  }
  if (done > clock_.now()) {
    timers_.run_at(done, [held = held_, op] {
      MutexLock lk(held->mu);
      if (held->svc) held->svc->finish(op);
    });
  } else {
    finish(op);
  }
}

void BlockService::finish(const std::shared_ptr<Op>& op) {
  if (stats_)
    stats_->record_exec(RawExecRecord{(clock_.now() - op->io_start).count(), kMsgBlockDisk});
  RpcResponse r;
  r.status = op->status;
  if (r.status.ok() && op->type == kMsgBlockRead && op->block.data) {
    r.bulk = std::move(op->block.data);
    r.bulk_crc = op->block.crc;  // the writer's: bytes damaged since fail at the reader
  } else if (r.status.ok() && op->type == kMsgBlockRead) {
    op->buf.shrink_to(op->io.length);
    r.bulk = make_bulk(std::move(op->buf));  // the buffer is free once the data is sent
  }
  op->buf = Buffer();
  op->resp.reply(std::move(r));
}

BlockServiceStats BlockService::stats() const {
  BlockServiceStats s;
  s.serving = serving();
  s.block_size = opts_.block_size;
  s.disk_bytes_per_s = opts_.disk_bytes_per_s;
  s.evicted_refused = evicted_refused_.load(std::memory_order_relaxed);
  s.resends_answered = resends_answered_.load(std::memory_order_relaxed);
  s.resends_unknown = resends_unknown_.load(std::memory_order_relaxed);
  if (buffers_) s.buffers = buffers_->stats();
  if (io_) s.threads = io_->stats();
  MutexLock lk(mu_);
  s.targets = target_stats_;
  return s;
}

}  // namespace pfsnet
