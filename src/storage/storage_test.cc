// The block service's parts: striping, the emulated disk, the block buffers (on a manual
// clock), the targets (memory and a directory), the protocol's checks -- and the service
// and a striped file end to end over real TCP on loopback, inside this process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "net/net.h"
#include "rpc/node_timers.h"
#include "rpc/recovery_pinger.h"
#include "storage/block_service.h"
#include "storage/device_layout.h"
#include "storage/disk_model.h"
#include "storage/iobench.h"
#include "storage/layout.h"
#include "storage/protocol.h"
#include "storage/striped_file.h"
#include "storage/tokens.h"
#include "transport/lnd_switch.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

Nid nid(const char* s) { return *Nid::parse(s); }

TEST(StripeLayoutTest, BlocksGoRoundRobinAndRangesSplitAtBlocks) {
  auto l = StripeLayout::make(
      4096, {{nid("127.0.0.1@tcp"), 0}, {nid("127.0.0.2@tcp"), 0}, {nid("127.0.0.1@tcp"), 1}});
  ASSERT_TRUE(l.ok());
  // 100 bytes before block 1's end to 5000 bytes into block 3: blocks 1, 2, 3.
  auto e = l->map(2 * 4096 - 100, 100 + 4096 + 5000 - 4096);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].file_block, 1u);
  EXPECT_EQ(e[0].offset, 4096u - 100);
  EXPECT_EQ(e[0].length, 100u);
  EXPECT_EQ(e[0].target, 1u);
  EXPECT_EQ(e[0].target_block, 0u);
  EXPECT_EQ(e[1].file_block, 2u);
  EXPECT_EQ(e[1].target, 2u);
  EXPECT_EQ(e[1].length, 4096u);
  EXPECT_EQ(e[1].buf_offset, 100u);
  EXPECT_EQ(e[2].file_block, 3u);
  EXPECT_EQ(e[2].target, 0u);        // round robin: 3 mod 3
  EXPECT_EQ(e[2].target_block, 1u);  // that target's second block
  EXPECT_EQ(e[2].offset, 0u);
  EXPECT_EQ(e[2].length, 5000u - 4096);
  EXPECT_TRUE(l->map(123, 0).empty());
}

TEST(StripeLayoutTest, BadLayoutsAreRefused) {
  EXPECT_FALSE(StripeLayout::make(4096, {}).ok());
  EXPECT_FALSE(StripeLayout::make(5000, {{nid("127.0.0.1@tcp"), 0}}).ok());
  EXPECT_FALSE(StripeLayout::make(1024, {{nid("127.0.0.1@tcp"), 0}}).ok());
  auto dup = StripeLayout::make(4096, {{nid("127.0.0.1@tcp"), 2}, {nid("127.0.0.1@tcp"), 2}});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("listed twice"), std::string::npos);
}

TEST(DiskModelTest, TransfersQueueOneAfterAnotherAtTheRate) {
  DiskModel d(1'000'000);  // 1 MB/s: 1000 bytes take 1 ms
  TimePoint t0(std::chrono::seconds(10));
  EXPECT_EQ(d.schedule(t0, 1000), t0 + 1ms);
  EXPECT_EQ(d.schedule(t0, 1000), t0 + 2ms);          // queued behind the first
  EXPECT_EQ(d.schedule(t0 + 5ms, 500), t0 + 5500us);  // idle disk: starts at once
  EXPECT_EQ(d.busy(), 2500us);
  DiskModel none;
  EXPECT_EQ(none.schedule(t0, 1 << 20), t0);
}

TEST(BlockBuffersTest, ARequestWaitsForAFreeBufferFirstComeFirstServed) {
  ManualClock clock;
  auto pool = BlockBuffers::make(2, 4096, clock);
  std::vector<Buffer> held;
  std::vector<std::pair<int, Duration>> got;
  for (int i = 0; i < 4; ++i)
    pool->acquire([&, i](Buffer b, Duration waited) {
      EXPECT_EQ(b.size(), 4096u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);  // O_DIRECT can use it
      got.emplace_back(i, waited);
      held.push_back(std::move(b));
    });
  ASSERT_EQ(got.size(), 2u);  // two buffers: requests 2 and 3 wait
  auto s = pool->stats();
  EXPECT_EQ(s.in_use, 2u);
  EXPECT_EQ(s.waiting, 2u);
  clock.advance(3ms);
  auto give_one_back = [&] {
    Buffer b = std::move(held.front());  // its waiter runs (and pushes) when b goes
    held.erase(held.begin());
  };
  give_one_back();  // request 2 gets it
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2], std::make_pair(2, Duration(3ms)));
  clock.advance(2ms);
  give_one_back();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3], std::make_pair(3, Duration(5ms)));
  s = pool->stats();
  EXPECT_EQ(s.acquired, 4u);
  EXPECT_EQ(s.waited, 2u);
  EXPECT_EQ(s.wait_total, 8ms);
  EXPECT_EQ(s.wait_max, 5ms);
  EXPECT_EQ(s.waiting_max, 2u);
  // After stop a waiter gets an empty buffer.
  bool empty = false;
  pool->acquire([&](Buffer b, Duration) { empty = b.empty(); });
  EXPECT_FALSE(empty);  // waits: both buffers are held
  pool->stop();
  EXPECT_TRUE(empty);
  held.clear();
  EXPECT_EQ(pool->stats().in_use, 0u);
}

