// The block service and a striped file end to end over real TCP on loopback, inside this
// process, with the I/O and worker threads of a daemon: tokens serialising overlapping
// writes of two threads (revocations answered from the I/O thread that sees the last write
// end), reads of what another client wrote, direct writes, buffers, the emulated disk, bad
// requests. The tokens' rules, exactly and on manual time: tokens_sim_test.cc.
#include "storage/block_service.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "rpc/node_core.h"
#include "storage/device_layout.h"
#include "storage/disk_model.h"
#include "storage/iobench.h"
#include "storage/layout.h"
#include "storage/protocol.h"
#include "storage/striped_file.h"
#include "storage/test_pattern.h"
#include "storage/test_tcp_node.h"
#include "storage/tokens.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;
using test::TcpNode;

uint16_t test_port() { return static_cast<uint16_t>(20000 + getpid() % 20000); }

class BlockServiceTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kBlock = 64 << 10;
  BlockServiceTest()
      : s1_("127.0.9.1", test_port()),
        s2_("127.0.9.2", test_port()),
        c1_("127.0.9.3", test_port()),
        c2_("127.0.9.4", test_port()) {}
  void SetUp() override {
    BlockServiceOptions o;
    o.block_size = kBlock;
    o.buffers = 4;
    o.threads = 2;
    o.targets = {"mem", "mem"};
    o.capacity = 64 << 20;
    svc1_ = std::make_unique<BlockService>(o, *s1_.rpc, nullptr, s1_.clock, s1_.core.timer_queue());
    o.targets = {"mem"};
    svc2_ = std::make_unique<BlockService>(o, *s2_.rpc, nullptr, s2_.clock, s2_.core.timer_queue());
    for (TcpNode* n : {&s1_, &c1_, &c2_})
      tokens_.push_back(std::make_unique<TokenService>(*n->rpc, 10s));
    for (TcpNode* n : {&s1_, &s2_, &c1_, &c2_}) ASSERT_TRUE(n->start().ok());
    ASSERT_TRUE(svc1_->open().ok());
    ASSERT_TRUE(svc2_->open().ok());
  }
  void TearDown() override {
    svc1_->stop();
    svc2_->stop();
    for (auto& t : tokens_) t->stop();
    // No request reaches a service once it is gone: the nodes stop before it does.
    for (TcpNode* n : {&s1_, &s2_, &c1_, &c2_}) n->shutdown();
  }
  StripedFileOptions fopts(uint64_t pagepool = 1 << 20) {
    StripedFileOptions o;
    o.pagepool = pagepool;
    o.prefetch_depth = 3;
    o.timeout = 10s;
    return o;
  }
  // `name` opened by c1 and c2 with write tokens (t1, t2: their token services).
  std::pair<Result<std::unique_ptr<StripedFile>>, Result<std::unique_ptr<StripedFile>>> open_both(
      const std::string& name, TokenService& t1, TokenService& t2) {
    auto opts = [&](TokenService& t) {
      StripedFileOptions o = fopts(4 << 20);
      o.tokens = &t;
      return o;
    };
    return {StripedFile::open(*c1_.rpc, name, {s1_.nid(), s2_.nid()}, opts(t1)),
            StripedFile::open(*c2_.rpc, name, {s1_.nid(), s2_.nid()}, opts(t2))};
  }
  TcpNode s1_, s2_, c1_, c2_;
  std::unique_ptr<BlockService> svc1_, svc2_;
  std::vector<std::unique_ptr<TokenService>> tokens_;  // s1 (the manager), c1, c2
};

