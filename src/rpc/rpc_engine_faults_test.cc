// RpcEngine over the in-memory transport with a manual clock, when things change or go
// wrong: max_rpcs_in_flight at run time and per target, a timeout racing a close, a copy
// of a running request, damaged requests and replies, bulk damaged at rest.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "base/mutex.h"
#include "rpc/call_batch.h"
#include "rpc/rpc_engine.h"
#include "rpc/rpc_test_fixture.h"
#include "wire/crc32c.h"

namespace pfsnet {
namespace {

using namespace rpc_test;

TEST_F(RpcTest, MaxRpcsInFlightChangesAtRunTime) {
  Replies r;
  // The client allows 2 in flight; the handler blocks, so 4 wait in the queue.
  for (int i = 0; i < 6; ++i) client_.rpc.call_async(b_, kBlock, Buffer(), nullptr, r.cb());
  hub_.pump();
  EXPECT_EQ(client_.rpc.target_load(b_), std::make_pair(int64_t(2), size_t(4)));
  client_.rpc.set_max_rpcs_in_flight(4);
  EXPECT_EQ(client_.rpc.target_load(b_), std::make_pair(int64_t(4), size_t(2)));
  client_.rpc.set_max_rpcs_in_flight(1);  // lowered: the ones on the wire finish first
  release_.open();
  pump_until([&] { return r.got.size() == 6; });
  ASSERT_EQ(r.got.size(), 6u);
  for (auto& rep : r.got) EXPECT_TRUE(rep.status.ok()) << rep.status.to_string();
}

// A target with a max_rpcs_in_flight of its own (the WAN peer of a node whose other
// peers are near): its RPCs get that many slots, the others keep the node's; replacing the
// set takes effect at once, and a target left out goes back to the node's value.
TEST_F(RpcTest, PerTargetMaxRpcsInFlight) {
  Node far(hub_, clock_, nid("10.0.0.3@tcp"));
  const Nid c = nid("10.0.0.3@tcp");
  far.rpc.handle(
      kBlock, "BLOCK",
      [this](RpcRequest&) {
        release_.wait();
        return RpcResponse{};
      },
      HandlerMode::kWorker);
  client_.rpc.set_peer_rpcs_in_flight({{c, 5}});
  EXPECT_EQ(client_.rpc.max_rpcs_in_flight(c), 5);
  EXPECT_EQ(client_.rpc.max_rpcs_in_flight(b_), 2);
  Replies r;
  for (int i = 0; i < 7; ++i) {
    client_.rpc.call_async(b_, kBlock, Buffer(), nullptr, r.cb());
    client_.rpc.call_async(c, kBlock, Buffer(), nullptr, r.cb());
  }
  hub_.pump();
  EXPECT_EQ(client_.rpc.target_load(b_), std::make_pair(int64_t(2), size_t(5)));
  EXPECT_EQ(client_.rpc.target_load(c), std::make_pair(int64_t(5), size_t(2)));
  client_.rpc.set_peer_rpcs_in_flight({{b_, 3}});  // c back to the node's 2, b_ raised to 3
  EXPECT_EQ(client_.rpc.target_load(b_), std::make_pair(int64_t(3), size_t(4)));
  EXPECT_EQ(client_.rpc.target_load(c), std::make_pair(int64_t(5), size_t(2)));
  EXPECT_EQ(client_.rpc.max_rpcs_in_flight(c), 2);
  bool seen_b = false, seen_c = false;
  for (const RpcEngine::TargetInfo& t : client_.rpc.targets()) {
    if (t.dst == b_) {
      seen_b = true;
      EXPECT_TRUE(t.own_limit);
      EXPECT_EQ(t.limit, 3);
      EXPECT_EQ(t.counters.slot_waits, 5u);
    }
    if (t.dst == c) {
      seen_c = true;
      EXPECT_FALSE(t.own_limit);
      EXPECT_EQ(t.limit, 2);
      EXPECT_EQ(t.counters.slot_waits, 2u);
    }
  }
  EXPECT_TRUE(seen_b && seen_c);
  release_.open();
  pump_until([&] { return r.got.size() == 14; });
  ASSERT_EQ(r.got.size(), 14u);
  for (auto& rep : r.got) EXPECT_TRUE(rep.status.ok()) << rep.status.to_string();
  for (const RpcEngine::TargetInfo& t : client_.rpc.targets()) {
    EXPECT_EQ(t.counters.completed, 7u) << t.dst.to_string();
    EXPECT_GT(t.counters.bytes, 0u);
  }
  far.rpc.shutdown();
}

// A written attempt with no reply can be acted on by two threads at once: the deadline
// timer (a remote timeout) and the I/O thread that sees its connection close. Only one of
// them may resend it: two writes of one call out at once, where the call keeps itself
// alive for one, ended in a use after free (ASan, in CI). Each round races the two on a
// fresh pair of nodes (so the client's connection is the hub's first, id 1); every round
// resends exactly once.
TEST(RpcRaceTest, ATimeoutAndACloseRacingResendAnAttemptOnce) {
  Nid a = nid("10.0.0.1@tcp"), b = nid("10.0.0.2@tcp");
  for (int round = 0; round < 60; ++round) {
    Gate release;  // outlives the nodes' workers
    ManualClock clock;
    MemHub hub;
    Node server(hub, clock, b);
    server.rpc.handle(
        kBlock, "BLOCK",
        [&release](RpcRequest&) {
          release.wait();
          return RpcResponse{};
        },
        HandlerMode::kWorker);
    Node client(hub, clock, a, 8, 8, /*retry_count=*/2);
    Replies r;
    client.rpc.call_async(b, kBlock, Buffer(), nullptr, r.cb(), CallOptions{60s});
    hub.pump();          // connected and written
    clock.advance(20s);  // the first attempt's deadline (60 s over 3 attempts)
    auto close = [&] {   // the I/O thread's view: its connection closed
      client.rpc.on_connection_closed(1, b, Status(Code::kClosed, "closed by the test"));
    };
    if (round == 0) {
      close();  // alone first: connection 1 is the one the attempt went on, and it resends
    } else {
      std::thread closer(close);
      client.rpc.expire(clock.now());  // the timer's view: a remote timeout
      closer.join();
    }
    ASSERT_EQ(client.net.peers().at(0).resends, 1u) << "round " << round;
    EXPECT_TRUE(r.got.empty());
    release.open();
    hub.pump();
    client.rpc.shutdown();
    hub.pump();
  }
}

// Exactly-once: a resend (same xid, after a remote timeout) of a request still running
// on the server is not run again, and the first run's reply answers it; a type declared
// repeatable runs the copy.
TEST(RpcReplayTest, ACopyOfARunningRequestRunsOnlyWhenItsTypeIsRepeatable) {
  Nid a = nid("10.0.0.1@tcp"), b = nid("10.0.0.2@tcp");
  for (Execution exec : {Execution::kOnce, Execution::kRepeatable}) {
    Gate release;  // outlives the nodes' workers
    ManualClock clock;
    MemHub hub;
    Node server(hub, clock, b);
    std::atomic<int> runs{0};
    server.rpc.handle(
        kBlock, "BLOCK",
        [&](RpcRequest&) {
          int n = ++runs;
          release.wait();
          RpcResponse r;
          r.payload = Buffer::copy_of(std::string_view("run " + std::to_string(n)));
          return r;
        },
        HandlerMode::kWorker, exec);
    Node client(hub, clock, a, 8, 8, /*retry_count=*/2);
    Replies r;
    client.rpc.call_async(b, kBlock, Buffer(), nullptr, r.cb(), CallOptions{60s});
    auto pump_until = [&](auto done) {
      auto limit = std::chrono::steady_clock::now() + 10s;
      for (int i = 0; i < 10'000'000 && !done() && std::chrono::steady_clock::now() < limit; ++i) {
        hub.pump();
        std::this_thread::yield();
      }
      return done();
    };
    ASSERT_TRUE(pump_until([&] { return runs.load() == 1; }));
    clock.advance(20s);  // the first attempt's deadline (60 s over 3 attempts): resent
    client.rpc.expire(clock.now());
    ASSERT_EQ(client.net.peers().at(0).resends, 1u);
    // The op tracker sees the second attempt and why the first failed.
    std::vector<Op> ops = client.rpc.ops_in_flight();
    ASSERT_EQ(ops.size(), 1u);
    EXPECT_EQ(ops[0].attempts, 2);
    EXPECT_NE(ops[0].detail.find("(attempt 2; the last failed: "), std::string::npos)
        << ops[0].detail;
    if (exec == Execution::kOnce) {
      ASSERT_TRUE(pump_until([&] { return server.rpc.replay_stats().running_copies == 1; }));
      EXPECT_EQ(runs.load(), 1);  // two workers, one run
    } else {
      ASSERT_TRUE(pump_until([&] { return runs.load() == 2; }));
      EXPECT_EQ(server.rpc.replay_stats().entries, 0u);  // nothing recorded
    }
    release.open();
    ASSERT_TRUE(pump_until([&] { return r.got.size() == 1; }));
    ASSERT_TRUE(r.got[0].status.ok()) << r.got[0].status.to_string();
    EXPECT_EQ(r.got[0].payload.view().substr(0, 4), "run ");
    // Its timeline names the failed attempt and the one that was answered.
    std::vector<Op> kept = client.rpc.ops_history();
    ASSERT_EQ(kept.size(), 1u);
    std::string timeline;
    for (const OpEvent& e : kept[0].events) timeline += e.what + "\n";
    EXPECT_NE(timeline.find("attempt 1 failed: "), std::string::npos) << timeline;
    EXPECT_NE(timeline.find("attempt 2 sent"), std::string::npos) << timeline;
    if (exec == Execution::kOnce) {
      EXPECT_EQ(r.got[0].payload.view(), "run 1");
      EXPECT_EQ(server.rpc.replay_stats().entries, 1u);  // kept until the client moves on
    }
    client.rpc.shutdown();
    hub.pump();
  }
}

// Integrity end to end: requests damaged on the way are answered CORRUPT without running
// and sent again; damaged replies are sent for again; nothing damaged is delivered. Every
// write runs exactly once with its data intact, every read returns intact data; what
// cannot get through undamaged within retry_count fails with Code::kCorrupt, by name.
TEST(RpcIntegrityTest, DamagedRequestsAndRepliesAreResentNeverDelivered) {
  Nid a = nid("10.0.0.1@tcp"), b = nid("10.0.0.2@tcp");
  ManualClock clock;
  MemHub hub;
  Node server(hub, clock, b);
  std::atomic<int> runs{0}, bad{0};
  constexpr uint32_t kWrite = 900;  // no type of the registry (msg_types.h) has it
  server.rpc.handle(
      kWrite, "TEST_WRITE",
      [&](RpcRequest& req) {
        ++runs;
        if (!check_ping_pattern(req.bulk.span()) || req.bulk.size() != 8192) ++bad;
        return RpcResponse{};
      },
      HandlerMode::kInline);
  Node client(hub, clock, a, 8, 8, /*retry_count=*/2);
  FaultRule damage;
  damage.action = FaultRule::Action::kCorrupt;
  damage.rate = 3;  // every third message: never three attempts of one RPC in a row
  client.net.add_fault(damage);
  server.net.add_fault(damage);
  Replies writes, reads;
  constexpr int kRpcs = 30;
  for (int i = 0; i < kRpcs; ++i) {
    client.rpc.call_async(b, kWrite, Buffer(), make_bulk(make_ping_pattern(8192)), writes.cb());
    client.rpc.call_async(b, kMsgBrwRead, ping_payload(uint32_t(8192)), nullptr, reads.cb());
    hub.pump();
  }
  ASSERT_EQ(writes.got.size(), size_t(kRpcs));
  ASSERT_EQ(reads.got.size(), size_t(kRpcs));
  for (const RpcReply& r : writes.got) EXPECT_TRUE(r.status.ok()) << r.status.to_string();
  for (const RpcReply& r : reads.got) {
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.bulk.size(), 8192u);
    EXPECT_TRUE(check_ping_pattern(r.bulk.span()));
  }
  EXPECT_EQ(runs.load(), kRpcs);  // each write once: a damaged one never ran
  EXPECT_EQ(bad.load(), 0);
  auto corrupt = [](const NiInfo& n) {
    return n.errors[static_cast<size_t>(HealthKind::kPeerNiCorrupt)];
  };
  uint64_t at_server = corrupt(server.net.peers().at(0)),
           at_client = corrupt(client.net.peers().at(0));
  EXPECT_GT(at_server, 0u);  // requests damaged (and CORRUPT replies to them, at the client)
  EXPECT_GT(at_client, 0u);  // replies damaged
  // One resend per damage seen (a CORRUPT answer that is itself damaged is one).
  uint64_t resends = client.net.peers().at(0).resends;
  EXPECT_GT(resends, 0u);
  EXPECT_LE(resends, at_server + at_client);