void store_round_trip(BlockStore& s) {
  std::vector<uint8_t> data(3000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 1);
  ASSERT_TRUE(s.write("f1", 5, 1000, data).ok());
  std::vector<uint8_t> out(4096, 0xAA);
  ASSERT_TRUE(s.read("f1", 5, 0, out).ok());
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(out[i], 0) << i;  // never written: zeros
  for (size_t i = 0; i < 3000; ++i) ASSERT_EQ(out[1000 + i], data[i]) << i;
  std::vector<uint8_t> other(100, 0xAA);
  ASSERT_TRUE(s.read("f2", 5, 1000, other).ok());  // another file: its own blocks
  EXPECT_EQ(other, std::vector<uint8_t>(100, 0));
  ASSERT_TRUE(s.read("f1", 99, 0, other).ok());  // past the end
  EXPECT_EQ(other, std::vector<uint8_t>(100, 0));
}

TEST(BlockStoreTest, MemoryAndDirectoryTargetsKeepWhatWasWritten) {
  auto mem = open_block_store("mem", 4096, 1 << 20);
  ASSERT_TRUE(mem.ok());
  store_round_trip(**mem);
  std::string dir = testing::TempDir() + "/pfsnet-store-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  auto d = open_block_store(dir, 4096, 1 << 20);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  store_round_trip(**d);
  EXPECT_NE((*d)->describe().find(dir), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir + "/f1"));
  std::filesystem::remove_all(dir);
}

// The memory target keeps a whole block's own memory and sends its own: no copy either
// way, and a block being sent keeps what it held while a later write changes the block.
TEST(BlockStoreTest, TheMemoryTargetTakesAndSharesWholeBlocksWithoutCopies) {
  auto mem = open_block_store("mem", 4096, 1 << 20);
  ASSERT_TRUE(mem.ok());
  BlockStore& s = **mem;
  EXPECT_FALSE(s.wants_aligned());
  EXPECT_FALSE(s.blocks_thread());
  Buffer whole = Buffer::page_aligned(4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(whole.data()) % 4096, 0u);
  std::memset(whole.data(), 0x11, 4096);
  const uint8_t* mine = whole.data();
  ASSERT_TRUE(s.write_block("f", 3, std::move(whole)).ok());
  BulkData sent = s.read_block("f", 3);
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->data(), mine) << "the block is the request's memory, shared with the reply";
  // A partial write while the block is being sent: the reply keeps the old bytes.
  std::vector<uint8_t> part(100, 0x22);
  ASSERT_TRUE(s.write("f", 3, 10, part).ok());
  EXPECT_EQ(sent->data()[10], 0x11);
  std::vector<uint8_t> now(4096);
  ASSERT_TRUE(s.read("f", 3, 0, now).ok());
  EXPECT_EQ(now[9], 0x11);
  EXPECT_EQ(now[10], 0x22);
  EXPECT_EQ(now[110], 0x11);
  // A whole-block write replaces the block; the one being sent is unchanged.
  Buffer next = Buffer::page_aligned(4096);
  std::memset(next.data(), 0x33, 4096);
  ASSERT_TRUE(s.write_block("f", 3, std::move(next)).ok());
  EXPECT_EQ(sent->data()[0], 0x11);
  EXPECT_EQ(s.read_block("f", 3)->data()[0], 0x33);
  // Never written: a block of zeros.
  BulkData zeros = s.read_block("f", 77);
  ASSERT_TRUE(zeros);
  EXPECT_EQ(zeros->size(), 4096u);
  EXPECT_EQ(std::count(zeros->data(), zeros->data() + 4096, 0), 4096);
  // Memory a pool lends (a fabric's receive buffers) is copied, and goes back to its pool.
  struct Pool final : BufferPool {
    int back = 0;
    void give_back(uint8_t*) override { ++back; }
  };
  auto pool = std::make_shared<Pool>();
  std::vector<uint8_t> lent(4096, 0x44);
  ASSERT_TRUE(s.write_block("f", 4, Buffer::pooled(lent.data(), 4096, pool)).ok());
  EXPECT_EQ(pool->back, 1);
  EXPECT_NE(s.read_block("f", 4)->data(), lent.data());
  EXPECT_EQ(s.read_block("f", 4)->data()[4095], 0x44);
  // The capacity holds for kept blocks too: 256 blocks of 4 KiB fit, 2 are used.
  for (uint64_t b = 5; b < 256; ++b) ASSERT_TRUE(s.write_block("f", b, Buffer(4096)).ok()) << b;
  for (uint64_t b = 0; b < 3; ++b) ASSERT_TRUE(s.write_block("h", b, Buffer(4096)).ok()) << b;
  Status full = s.write_block("g", 0, Buffer(4096));
  EXPECT_FALSE(full.ok());
  EXPECT_NE(full.message().find("full"), std::string::npos) << full.to_string();
}