// Two readers of one node reading neighbouring parts of a file (the benchmark's threads):
// the one that reaches the other's part stops reading ahead there -- this node read those
// blocks already -- instead of fetching them again; reading the part again reads ahead.
TEST_F(BlockServiceTest, ReadAheadStopsWhereThisNodeReadAlreadyAndResumesOnRereading) {
  constexpr int kBlocks = 16;
  {
    auto w = StripedFile::open(*c1_.rpc, "parts", {s1_.nid(), s2_.nid()}, fopts());
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < kBlocks; ++i)
      ASSERT_TRUE((*w)->write(uint64_t(i) * kBlock, test_pattern(kBlock, i)).ok());
    ASSERT_TRUE((*w)->close().ok());
  }
  // A pagepool of 6 blocks (read-ahead: 3): what a reader went past is let go.
  auto f = StripedFile::open(*c2_.rpc, "parts", {s1_.nid(), s2_.nid()}, fopts(6 * kBlock));
  ASSERT_TRUE(f.ok());
  std::vector<uint8_t> got(kBlock);
  auto read_part = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      ASSERT_TRUE((*f)->read(uint64_t(i) * kBlock, got).ok());
      ASSERT_TRUE(got == test_pattern(kBlock, i)) << "block " << i;
    }
  };
  read_part(8, kBlocks);  // the second part first
  const StripedFileStats before = (*f)->stats();
  EXPECT_EQ(before.prefetch_stops, 0u);
  read_part(0, 8);  // then the first: its read-ahead reaches blocks 8.. at its end
  const StripedFileStats after = (*f)->stats();
  EXPECT_EQ(after.block_reads - before.block_reads, 8u);  // none of 8-10 again
  EXPECT_GE(after.prefetch_stops, 1u);
  EXPECT_GT(after.prefetched, before.prefetched);
  // Read again from its start: a re-reading, read ahead as any stream.
  read_part(0, 8);
  const StripedFileStats again = (*f)->stats();
  EXPECT_GT(again.prefetched, after.prefetched);
  EXPECT_GT(again.cache_hits, after.cache_hits);
  ASSERT_TRUE((*f)->close().ok());
}

// A sequential reader's whole blocks on their way come straight into its buffer -- the
// reply's bulk received there, one copy fewer -- and are not kept in the pagepool (the
// reader is done with them); a read of part of a block copies out of the pagepool.
TEST_F(BlockServiceTest, ASequentialReadersWholeBlocksComeStraightIntoItsBuffer) {
  constexpr int kBlocks = 8;
  StripedFileOptions o = fopts();
  o.prefetch_depth = 0;  // every block fetched by its read: offered before it is asked for
  auto f = StripedFile::open(*c1_.rpc, "into", {s1_.nid(), s2_.nid()}, o);
  ASSERT_TRUE(f.ok());
  for (int i = 0; i < kBlocks; ++i)
    ASSERT_TRUE((*f)->write(uint64_t(i) * kBlock, test_pattern(kBlock, i)).ok());
  ASSERT_TRUE((*f)->flush().ok());
  std::vector<uint8_t> got(kBlock);
  for (int i = 0; i < kBlocks; ++i) {
    std::fill(got.begin(), got.end(), 0xee);
    ASSERT_TRUE((*f)->read(uint64_t(i) * kBlock, got).ok());
    ASSERT_TRUE(got == test_pattern(kBlock, i)) << "block " << i;
  }
  StripedFileStats st = (*f)->stats();
  EXPECT_EQ(st.block_reads, uint64_t(kBlocks));
  EXPECT_EQ(st.read_into_caller, uint64_t(kBlocks - 1));  // the first read is no stream yet
  // Not kept: half of block 3 is fetched again, into the pagepool, and copied out.
  std::vector<uint8_t> half(kBlock / 2);
  ASSERT_TRUE((*f)->read(3 * uint64_t(kBlock) + kBlock / 4, half).ok());
  std::vector<uint8_t> want = test_pattern(kBlock, 3);
  EXPECT_TRUE(std::equal(half.begin(), half.end(), want.begin() + kBlock / 4));
  StripedFileStats again = (*f)->stats();
  EXPECT_EQ(again.block_reads, st.block_reads + 1);
  EXPECT_EQ(again.read_into_caller, st.read_into_caller);
  // Block 0, the first read's, stayed: found there.
  ASSERT_TRUE((*f)->read(0, got).ok());
  EXPECT_TRUE(got == test_pattern(kBlock, 0));
  EXPECT_EQ((*f)->stats().cache_hits, again.cache_hits + 1);
  ASSERT_TRUE((*f)->close().ok());
}

