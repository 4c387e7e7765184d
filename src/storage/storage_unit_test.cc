// The block service's parts on their own: striping, the emulated disk, the block buffers
// (on a manual clock), the targets (memory and a directory), the device layout, iobench's
// messages, the protocol's checks, the range set and the token table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <random>

#include "base/test_nid.h"
#include "storage/block_service.h"
#include "storage/device_layout.h"
#include "storage/disk_model.h"
#include "storage/iobench.h"
#include "storage/layout.h"
#include "storage/protocol.h"
#include "storage/tokens.h"
#include "wire/crc32c.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

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
  std::vector<std::pair<int, size_t>> queued;  // who waits, behind how many (diag ops)
  for (int i = 0; i < 4; ++i)
    pool->acquire(
        [&, i](Buffer b, Duration waited) {
          EXPECT_EQ(b.size(), 4096u);
          EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);  // O_DIRECT can use it
          got.emplace_back(i, waited);
          held.push_back(std::move(b));
        },
        [&, i](size_t ahead) { queued.emplace_back(i, ahead); });
  ASSERT_EQ(got.size(), 2u);  // two buffers: requests 2 and 3 wait
  EXPECT_EQ(queued, (std::vector<std::pair<int, size_t>>{{2, 0}, {3, 1}}));
  EXPECT_EQ(pool->count(), 2u);
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
TEST(BlockStoreTest, TheMemoryTargetTakesAndSharesWholeBlocksWithoutCopiesAndTheirCrc) {
  auto mem = open_block_store("mem", 4096, 1 << 20);
  ASSERT_TRUE(mem.ok());
  BlockStore& s = **mem;
  EXPECT_FALSE(s.wants_aligned());
  EXPECT_FALSE(s.blocks_thread());
  Buffer whole = Buffer::page_aligned(4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(whole.data()) % 4096, 0u);
  std::memset(whole.data(), 0x11, 4096);
  const uint8_t* mine = whole.data();
  const uint32_t crc = crc32c(whole.span());
  ASSERT_TRUE(s.write_block("f", 3, std::move(whole), crc).ok());
  SharedBlock shared = s.read_block("f", 3);
  BulkData sent = shared.data;
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->data(), mine) << "the block is the request's memory, shared with the reply";
  EXPECT_EQ(shared.crc, crc) << "the writer's CRC is kept with the block";
  // A partial write while the block is being sent: the reply keeps the old bytes; the
  // block's CRC is no longer the writer's, and goes.
  std::vector<uint8_t> part(100, 0x22);
  ASSERT_TRUE(s.write("f", 3, 10, part).ok());
  EXPECT_EQ(sent->data()[10], 0x11);
  EXPECT_FALSE(s.read_block("f", 3).crc.has_value());
  std::vector<uint8_t> now(4096);
  ASSERT_TRUE(s.read("f", 3, 0, now).ok());
  EXPECT_EQ(now[9], 0x11);
  EXPECT_EQ(now[10], 0x22);
  EXPECT_EQ(now[110], 0x11);
  // A whole-block write replaces the block; the one being sent is unchanged.
  Buffer next = Buffer::page_aligned(4096);
  std::memset(next.data(), 0x33, 4096);
  ASSERT_TRUE(s.write_block("f", 3, std::move(next), std::nullopt).ok());
  EXPECT_EQ(sent->data()[0], 0x11);
  EXPECT_EQ(s.read_block("f", 3).data->data()[0], 0x33);
  EXPECT_FALSE(s.read_block("f", 3).crc.has_value());  // none was given
  // Never written: a block of zeros, with their CRC.
  SharedBlock zeros = s.read_block("f", 77);
  ASSERT_TRUE(zeros.data);
  EXPECT_EQ(zeros.data->size(), 4096u);
  EXPECT_EQ(std::count(zeros.data->data(), zeros.data->data() + 4096, 0), 4096);
  EXPECT_EQ(zeros.crc, crc32c(zeros.data->span()));
  // Memory a pool lends (a fabric's receive buffers) is copied, and goes back to its pool.
  struct Pool final : BufferPool {
    int back = 0;
    void give_back(uint8_t*) override { ++back; }
  };
  auto pool = std::make_shared<Pool>();
  std::vector<uint8_t> lent(4096, 0x44);
  ASSERT_TRUE(s.write_block("f", 4, Buffer::pooled(lent.data(), 4096, pool), crc32c(lent)).ok());
  EXPECT_EQ(pool->back, 1);
  EXPECT_NE(s.read_block("f", 4).data->data(), lent.data());
  EXPECT_EQ(s.read_block("f", 4).data->data()[4095], 0x44);
  EXPECT_EQ(s.read_block("f", 4).crc, crc32c(lent));  // the copy keeps it
  // The capacity holds for kept blocks too: 256 blocks of 4 KiB fit, 2 are used.
  for (uint64_t b = 5; b < 256; ++b)
    ASSERT_TRUE(s.write_block("f", b, Buffer(4096), std::nullopt).ok()) << b;
  for (uint64_t b = 0; b < 3; ++b)
    ASSERT_TRUE(s.write_block("h", b, Buffer(4096), std::nullopt).ok()) << b;
  Status full = s.write_block("g", 0, Buffer(4096), std::nullopt);
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
  EXPECT_EQ(d->file, "bench");
  EXPECT_EQ(d->servers, q.servers);
  EXPECT_EQ(d->requests, 10u);
  auto refused = [](const Buffer& b) {
    auto r = decode_iobench_request(b.span());
    return !r.ok() && r.status().code() == Code::kProtocol;
  };
  auto refused_with = [&](auto change) {
    IobenchRequest x = q;
    change(x);
    return refused(x.encode());
  };
  EXPECT_FALSE(refused(q.encode()));
  EXPECT_TRUE(refused_with([](IobenchRequest& x) { x.phase = "erase"; }));
  EXPECT_TRUE(refused_with([](IobenchRequest& x) { x.file = "../f"; }));
  EXPECT_TRUE(refused_with([](IobenchRequest& x) { x.servers.clear(); }));
  EXPECT_TRUE(refused_with([](IobenchRequest& x) { x.op = "erase"; }));
  EXPECT_TRUE(refused_with([](IobenchRequest& x) { x.threads = 0; }));
  EXPECT_TRUE(refused_with([](IobenchRequest& x) { x.threads = 100000; }));
  EXPECT_TRUE(refused_with([](IobenchRequest& x) { x.requests = 0; }));
  EXPECT_TRUE(refused_with([](IobenchRequest& x) { x.size = 0; }));
  // Segments past 1 PiB.
  EXPECT_TRUE(refused_with([](IobenchRequest& x) {
    x.requests = uint64_t(1) << 40;
    x.size = 64 << 20;
  }));
  // A flag that is neither 0 nor 1 (the last byte), a field cut short, a byte too many.
  Buffer flag = q.encode();
  flag.data()[flag.size() - 1] = 2;
  EXPECT_TRUE(refused(flag));
  Buffer whole = q.encode();
  for (size_t n = 0; n < whole.size(); ++n)
    EXPECT_TRUE(
        refused(Buffer::copy_of(std::string_view(reinterpret_cast<const char*>(whole.data()), n))))
        << n << " bytes";
  std::string longer(reinterpret_cast<const char*>(whole.data()), whole.size());
  EXPECT_TRUE(refused(Buffer::copy_of(std::string_view(longer + "x"))));
  // A go carries its job only.
  IobenchRequest go;
  go.phase = "go";
  go.job = 7;
  auto g = decode_iobench_request(go.encode().span());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->phase, "go");
  EXPECT_EQ(g->job, 7u);
  EXPECT_EQ(go.encode().size(), 9u);
  EXPECT_TRUE(refused(Buffer::copy_of(std::string_view("not json"))));

  IobenchNodeResult res;
  res.bytes = 100;
  res.start_unix_ns = 5;
  res.end_unix_ns = 9;
  res.cpu_s = 0.5;
  res.first_error = "read 7: mismatch";
  auto back = decode_iobench_result(encode_iobench_result(res).span());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->bytes, 100u);
  EXPECT_DOUBLE_EQ(back->cpu_s, 0.5);
  EXPECT_EQ(back->first_error, "read 7: mismatch");
  IobenchNodeResult rev = res;
  rev.start_unix_ns = 9;
  rev.end_unix_ns = 5;
  EXPECT_EQ(decode_iobench_result(encode_iobench_result(rev).span()).status().code(),
            Code::kProtocol);
  IobenchNodeResult nan = res;
  nan.cpu_s = std::nan("");
  EXPECT_FALSE(decode_iobench_result(encode_iobench_result(nan).span()).ok());

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
  const uint64_t kMax = uint64_t(1) << 62;
  for (const TokenRangeMsg& bad :
       {TokenRangeMsg{"f", 0, 4096, 100}, TokenRangeMsg{"f", 0, 4096, kMax + 1},
        TokenRangeMsg{"f", 4096, 4096, 0}, TokenRangeMsg{"f", 0, kMax + 1, 0},
        TokenRangeMsg{"a/b", 0, 4096, 0}, TokenRangeMsg{"", 0, 4096, 0}}) {
    auto e = decode_token_range(encode_token_range(bad).span(), true);
    ASSERT_FALSE(e.ok()) << bad.file << " " << bad.start << " " << bad.end << " " << bad.want_end;
    EXPECT_EQ(e.status().code(), Code::kProtocol);
  }
  // A release names the file only; its range is not read.
  auto rel = decode_token_range(encode_token_range({"f", 0, 0, 0}).span(), false);
  ASSERT_TRUE(rel.ok());
  EXPECT_EQ(rel->file, "f");
  EXPECT_FALSE(decode_token_range(encode_token_range({"f", 0, 0, 0}).span(), true).ok());
  // Short, long or not this codec at all (the JSON of before): malformed.
  Buffer good = encode_token_range({"f", 0, 4096, 0});
  EXPECT_FALSE(decode_token_range(good.span().first(good.size() - 1), true).ok());
  std::string longer(good.view());
  longer += 'x';
  EXPECT_FALSE(decode_token_range(Buffer::copy_of(std::string_view(longer)).span(), true).ok());
  EXPECT_FALSE(
      decode_token_range(
          Buffer::copy_of(std::string_view(R"({"file":"f","start":0,"end":4096})")).span(), true)
          .ok());
  // The mode: read or write, nothing else.
  auto read =
      decode_token_range(encode_token_range({"f", 0, 4096, 0, TokenMode::kRead}).span(), true);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->mode, TokenMode::kRead);
  EXPECT_EQ(decode_token_range(good.span(), true)->mode, TokenMode::kWrite);
  auto numbered =
      decode_token_range(encode_token_range({"f", 0, 4096, 0, TokenMode::kRead, 77}).span(), true);
  ASSERT_TRUE(numbered.ok());
  EXPECT_EQ(numbered->seq, 77u);
  std::string two(good.view());
  two[two.size() - 9] = 2;  // the mode byte, before the 8-byte acquire number
  auto e = decode_token_range(Buffer::copy_of(std::string_view(two)).span(), true);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("mode 2"), std::string::npos) << e.status().to_string();
}