TEST(BlockStoreTest, FullTargetsAndBadSpecsAreClearErrors) {
  auto mem = open_block_store("mem", 4096, 8192);  // two blocks
  ASSERT_TRUE(mem.ok());
  std::vector<uint8_t> b(10, 1);
  EXPECT_TRUE((*mem)->write("f", 0, 0, b).ok());
  EXPECT_TRUE((*mem)->write("f", 1, 0, b).ok());
  Status full = (*mem)->write("f", 2, 0, b);
  EXPECT_FALSE(full.ok());
  EXPECT_NE(full.message().find("capacity"), std::string::npos);
  EXPECT_TRUE((*mem)->write("f", 1, 100, b).ok());  // a block it has still takes writes
  Status all = (*mem)->write("g", 0, 0, b);         // another file: no room left in all
  EXPECT_NE(all.message().find("full"), std::string::npos) << all.to_string();
  EXPECT_FALSE(open_block_store("relative/dir", 4096, 1 << 20).ok());
  EXPECT_FALSE(open_block_store("/proc/version", 4096, 1 << 20).ok());  // not a directory
  EXPECT_FALSE(check_file_name("../etc").ok());
  EXPECT_FALSE(check_file_name("..").ok());
  EXPECT_FALSE(check_file_name("").ok());
  EXPECT_FALSE(check_file_name(std::string(65, 'a')).ok());
  EXPECT_TRUE(check_file_name("bench.file-1_a").ok());
}

// A block device's layout: the most slots that fit, the label and the slot records
// read back as written, and every damage or foreign content seen as such.
TEST(DeviceLayoutTest, LabelsAndRecordsRoundTripAndDamageIsSeen) {
  auto l = DeviceLayout::fit(16 << 20, 65536);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->slots, 255u);                  // (16 MiB - 4 KiB) / (64 KiB + 128 B)
  EXPECT_EQ(l->data_offset, 4096u + 32768u);  // 255 records rounded up to 4 KiB
  EXPECT_LE(l->end(), uint64_t{16} << 20);
  EXPECT_EQ(l->block_offset(1) - l->block_offset(0), 65536u);
  EXPECT_EQ(l->block_offset(0) % 4096, 0u);
  auto tight = DeviceLayout::fit(3 * 4096, 4096);  // one slot: label, table page, block
  ASSERT_TRUE(tight.ok());
  EXPECT_EQ(tight->slots, 1u);
  EXPECT_EQ(tight->end(), 3u * 4096);
  EXPECT_FALSE(DeviceLayout::fit(2 * 4096, 4096).ok());  // no room for a block
  EXPECT_FALSE(DeviceLayout::fit(1 << 20, 3000).ok());   // not a power of two

  auto label = encode_device_label(*l);
  LabelRead r = decode_device_label(label, 16 << 20);
  ASSERT_EQ(r.state, LabelState::kLabelled) << r.why;
  EXPECT_EQ(r.layout.slots, l->slots);
  EXPECT_EQ(r.layout.block_size, 65536u);
  EXPECT_EQ(r.layout.data_offset, l->data_offset);
  EXPECT_EQ(decode_device_label(label, 32 << 20).state, LabelState::kLabelled);  // grown
  LabelRead shrunk = decode_device_label(label, 8 << 20);
  EXPECT_EQ(shrunk.state, LabelState::kForeign);
  EXPECT_NE(shrunk.why.find("does not fit"), std::string::npos) << shrunk.why;
  std::vector<uint8_t> zeros(4096, 0);
  EXPECT_EQ(decode_device_label(zeros, 16 << 20).state, LabelState::kBlank);
  auto damaged = label;
  damaged[17] ^= 1;  // the slot count
  LabelRead bad = decode_device_label(damaged, 16 << 20);
  EXPECT_EQ(bad.state, LabelState::kForeign);
  EXPECT_NE(bad.why.find("CRC"), std::string::npos) << bad.why;
  std::vector<uint8_t> theirs(4096, 0);
  theirs[1024] = 0x53;  // e.g. an ext4 superblock's page
  EXPECT_NE(decode_device_label(theirs, 16 << 20).why.find("not a pfsnet label"),
            std::string::npos);
  EXPECT_EQ(decode_device_label(std::span(label.data(), 100), 16 << 20).state,
            LabelState::kForeign);

  auto rec = encode_slot_record({"bench.file", 123456789});
  auto back = decode_slot_record(rec);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->file, "bench.file");
  EXPECT_EQ(back->block, 123456789u);
  EXPECT_FALSE(
      decode_slot_record(std::vector<uint8_t>(kDeviceRecordBytes, 0)).has_value());  // free
  for (size_t at : {size_t(0), size_t(5), size_t(72), size_t(125)}) {
    auto torn = rec;
    torn[at] ^= 0x10;
    EXPECT_FALSE(decode_slot_record(torn).has_value()) << "byte " << at;
  }
  EXPECT_FALSE(decode_slot_record(encode_slot_record({"../etc", 1})).has_value());  // a bad name
  EXPECT_FALSE(decode_slot_record(std::span(rec.data(), 64)).has_value());
}