// Byte-range write tokens (the manager: s1, the layout's first server). Two clients
// writing the same range at once are serialised -- the range ends up wholly one writer's,
// never a mix of blocks -- disjoint sequential runs need a token each (at most one revocation), and
// a node's cached copy of a block another node writes is dropped, so it reads the new data.
TEST_F(BlockServiceTest, OverlappingWritesAreSerialisedByTokensDisjointOnesRunFreely) {
  TokenService &manager = *tokens_[0], &t1 = *tokens_[1], &t2 = *tokens_[2];
  auto files = open_both("tok", t1, t2);
  auto &f1 = files.first, &f2 = files.second;
  ASSERT_TRUE(f1.ok() && f2.ok());
  constexpr size_t kRange = 8 * kBlock;
  // Disjoint: c1 the first 8 blocks, c2 the next 8, at once, a block per call.
  {
    std::thread a([&] {
      for (int i = 0; i < 8; ++i)
        EXPECT_TRUE((*f1)->write(i * kBlock, test_pattern(kBlock, i)).ok());
    });
    std::thread b([&] {
      for (int i = 8; i < 16; ++i)
        EXPECT_TRUE((*f2)->write(i * kBlock, test_pattern(kBlock, i)).ok());
    });
    a.join();
    b.join();
  }
  ASSERT_TRUE((*f1)->flush().ok() && (*f2)->flush().ok());
  // Each sequential writer asked for the rest of the file with its first block. The first
  // one served got it; the other's took back at most once what the first did not use (its
  // writes were all below), and neither asked again: one token per run, not per block
  // (a second only if a revocation crossed its first grant on the way).
  EXPECT_LE(manager.stats().revocations, 1u);
  EXPECT_GE(manager.stats().granted, 2u);
  EXPECT_LE((*f1)->stats().tokens_acquired, 2u);
  EXPECT_LE((*f2)->stats().tokens_acquired, 2u);
  EXPECT_EQ(manager.stats().holders_dropped, 0u);
  // Overlapping: both write the same 8 blocks in one call each, at once, 6 rounds.
  for (int round = 0; round < 6; ++round) {
    auto pa = test_pattern(kRange, 1000 + round), pb = test_pattern(kRange, 2000 + round);
    std::thread a([&] {
      Status s = (*f1)->write(0, pa);
      EXPECT_TRUE(s.ok()) << s.to_string();
    });
    std::thread b([&] {
      Status s = (*f2)->write(0, pb);
      EXPECT_TRUE(s.ok()) << s.to_string();
    });
    a.join();
    b.join();
    ASSERT_TRUE((*f1)->flush().ok() && (*f2)->flush().ok());
    auto check = StripedFile::open(*c1_.rpc, "tok", {s1_.nid(), s2_.nid()}, fopts());
    ASSERT_TRUE(check.ok());
    std::vector<uint8_t> got(kRange);
    ASSERT_TRUE((*check)->read(0, got).ok());
    EXPECT_TRUE(got == pa || got == pb) << "round " << round << ": a mix of both writers";
  }
  EXPECT_GE(manager.stats().revocations, 1u);
  EXPECT_GE((*f1)->stats().tokens_revoked + (*f2)->stats().tokens_revoked, 1u);
  // Coherence: c1 writes and reads block 20 (cached), c2 writes it, c1 reads c2's data.
  auto mine = test_pattern(kBlock, 7), theirs = test_pattern(kBlock, 8);
  ASSERT_TRUE((*f1)->write(20 * kBlock, mine).ok());
  std::vector<uint8_t> got(kBlock);
  ASSERT_TRUE((*f1)->read(20 * kBlock, got).ok());
  EXPECT_EQ(got, mine);
  ASSERT_TRUE((*f2)->write(20 * kBlock, theirs).ok());
  ASSERT_TRUE((*f2)->flush().ok());
  ASSERT_TRUE((*f1)->read(20 * kBlock, got).ok());
  EXPECT_EQ(got, theirs) << "c1 kept a stale block";
  EXPECT_TRUE((*f1)->close().ok());
  EXPECT_TRUE((*f2)->close().ok());
  // Bad requests to the manager get clear errors.
  RpcReply r =
      c1_.rpc->call(s1_.nid(), kMsgTokenAcquire,
                    Buffer::copy_of(std::string_view(R"({"file":"tok","start":9,"end":9})")));
  EXPECT_EQ(r.status.code(), Code::kProtocol) << r.status.to_string();
}