  // Every message damaged: nothing gets through, and the RPC says why.
  client.net.del_fault(1);
  damage.rate = 1;
  client.net.add_fault(damage);
  Replies fail;
  client.rpc.call_async(b, kWrite, Buffer(), make_bulk(make_ping_pattern(8192)), fail.cb());
  hub.pump();
  ASSERT_EQ(fail.got.size(), 1u);
  EXPECT_EQ(fail.got[0].status.code(), Code::kCorrupt) << fail.got[0].status.to_string();
  EXPECT_EQ(fail.got[0].status.health_kind(), HealthKind::kPeerNiCorrupt);
  EXPECT_NE(fail.got[0].status.message().find("after 3 attempts"), std::string::npos)
      << fail.got[0].status.message();
  EXPECT_EQ(runs.load(), kRpcs);
  client.rpc.shutdown();
  hub.pump();
}

// A reply whose handler gives its bulk's CRC (kept with the data, RpcResponse::bulk_crc) is
// sealed with it joined to the payload's: intact bytes arrive, a prefix with its own CRC
// too -- and bytes damaged since their CRC was taken (at rest, on the server) fail the
// client's check on every attempt, never delivered, where a CRC taken at send time would
// have covered the damage.
TEST(RpcIntegrityTest, ABulkChecksumKeptWithTheDataIsSentAndCatchesDamageAtRest) {
  Nid a = nid("10.0.0.1@tcp"), b = nid("10.0.0.2@tcp");
  ManualClock clock;
  MemHub hub;
  Node server(hub, clock, b);
  constexpr size_t kSize = 64 << 10;
  BulkData stored = make_bulk(make_ping_pattern(kSize));
  const uint32_t stored_crc = crc32c(stored->span());
  Buffer rotted = make_ping_pattern(kSize);
  rotted.data()[kSize / 3] ^= 0x04;
  BulkData damaged = make_bulk(std::move(rotted));
  constexpr uint32_t kRead = 901, kPrefix = 902, kRotted = 903;
  std::atomic<int> rotted_runs{0};
  auto serve = [&](uint32_t type, const char* name, BulkData bulk, size_t limit, uint32_t crc,
                   std::atomic<int>* runs) {
    server.rpc.handle(
        type, name,
        [bulk, limit, crc, runs](RpcRequest&) {
          if (runs) ++*runs;
          RpcResponse r;
          r.bulk = bulk;
          r.bulk_limit = limit;
          r.bulk_crc = crc;
          return r;
        },
        HandlerMode::kInline, Execution::kRepeatable);
  };
  serve(kRead, "TEST_READ", stored, SIZE_MAX, stored_crc, nullptr);
  serve(kPrefix, "TEST_READ_PREFIX", stored, 1000, crc32c(stored->span().first(1000)), nullptr);
  serve(kRotted, "TEST_READ_ROTTED", damaged, SIZE_MAX, stored_crc, &rotted_runs);
  Node client(hub, clock, a, 8, 8, /*retry_count=*/2);
  Replies got;
  for (uint32_t type : {kRead, kPrefix, kRotted})
    client.rpc.call_async(b, type, Buffer(), nullptr, got.cb());
  hub.pump();
  ASSERT_EQ(got.got.size(), 3u);
  std::map<uint64_t, const RpcReply*> by_size;
  int corrupt = 0;
  for (const RpcReply& r : got.got) {
    if (r.status.code() == Code::kCorrupt) {
      ++corrupt;
      continue;
    }
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    by_size[r.bulk.size()] = &r;
  }
  EXPECT_EQ(corrupt, 1);  // the rotted one, after 3 attempts
  EXPECT_EQ(rotted_runs.load(), 3);
  ASSERT_EQ(by_size.count(kSize), 1u);
  ASSERT_EQ(by_size.count(1000), 1u);
  EXPECT_TRUE(check_ping_pattern(by_size[kSize]->bulk.span()));
  EXPECT_TRUE(check_ping_pattern(by_size[1000]->bulk.span()));
  client.rpc.shutdown();
  hub.pump();
}

// A request whose caller took its bulk's CRC already (CallOptions::bulk_crc, folded into
// the copy that made the bulk) is sealed with it joined: the server gets the bytes and that
// CRC (RpcRequest::bulk_crc). A CRC that is not the bulk's fails the server's check on every
// attempt; the handler never runs.
TEST(RpcIntegrityTest, ARequestsBulkChecksumTakenByTheCallerIsSentAndChecked) {
  Nid a = nid("10.0.0.1@tcp"), b = nid("10.0.0.2@tcp");
  ManualClock clock;
  MemHub hub;
  Node server(hub, clock, b);
  std::atomic<int> runs{0};
  std::optional<uint32_t> seen;
  constexpr uint32_t kWrite = 904;
  server.rpc.handle(
      kWrite, "TEST_WRITE_CRC",
      [&](RpcRequest& req) {
        ++runs;
        seen = req.bulk_crc;
        return RpcResponse{};
      },
      HandlerMode::kInline);
  Node client(hub, clock, a, 8, 8, /*retry_count=*/2);
  BulkData data = make_bulk(make_ping_pattern(20000));
  CallOptions co;
  co.bulk_crc = crc32c(data->span());
  Replies good, bad;
  client.rpc.call_async(b, kWrite, Buffer(), data, good.cb(), co);
  hub.pump();
  ASSERT_EQ(good.got.size(), 1u);
  EXPECT_TRUE(good.got[0].status.ok()) << good.got[0].status.to_string();
  EXPECT_EQ(seen, crc32c(data->span()));
  co.bulk_crc = *co.bulk_crc ^ 0x100;
  client.rpc.call_async(b, kWrite, Buffer(), data, bad.cb(), co);
  hub.pump();
  ASSERT_EQ(bad.got.size(), 1u);
  EXPECT_EQ(bad.got[0].status.code(), Code::kCorrupt) << bad.got[0].status.to_string();
  EXPECT_EQ(runs.load(), 1);
  client.rpc.shutdown();
  hub.pump();
}

}  // namespace
}  // namespace pfsnet