// IOBENCH requests and replies come from peers: every field is checked; a spec from the
// admin socket likewise; the requests per thread follow the cell size.
TEST(IobenchTest, MessagesAndSpecsAreChecked) {
  IobenchRequest q;
  q.job = 7;
  q.file = "bench";
  q.servers = {*Nid::parse("127.0.0.1@tcp")};
  q.threads = 4;
  q.requests = 10;
  q.first_segment = 8;
  q.direct = true;
  Buffer b = q.encode();
  auto d = decode_iobench_request(b.span());
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->job, 7u);
  EXPECT_EQ(d->threads, 4);
  EXPECT_EQ(d->first_segment, 8u);
  EXPECT_TRUE(d->direct);
  auto bad = [](const std::string& text) {
    auto r = decode_iobench_request(
        std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    return !r.ok() && r.status().code() == Code::kProtocol;
  };
  std::string ok_tail = R"("servers":["127.0.0.1@tcp"],"op":"write","threads":1,"requests":1,)"
                        R"("size":4096,"first_segment":0})";
  EXPECT_FALSE(bad(R"({"phase":"prepare","job":1,"file":"f",)" + ok_tail));
  EXPECT_TRUE(bad(R"({"phase":"prepare","job":1,"direct":1,"file":"f",)" + ok_tail));
  EXPECT_TRUE(bad("not json"));
  EXPECT_TRUE(bad(R"({"phase":"erase","job":1})"));
  EXPECT_TRUE(bad(R"({"phase":"prepare","job":1,"file":"../f",)" + ok_tail));
  EXPECT_TRUE(bad(R"({"phase":"prepare","job":-1,"file":"f",)" + ok_tail));
  EXPECT_TRUE(bad(R"({"phase":"prepare","job":1,"file":"f","servers":[],"op":"write",)"
                  R"("threads":1,"requests":1,"size":4096,"first_segment":0})"));
  EXPECT_TRUE(bad(R"({"phase":"prepare","job":1,"file":"f","servers":["127.0.0.1@tcp"],)"
                  R"("op":"write","threads":100000,"requests":1,"size":4096,"first_segment":0})"));
  // A count left out.
  EXPECT_TRUE(bad(R"({"phase":"prepare","job":1,"file":"f","servers":["127.0.0.1@tcp"],)"
                  R"("op":"write","requests":1,"size":4096,"first_segment":0})"));
  // Segments past 1 PiB.
  EXPECT_TRUE(bad(R"({"phase":"prepare","job":1,"file":"f","servers":["127.0.0.1@tcp"],)"
                  R"("op":"write","threads":1,"requests":1099511627776,"size":67108864,)"
                  R"("first_segment":0})"));
  IobenchNodeResult res;
  res.bytes = 100;
  res.start_unix_ns = 5;
  res.end_unix_ns = 9;
  res.cpu_s = 0.5;
  auto back = decode_iobench_result(encode_iobench_result(res).span());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->bytes, 100u);
  EXPECT_DOUBLE_EQ(back->cpu_s, 0.5);
  std::string rev = R"({"bytes":1,"start_unix_ns":9,"end_unix_ns":5})";
  EXPECT_FALSE(
      decode_iobench_result(std::span(reinterpret_cast<const uint8_t*>(rev.data()), rev.size()))
          .ok());

  nlohmann::json spec = {{"clients", {"127.0.0.2@tcp", "127.0.0.3@tcp"}},
                         {"servers", {"127.0.0.1@tcp"}},
                         {"nodes", {1, 2}},
                         {"threads", {1, 4}},
                         {"cell_bytes", 8 << 20}};
  auto s = IobenchSpec::from_json(spec);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->requests_for(1, 1), 32u);  // 8 MiB of 256 KiB
  EXPECT_EQ(s->requests_for(2, 4), 4u);
  EXPECT_EQ(s->requests_for(32, 16), 1u);  // at least one each: 128 MiB
  s->cell_bytes = 0;
  EXPECT_EQ(s->requests_for(32, 16), 2000u);  // the paper's
  for (auto [key, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"nodes", {3}},
                                                           {"threads", {0}},
                                                           {"ops", {"write", "write"}},
                                                           {"size", 12},
                                                           {"file", "a/b"},
                                                           {"direct", "yes"},
                                                           {"servers", nlohmann::json::array()}}) {
    nlohmann::json j = spec;
    j[key] = value;
    auto e = IobenchSpec::from_json(j);
    EXPECT_FALSE(e.ok()) << key;
    EXPECT_EQ(e.status().code(), Code::kInvalidArgument) << key;
  }
}