TEST_F(BlockServiceTest, WhatOneClientWritesAnotherReadsBackByteForByte) {
  auto f = StripedFile::open(*c1_.rpc, "shared", {s1_.nid(), s2_.nid()}, fopts());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  // Target-major over both servers: s1 t0, s2 t0, s1 t1.
  ASSERT_EQ((*f)->layout().targets().size(), 3u);
  EXPECT_EQ((*f)->layout().targets()[1], (TargetRef{s2_.nid(), 0}));
  EXPECT_EQ((*f)->layout().targets()[2], (TargetRef{s1_.nid(), 1}));
  // Unaligned writes of odd sizes, sequential, then one overwriting part of the others.
  std::vector<uint8_t> want(10 * kBlock + 777, 0);
  uint64_t pos = 100;
  for (int i = 0; pos < want.size(); ++i) {
    size_t n = std::min<size_t>(want.size() - pos, 30'000 + i * 9'999);
    auto p = test_pattern(n, i);
    ASSERT_TRUE((*f)->write(pos, p).ok());
    std::copy(p.begin(), p.end(), want.begin() + pos);
    pos += n;
  }
  auto over = test_pattern(2 * kBlock + 5, 99);
  ASSERT_TRUE((*f)->write(kBlock - 3, over).ok());
  std::copy(over.begin(), over.end(), want.begin() + kBlock - 3);
  ASSERT_TRUE((*f)->close().ok());
  EXPECT_GE((*f)->stats().block_writes, 11u);

  auto g = StripedFile::open(*c2_.rpc, "shared", {s1_.nid(), s2_.nid()}, fopts());
  ASSERT_TRUE(g.ok());
  std::vector<uint8_t> got(want.size(), 0xEE);
  // Sequential reads of 40,000 bytes: read-ahead fetches blocks before they are asked for.
  for (size_t off = 0; off < got.size(); off += 40'000) {
    size_t n = std::min<size_t>(40'000, got.size() - off);
    ASSERT_TRUE((*g)->read(off, std::span(got).subspan(off, n)).ok());
  }
  EXPECT_TRUE(got == want);
  auto st = (*g)->stats();
  EXPECT_GT(st.prefetched, 0u);
  EXPECT_GT(st.cache_hits, 0u);
  // Each of the 11 blocks fetched once, and read-ahead past the end (no file size yet).
  EXPECT_LE(st.block_reads, 11u + 3u);
  // The servers' targets hold the blocks they were given: s1 two targets, s2 one.
  auto a = svc1_->stats(), b = svc2_->stats();
  ASSERT_EQ(a.targets.size(), 2u);
  ASSERT_EQ(b.targets.size(), 1u);
  EXPECT_GT(a.targets[0].writes, 0u);
  EXPECT_GT(a.targets[1].writes, 0u);
  EXPECT_GT(b.targets[0].writes, 0u);
  EXPECT_EQ(a.targets[0].writes + a.targets[1].writes + b.targets[0].writes,
            (*f)->stats().block_writes);
}

TEST_F(BlockServiceTest, AReaderSeesItsOwnWritesAndWriteErrorsComeAtFlush) {
  auto f = StripedFile::open(*c1_.rpc, "own", {s1_.nid()}, fopts());
  ASSERT_TRUE(f.ok());
  auto p = test_pattern(kBlock, 5);
  std::vector<uint8_t> got(kBlock);
  ASSERT_TRUE((*f)->read(0, got).ok());  // cached zeros ...
  EXPECT_EQ(got, std::vector<uint8_t>(kBlock, 0));
  ASSERT_TRUE((*f)->write(0, p).ok());  // ... made stale by the write
  ASSERT_TRUE((*f)->read(0, got).ok());
  EXPECT_EQ(got, p);
  // A write past the target's capacity fails on the server: flush reports it, once.
  std::vector<uint8_t> small(10, 1);
  ASSERT_TRUE((*f)->write(uint64_t(64) << 30, small).ok());
  Status s = (*f)->flush();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("capacity"), std::string::npos) << s.to_string();
  EXPECT_TRUE((*f)->flush().ok());
}