// Read tokens: shared among readers, in conflict with writers; a writer taking a range
// takes readers' tokens, a reader taking one leaves the writer a read token (downgrade).
TEST(TokenTableTest, ReadersShareAndConflictOnlyWithWriters) {
  const Nid a = *Nid::parse("127.0.0.1@tcp"), b = *Nid::parse("127.0.0.2@tcp"),
            c = *Nid::parse("127.0.0.3@tcp");
  constexpr uint64_t kEnd = kTokenMaxOffset;
  const TokenMode R = TokenMode::kRead, W = TokenMode::kWrite;
  TokenTable t;
  t.grant("f", a, 0, kEnd, R);
  EXPECT_TRUE(t.conflicts("f", b, 0, 100, R).empty());  // readers share
  EXPECT_EQ(t.grantable_end("f", b, 100, kEnd, R), kEnd);
  t.grant("f", b, 0, kEnd, R);
  EXPECT_TRUE(t.held("f", a).empty());  // no write token
  EXPECT_EQ(t.readable("f", a), (std::vector<TokenRange>{{0, kEnd}}));
  // A writer at 1000 conflicts with both readers, and a read token stops its desired range.
  EXPECT_EQ(t.conflicts("f", c, 1000, 1100, W), (std::vector<Nid>{a, b}));
  EXPECT_EQ(t.grantable_end("f", a, 1100, kEnd, W), 1100u);  // b reads on from 0
  t.revoke("f", a, 1000, 2000, W);
  t.revoke("f", b, 1000, 2000, W);
  EXPECT_EQ(t.readable("f", a), (std::vector<TokenRange>{{0, 1000}, {2000, kEnd}}));
  EXPECT_TRUE(t.conflicts("f", c, 1000, 1100, W).empty());
  EXPECT_EQ(t.grantable_end("f", c, 1100, kEnd, W), 2000u);
  t.grant("f", c, 1000, 2000, W);
  // A reader of [1500, 1600) conflicts with the writer only; the writer keeps reading there.
  EXPECT_EQ(t.conflicts("f", a, 1500, 1600, R), std::vector<Nid>{c});
  t.revoke("f", c, 1500, 1600, R);
  EXPECT_EQ(t.held("f", c), (std::vector<TokenRange>{{1000, 1500}, {1600, 2000}}));
  EXPECT_EQ(t.readable("f", c), (std::vector<TokenRange>{{1000, 2000}}));
  EXPECT_TRUE(t.conflicts("f", a, 1500, 1600, R).empty());
  t.grant("f", a, 1500, 1600, R);
  // A writer of [1500, 1600) now takes it from the reader a and the downgraded c.
  EXPECT_EQ(t.conflicts("f", b, 1500, 1600, W), (std::vector<Nid>{a, c}));
  // A holder whose last read token goes is no holder.
  t.revoke("f", c, 1000, 2000, W);
  EXPECT_TRUE(t.readable("f", c).empty());
  EXPECT_EQ(t.files_held(c), 0u);
}

}  // namespace
}  // namespace pfsnet