TEST(BlockProtocolTest, DecodersCheckEveryField) {
  BlockIo io{"data", 3, 77, 4096, 8192};
  auto d = decode_block_io(encode_block_io(io).span(), 1 << 20);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->file, "data");
  EXPECT_EQ(d->target, 3u);
  EXPECT_EQ(d->block, 77u);
  EXPECT_EQ(d->offset, 4096u);
  EXPECT_EQ(d->length, 8192u);
  EXPECT_FALSE(decode_block_io(encode_block_io(io).span(), 8192).ok());  // past the block
  io.length = 0;
  EXPECT_FALSE(decode_block_io(encode_block_io(io).span(), 1 << 20).ok());
  io = {"../x", 0, 0, 0, 10};
  EXPECT_FALSE(decode_block_io(encode_block_io(io).span(), 1 << 20).ok());
  Buffer b = encode_block_io({"data", 0, 0, 0, 10});
  EXPECT_FALSE(decode_block_io(b.span().first(b.size() - 1), 1 << 20).ok());  // short
  auto i = decode_block_info(encode_block_info({262144, 2, 1 << 30}).span());
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(i->block_size, 262144u);
  EXPECT_EQ(i->targets, 2u);
}

// A holder's ranges: touching ranges merge, a removal splits what it cuts, and the
// queries see the set as bytes held.
TEST(RangeSetTest, MergesWhatTouchesSplitsWhatARemovalCutsAndAnswersAsBytesHeld) {
  RangeSet r;
  r.add(100, 200);
  r.add(300, 400);
  r.add(5, 5);  // empty: ignored
  EXPECT_EQ(r.ranges(), (std::vector<TokenRange>{{100, 200}, {300, 400}}));
  r.add(200, 250);  // touches [100, 200)
  EXPECT_EQ(r.ranges(), (std::vector<TokenRange>{{100, 250}, {300, 400}}));
  r.add(240, 300);  // bridges the two
  EXPECT_EQ(r.ranges(), (std::vector<TokenRange>{{100, 400}}));
  r.add(500, 600);
  r.add(50, 700);  // swallows them all
  EXPECT_EQ(r.ranges(), (std::vector<TokenRange>{{50, 700}}));
  r.remove(100, 200);
  r.remove(300, 310);
  EXPECT_EQ(r.ranges(), (std::vector<TokenRange>{{50, 100}, {200, 300}, {310, 700}}));
  r.remove(250, 320);  // cuts the end of one and the start of the next
  EXPECT_EQ(r.ranges(), (std::vector<TokenRange>{{50, 100}, {200, 250}, {320, 700}}));
  r.remove(0, 60);
  r.remove(690, 1000);
  r.remove(400, 400);  // empty: nothing
  EXPECT_EQ(r.ranges(), (std::vector<TokenRange>{{60, 100}, {200, 250}, {320, 690}}));
  EXPECT_TRUE(r.covers(60, 100));
  EXPECT_TRUE(r.covers(330, 340));
  EXPECT_FALSE(r.covers(90, 210));  // spans a gap
  EXPECT_FALSE(r.covers(10, 20));
  EXPECT_FALSE(r.covers(700, 800));
  EXPECT_TRUE(r.overlaps(99, 200));
  EXPECT_FALSE(r.overlaps(100, 200));  // the gap exactly
  EXPECT_FALSE(r.overlaps(0, 60));
  EXPECT_TRUE(r.overlaps(689, 2000));
  EXPECT_EQ(r.first_at_or_after(0), 60u);
  EXPECT_EQ(r.first_at_or_after(70), 70u);
  EXPECT_EQ(r.first_at_or_after(100), 200u);  // an end is not held
  EXPECT_EQ(r.first_at_or_after(689), 689u);
  EXPECT_EQ(r.first_at_or_after(690), std::nullopt);
  r.remove(0, 1000);
  EXPECT_TRUE(r.empty());
}