// O_DIRECT's writes: the caller's memory goes out as it is, the write returns once the
// server has the data (another client reads it at once, no flush), the caller may reuse
// its buffer then, and tokens still serialise overlapping writers.
TEST_F(BlockServiceTest, DirectWritesAreAcknowledgedOnReturnAndLeaveTheCallersMemory) {
  StripedFileOptions o = fopts();
  o.direct_writes = true;
  o.tokens = tokens_[1].get();
  auto f = StripedFile::open(*c1_.rpc, "direct", {s1_.nid(), s2_.nid()}, o);
  auto reader = StripedFile::open(*c2_.rpc, "direct", {s1_.nid(), s2_.nid()}, fopts());
  ASSERT_TRUE(f.ok() && reader.ok());
  // Unaligned and across blocks and servers.
  auto p = test_pattern(3 * kBlock + 1234, 21);
  std::vector<uint8_t> mine = p;
  ASSERT_TRUE((*f)->write(777, mine).ok());
  std::fill(mine.begin(), mine.end(), uint8_t(0xEE));  // the caller's buffer is its own again
  std::vector<uint8_t> got(p.size());
  ASSERT_TRUE((*reader)->read(777, got).ok());
  EXPECT_EQ(got, p) << "a direct write was not on the servers when it returned";
  auto st = (*f)->stats();
  EXPECT_EQ(st.block_writes, 4u);
  EXPECT_EQ(st.tokens_acquired, 1u);
  // The file's own reads see it (its cache of those blocks is gone).
  std::vector<uint8_t> again(p.size());
  ASSERT_TRUE((*f)->read(777, again).ok());
  EXPECT_EQ(again, p);
  // An error is the write's own status, not a later flush's.
  std::vector<uint8_t> small(10, 1);
  Status s = (*f)->write(uint64_t(64) << 30, small);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("capacity"), std::string::npos) << s.to_string();
  EXPECT_TRUE((*f)->flush().ok());
  EXPECT_TRUE((*f)->close().ok());
}

TEST_F(BlockServiceTest, RequestsWaitForBuffersInsteadOfFailing) {
  // 4 buffers, 2 clients x 16 writes in flight each: most wait for a buffer, none fails.
  // The target is in memory behind an emulated disk (4 MiB/s, 16 ms a block), so each
  // request holds its buffer for a while: a memory target alone takes a block without a
  // copy and hands its buffer back at once (then a wait happened only sometimes). At 1 ms
  // a block CI's TSan run once had no request wait: its clients sent no faster than that.
  BlockServiceOptions o;
  o.block_size = kBlock;
  o.buffers = 4;
  o.threads = 2;
  o.targets = {"mem"};
  o.capacity = 64 << 20;
  o.disk_bytes_per_s = 4 * 1024 * 1024;
  TcpNode s("127.0.9.6", test_port());
  BlockService svc(o, *s.rpc, nullptr, s.clock, s.core.timer_queue());
  ASSERT_TRUE(s.start().ok());
  ASSERT_TRUE(svc.open().ok());
  std::vector<std::unique_ptr<StripedFile>> files;
  for (TcpNode* c : {&c1_, &c2_}) {
    auto f = StripedFile::open(*c->rpc, std::string("w") + std::to_string(files.size()), {s.nid()},
                               fopts(16 * kBlock));
    ASSERT_TRUE(f.ok());
    files.push_back(std::move(*f));
  }
  auto p = test_pattern(32 * kBlock, 7);
  std::vector<std::thread> th;
  std::vector<Status> res(2);
  for (int i = 0; i < 2; ++i)
    th.emplace_back([&, i] {
      res[i] = files[i]->write(0, p);
      if (res[i].ok()) res[i] = files[i]->flush();
    });
  for (auto& t : th) t.join();
  EXPECT_TRUE(res[0].ok()) << res[0].to_string();
  EXPECT_TRUE(res[1].ok()) << res[1].to_string();
  auto st = svc.stats().buffers;
  EXPECT_EQ(st.acquired, 64u);
  EXPECT_LE(st.in_use_max, 4u);
  EXPECT_GT(st.waited, 0u);
  // The slowest writes' timelines on the server (diag ops --history) say what they waited
  // for: the slowest of all waited for a buffer, behind the others.
  std::vector<Op> slow = s.rpc->ops_history();
  ASSERT_FALSE(slow.empty());
  bool waited = false;
  for (const OpEvent& e : slow[0].events)
    waited |= e.what.rfind("waiting for a block buffer: all 4 of ", 0) == 0;
  EXPECT_TRUE(waited) << slow[0].events.size();
  EXPECT_EQ(st.in_use, 0u);
  for (auto& f : files) {
    std::vector<uint8_t> got(p.size());
    ASSERT_TRUE(f->read(0, got).ok());
    EXPECT_TRUE(got == p);
  }
  files.clear();
  svc.stop();
  s.shutdown();
}