// The manager's table: what a request may be granted beyond the range it needs (GPFS's
// desired range), what conflicts, and what a revocation leaves each holder.
TEST(TokenTableTest, GrantsTheLargestRangeNoOtherNodeHoldsAndRevokesOnlyWhatItTakes) {
  const Nid a = *Nid::parse("127.0.0.1@tcp"), b = *Nid::parse("127.0.0.2@tcp"),
            c = *Nid::parse("127.0.0.3@tcp");
  constexpr uint64_t kEnd = kTokenMaxOffset;
  TokenTable t;
  // A lone sequential writer gets the whole file with its first block.
  EXPECT_EQ(t.grantable_end("f", a, 100, kEnd), kEnd);
  EXPECT_EQ(t.grantable_end("f", a, 100, 0), 100u);  // no desired range: just the required
  t.grant("f", a, 0, kEnd);
  EXPECT_TRUE(t.conflicts("f", a, 0, 100).empty());  // its own token is no conflict
  // A second writer at 1000: a holds it; it gives up [1000, end), keeps [0, 1000).
  EXPECT_EQ(t.conflicts("f", b, 1000, 1100), std::vector<Nid>{a});
  t.revoke("f", a, 1000, kEnd);
  EXPECT_EQ(t.held("f", a), (std::vector<TokenRange>{{0, 1000}}));
  EXPECT_TRUE(t.conflicts("f", b, 1000, 1100).empty());
  EXPECT_EQ(t.grantable_end("f", b, 1100, kEnd), kEnd);
  t.grant("f", b, 1000, kEnd);
  // A third at 3000 takes from b only; one at 500 would take from a only.
  EXPECT_EQ(t.conflicts("f", c, 3000, 3100), std::vector<Nid>{b});
  EXPECT_EQ(t.conflicts("f", c, 500, 600), std::vector<Nid>{a});
  t.revoke("f", b, 3000, kEnd);
  t.grant("f", c, 3000, t.grantable_end("f", c, 3100, kEnd));
  EXPECT_EQ(t.held("f", b), (std::vector<TokenRange>{{1000, 3000}}));
  EXPECT_EQ(t.held("f", c), (std::vector<TokenRange>{{3000, kEnd}}));
  // A desired range stops where another node's token starts, wherever the holder's
  // ranges lie: a holds [0, 1000) and [5000, 6000) now.
  t.grant("f", a, 5000, 6000);  // (as if c had given it up)
  t.revoke("f", c, 5000, 6000);
  EXPECT_EQ(t.grantable_end("f", c, 3100, kEnd), 5000u);
  EXPECT_EQ(t.grantable_end("f", b, 1100, kEnd), 3000u);  // where c's token starts
  // Another file is another table.
  EXPECT_EQ(t.grantable_end("g", b, 10, kEnd), kEnd);
  t.drop("f", a);
  EXPECT_TRUE(t.held("f", a).empty());

  // The wire: want_end is optional, and when there it is checked.
  auto m = decode_token_range(encode_token_range({"f", 0, 4096, kEnd}).span(), true);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->want_end, kEnd);
  m = decode_token_range(encode_token_range({"f", 0, 4096}).span(), true);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->want_end, 0u);
  for (const char* bad : {R"({"file":"f","start":0,"end":4096,"want_end":100})",
                          R"({"file":"f","start":0,"end":4096,"want_end":"x"})",
                          R"({"file":"f","start":0,"end":4096,"want_end":4611686018427387905})"}) {
    auto e = decode_token_range(Buffer::copy_of(std::string_view(bad)).span(), true);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), Code::kProtocol);
  }
}

// A node's network and RPC engine over TCP on a loopback address, as pfsnetd wires them.
struct TcpNode {
  explicit TcpNode(const std::string& addr, uint16_t port, int peer_credits = 8) {
    cfg.nets.push_back(NetConfig{*Nid::parse(addr + "@tcp"), port});
    cfg.lnet.peer_credits = peer_credits;
    cfg.lnet.transaction_timeout = 10;
    auto to = transport_options(cfg, "0123456789abcdef0123");
    EXPECT_TRUE(to.ok());
    holds = std::make_unique<ThreadTimerQueue>(clock);
    net = std::make_unique<Net>(
        NetOptions::from(cfg), std::vector<Nid>{cfg.nets[0].nid}, clock,
        [this, o = *to](TransportEvents& ev) {
          return make_node_transport(
              cfg, o, {cfg.nets[0].nid}, clock, *holds,
              [this](const Connection& c, const OutFrame& f) { return net->fault_hold(c, f); }, ev);
        });
    rpc = std::make_unique<RpcEngine>(*net, RpcOptions::from(cfg));
    pinger = std::make_unique<RecoveryPinger>(*net, *rpc, 3s);
    timers = std::make_unique<NodeTimers>(*net, *rpc, nullptr, pinger.get());
  }
  Status start() {
    Status s = net->start();
    if (s.ok()) timers->start(50ms);
    return s;
  }
  void shutdown() {
    timers->stop();
    rpc->shutdown();
    net->shutdown();
    holds->stop();
  }
  ~TcpNode() { shutdown(); }
  Nid nid() const { return cfg.nets[0].nid; }
  Config cfg;
  MonotonicClock clock;
  std::unique_ptr<ThreadTimerQueue> holds;
  std::unique_ptr<Net> net;
  std::unique_ptr<RpcEngine> rpc;
  std::unique_ptr<RecoveryPinger> pinger;
  std::unique_ptr<NodeTimers> timers;
};