TEST_F(BlockServiceTest, TheEmulatedDiskSetsTheRate) {
  // One target at 20 MB/s: 2 MiB written takes >= 0.1 s of disk time, which the service
  // counts exactly (the figure is the model's, not a timing).
  BlockServiceOptions o;
  o.block_size = kBlock;
  o.buffers = 8;
  o.threads = 2;
  o.targets = {"mem"};
  o.disk_bytes_per_s = 20 * 1024 * 1024;
  TcpNode s("127.0.9.5", test_port());
  BlockService svc(o, *s.rpc, nullptr, s.clock, s.core.timer_queue());
  ASSERT_TRUE(s.start().ok());
  ASSERT_TRUE(svc.open().ok());
  auto f = StripedFile::open(*c1_.rpc, "slow", {s.nid()}, fopts(4 << 20));
  ASSERT_TRUE(f.ok());
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*f)->write(0, test_pattern(2 << 20, 1)).ok());
  ASSERT_TRUE((*f)->flush().ok());
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(svc.stats().targets[0].busy, 100ms);
  EXPECT_GE(took, 100ms);  // a flush is acknowledged only when the disk is done
  svc.stop();
  s.shutdown();
}

TEST_F(BlockServiceTest, BadRequestsGetClearErrors) {
  BlockIo io{"x", 9, 0, 0, 10};  // no target 9
  RpcReply r = c1_.rpc->call(s1_.nid(), kMsgBlockWrite, encode_block_io(io),
                             make_bulk(Buffer::copy_of(std::string_view("0123456789"))));
  EXPECT_EQ(r.status.code(), Code::kInvalidArgument);
  io.target = 0;
  r = c1_.rpc->call(s1_.nid(), kMsgBlockWrite, encode_block_io(io),
                    make_bulk(Buffer::copy_of(std::string_view("012"))));  // 3 bytes, not 10
  EXPECT_EQ(r.status.code(), Code::kProtocol);
  r = c1_.rpc->call(s1_.nid(), kMsgBlockRead, Buffer::copy_of(std::string_view("junk")));
  EXPECT_EQ(r.status.code(), Code::kProtocol);
  // A node that is no block server: a striped file cannot be opened on it.
  auto f = StripedFile::open(*c1_.rpc, "x", {c2_.nid()}, fopts());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kNotFound) << f.status().to_string();
  EXPECT_NE(f.status().message().find(c2_.nid().to_string()), std::string::npos);
  EXPECT_FALSE(StripedFile::open(*c1_.rpc, "a/b", {s1_.nid()}, fopts()).ok());
}

}  // namespace
}  // namespace pfsnet