uint16_t test_port() { return static_cast<uint16_t>(20000 + getpid() % 20000); }

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 g(seed);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

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
    svc1_ = std::make_unique<BlockService>(o, *s1_.rpc, nullptr, s1_.clock);
    o.targets = {"mem"};
    svc2_ = std::make_unique<BlockService>(o, *s2_.rpc, nullptr, s2_.clock);
    for (TcpNode* n : {&s1_, &c1_, &c2_})
      tokens_.push_back(std::make_unique<TokenService>(*n->rpc, n->clock, 10s));
    for (TcpNode* n : {&s1_, &s2_, &c1_, &c2_}) ASSERT_TRUE(n->start().ok());
    ASSERT_TRUE(svc1_->start().ok());
    ASSERT_TRUE(svc2_->start().ok());
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
      for (int i = 0; i < 8; ++i) EXPECT_TRUE((*f1)->write(i * kBlock, pattern(kBlock, i)).ok());
    });
    std::thread b([&] {
      for (int i = 8; i < 16; ++i) EXPECT_TRUE((*f2)->write(i * kBlock, pattern(kBlock, i)).ok());
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
    auto pa = pattern(kRange, 1000 + round), pb = pattern(kRange, 2000 + round);
    std::thread a([&] { EXPECT_TRUE((*f1)->write(0, pa).ok()); });
    std::thread b([&] { EXPECT_TRUE((*f2)->write(0, pb).ok()); });
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
  auto mine = pattern(kBlock, 7), theirs = pattern(kBlock, 8);
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

// A holder that answers a revocation when the test lets it, giving back what the test says.
class GatedHolder final : public TokenHolder {
 public:
  explicit GatedHolder(std::string file) : file_(std::move(file)) {}
  const std::string& token_file() const override { return file_; }
  Result<uint64_t> release_range(uint64_t start, uint64_t end, uint64_t want_end) override {
    std::unique_lock lk(mu_);
    asked_.push_back({start, end, want_end});
    cv_.notify_all();
    if (!cv_.wait_for(lk, 10s, [&] { return open_; })) return Status(Code::kTimeout, "gate");
    return std::min(std::max(end, want_end), release_end_);
  }
  void open(uint64_t release_end) {
    std::lock_guard lk(mu_);
    open_ = true;
    release_end_ = release_end;
    cv_.notify_all();
  }
  bool wait_asked(size_t n) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, 10s, [&] { return asked_.size() >= n; });
  }
  std::vector<std::array<uint64_t, 3>> asked() {
    std::lock_guard lk(mu_);
    return asked_;
  }

 private:
  const std::string file_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  uint64_t release_end_ = 0;
  std::vector<std::array<uint64_t, 3>> asked_;
};

// The holder decides how much of the desired range it gives up (GPFS's rule), the manager
// grants what it gave, and a request waiting for a revocation holds up neither a request
// of another range nor anything but its holder's own requests (a grant to the holder then
// could be undone by its answer). An answer outside the range asked for drops the holder.
TEST_F(BlockServiceTest, TheHolderDecidesWhatItGivesUpAndOthersAreNotHeldUp) {
  TokenService &manager = *tokens_[0], &t1 = *tokens_[1], &t2 = *tokens_[2];
  constexpr uint64_t B = kBlock, kEnd = kTokenMaxOffset;
  GatedHolder h1("g");
  t1.add_holder(&h1);
  struct Unregister {
    TokenService& t;
    TokenHolder* h;
    ~Unregister() { t.remove_holder(h); }  // on every way out, before h1 goes
  } unregister{t1, &h1};
  auto g = t1.acquire(s1_.nid(), "g", 0, B, 20 * B);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(*g, (TokenRange{0, 20 * B}));
  // c2 needs block 10 and would like the rest: c1 is asked, and answers when let.
  auto taking = std::async(std::launch::async,
                           [&] { return t2.acquire(s1_.nid(), "g", 10 * B, 11 * B, kEnd); });
  ASSERT_TRUE(h1.wait_asked(1));
  EXPECT_EQ(h1.asked()[0], (std::array<uint64_t, 3>{10 * B, 11 * B, kEnd}));
  // Meanwhile c1's own next request waits; c2's request of a range nobody holds does not.
  auto own =
      std::async(std::launch::async, [&] { return t1.acquire(s1_.nid(), "g", 40 * B, 41 * B); });
  auto free = t2.acquire(s1_.nid(), "g", 30 * B, 31 * B);
  ASSERT_TRUE(free.ok()) << free.status().to_string();
  EXPECT_EQ(*free, (TokenRange{30 * B, 31 * B}));
  EXPECT_EQ(own.wait_for(200ms), std::future_status::timeout) << "granted while being revoked";
  // c1 keeps from block 15 on (as a writer of its there would): c2 gets [10, 15) blocks.
  h1.open(15 * B);
  auto took = taking.get();
  ASSERT_TRUE(took.ok()) << took.status().to_string();
  EXPECT_EQ(*took, (TokenRange{10 * B, 15 * B}));
  auto mine = own.get();
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  EXPECT_EQ(*mine, (TokenRange{40 * B, 41 * B}));
  auto st = manager.stats();
  EXPECT_EQ(st.revocations, 1u);
  EXPECT_EQ(st.holders_dropped, 0u);
  // c2 again, inside what c1 kept: c1 answers 15, below the required end -- out of
  // range, so c1 loses its tokens on the file, and c2 is granted.
  auto bad = t2.acquire(s1_.nid(), "g", 16 * B, 17 * B);
  ASSERT_TRUE(bad.ok()) << bad.status().to_string();
  EXPECT_EQ(*bad, (TokenRange{16 * B, 17 * B}));
  EXPECT_EQ(manager.stats().holders_dropped, 1u);
  EXPECT_EQ(manager.stats().revocations, 2u);
  // c1 holds nothing now: c2 takes its old first blocks without a revocation.
  auto after = t2.acquire(s1_.nid(), "g", 0, B, 10 * B);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, (TokenRange{0, 10 * B}));
  EXPECT_EQ(manager.stats().revocations, 2u);
}

// A striped file gives up, of a range another node takes, only what it does not use: a
// writer of its that left off past the required range keeps going there without a new
// token, and the taker gets the rest in one.
TEST_F(BlockServiceTest, AWriterKeepsTheRangeItGoesOnInWhenAnotherTakesPartOfItsToken) {
  TokenService &manager = *tokens_[0], &t1 = *tokens_[1], &t2 = *tokens_[2];
  auto files = open_both("keep", t1, t2);
  auto &f1 = files.first, &f2 = files.second;
  ASSERT_TRUE(f1.ok() && f2.ok());
  // c1: two sequential runs, blocks 0-3 and 20-23 (one token: its first write's, the rest
  // of the file).
  for (int i : {0, 1, 2, 3, 20, 21, 22, 23})
    ASSERT_TRUE((*f1)->write(i * kBlock, pattern(kBlock, i)).ok());
  ASSERT_TRUE((*f1)->flush().ok());
  EXPECT_EQ((*f1)->stats().tokens_acquired, 1u);
  // c2 writes blocks 10 on: c1 gives up [10, 24) -- not from 24, where its writer goes on.
  for (int i = 10; i < 24; ++i) ASSERT_TRUE((*f2)->write(i * kBlock, pattern(kBlock, i)).ok());
  EXPECT_EQ((*f2)->stats().tokens_acquired, 1u);
  EXPECT_EQ((*f1)->stats().tokens_revoked, 1u);
  EXPECT_EQ(manager.stats().revocations, 1u);
  for (int i = 24; i < 28; ++i) ASSERT_TRUE((*f1)->write(i * kBlock, pattern(kBlock, i)).ok());
  EXPECT_EQ((*f1)->stats().tokens_acquired, 1u) << "c1 lost the range its writer went on in";
  ASSERT_TRUE((*f1)->close().ok());
  ASSERT_TRUE((*f2)->close().ok());
  // Each block is its last writer's.
  auto check = StripedFile::open(*c1_.rpc, "keep", {s1_.nid(), s2_.nid()}, fopts());
  ASSERT_TRUE(check.ok());
  for (int i : {0, 3, 10, 20, 23, 24, 27}) {
    std::vector<uint8_t> got(kBlock);
    ASSERT_TRUE((*check)->read(i * kBlock, got).ok());
    EXPECT_EQ(got, pattern(kBlock, i)) << "block " << i;
  }
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
    auto p = pattern(n, i);
    ASSERT_TRUE((*f)->write(pos, p).ok());
    std::copy(p.begin(), p.end(), want.begin() + pos);
    pos += n;
  }
  auto over = pattern(2 * kBlock + 5, 99);
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
  auto p = pattern(kBlock, 5);
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
  auto p = pattern(3 * kBlock + 1234, 21);
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
  BlockService svc(o, *s.rpc, nullptr, s.clock);
  ASSERT_TRUE(s.start().ok());
  ASSERT_TRUE(svc.start().ok());
  std::vector<std::unique_ptr<StripedFile>> files;
  for (TcpNode* c : {&c1_, &c2_}) {
    auto f = StripedFile::open(*c->rpc, std::string("w") + std::to_string(files.size()), {s.nid()},
                               fopts(16 * kBlock));
    ASSERT_TRUE(f.ok());
    files.push_back(std::move(*f));
  }
  auto p = pattern(32 * kBlock, 7);
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
  BlockService svc(o, *s.rpc, nullptr, s.clock);
  ASSERT_TRUE(s.start().ok());
  ASSERT_TRUE(svc.start().ok());
  auto f = StripedFile::open(*c1_.rpc, "slow", {s.nid()}, fopts(4 << 20));
  ASSERT_TRUE(f.ok());
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*f)->write(0, pattern(2 << 20, 1)).ok());
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
