// Byte-range write tokens and striped files on the in-process cluster (rpc/sim_cluster.h):
// two block servers (s1, the token manager as the layout's first server, and s2) and two
// clients (c1, c2), each running the real BlockService, TokenService, StripedFile, Net and
// RpcEngine over the in-memory transport on manual time, on the test's one thread. A
// blocking call of the test (a write's token, a flush) runs the cluster until it ends
// (rpc/waiter.h): two nodes' writes interleave exactly as the test orders them, and every
// bound here is of manual time. The same code over TCP with a daemon's threads:
// block_service_test.cc.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <optional>
#include <random>

#include "rpc/msg_types.h"
#include "rpc/sim_cluster.h"
#include "storage/block_service.h"
#include "storage/striped_file.h"
#include "storage/test_pattern.h"
#include "storage/tokens.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kBlock = 64 << 10;
constexpr uint64_t B = kBlock, kEnd = kTokenMaxOffset;
constexpr Duration kTimeout = 10s;  // RPC and revocation timeout

class TokenSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* n : {"s1", "s2", "c1", "c2"}) ASSERT_NE(add(n), nullptr) << n;
  }
  // A node; s1 and s2 serve blocks (s1 two in-memory targets, s2 one), all but s2 run a
  // token service (s1 as the manager).
  SimNode* add(const std::string& name) {
    SimNode* n = sim_.add(name, {nid(name)});
    if (!n) return nullptr;
    if (name[0] == 's') {
      BlockServiceOptions o;
      o.block_size = kBlock;
      o.buffers = 4;
      o.threads = 0;  // the I/O on the pumping thread
      o.targets =
          name == "s1" ? std::vector<std::string>{"mem", "mem"} : std::vector<std::string>{"mem"};
      o.capacity = 64 << 20;
      auto& svc = n->attach<BlockService>(o, n->rpc, nullptr, sim_.clock(), n->core.timer_queue());
      EXPECT_TRUE(svc.open().ok());
    }
    if (name != "s2") tokens_[name] = &n->attach<TokenService>(n->rpc, kTimeout);
    return n;
  }
  static Nid nid(const std::string& name) {
    static const std::map<std::string, std::string> addr = {
        {"s1", "198.18.7.1"}, {"s2", "198.18.7.2"}, {"c1", "198.18.7.3"}, {"c2", "198.18.7.4"}};
    return *Nid::parse(addr.at(name) + "@tcp");
  }
  TokenService& tokens(const std::string& name) { return *tokens_.at(name); }
  // `file` opened on `client`, with write tokens unless `with_tokens` is false.
  std::unique_ptr<StripedFile> open(const std::string& client, const std::string& file,
                                    bool with_tokens = true) {
    StripedFileOptions o;
    o.pagepool = 4 << 20;
    o.prefetch_depth = 3;
    o.timeout = kTimeout;
    o.tokens = with_tokens ? &tokens(client) : nullptr;
    auto f = StripedFile::open(sim_.find(client)->rpc, file, {nid("s1"), nid("s2")}, o);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    return f.ok() ? std::move(*f) : nullptr;
  }
  // Block `i` of `file` as a fresh open on `client` reads it (no cached copy).
  std::vector<uint8_t> read_block(const std::string& file, int i,
                                  const std::string& client = "c1") {
    auto f = open(client, file, false);
    std::vector<uint8_t> got(kBlock);
    EXPECT_TRUE(f && f->read(i * B, got).ok());
    return got;
  }

  SimCluster sim_;
  std::map<std::string, TokenService*> tokens_;
};

// A holder gives a range back only once its writes there are acknowledged: with c1's link
// to s2 slow (200 ms each way; blocks 1, 4 and 7 are s2's), c1's write-behind is still on
// its way when c2 asks for the same blocks. Were the answer early, c2's writes would land
// first and c1's older ones over them. Each block ends up wholly the last writer's, with
// one revocation, and c2's write waited for c1's acknowledgements (400 ms of manual time).
TEST_F(TokenSimTest, AHolderGivesARangeBackOnlyOnceItsWritesThereAreAcknowledged) {
  sim_.set_delay("c1", "s2", 200ms);
  auto f1 = open("c1", "turns");
  auto f2 = open("c2", "turns");
  ASSERT_TRUE(f1 && f2);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(f1->write(i * B, test_pattern(kBlock, i)).ok());
  // c1 holds the whole file (a first write asks for the rest): its write-behind is out.
  const TimePoint t0 = sim_.clock().now();
  const auto theirs = test_pattern(8 * kBlock, 100);
  ASSERT_TRUE(f2->write(0, theirs).ok());
  const Duration took = sim_.clock().now() - t0;
  EXPECT_GE(took, 400ms) << "c2 wrote before c1's writes were acknowledged";
  EXPECT_LT(took, 1s);
  ASSERT_TRUE(f2->flush().ok());
  ASSERT_TRUE(f1->flush().ok());
  for (int i = 0; i < 8; ++i)
    EXPECT_TRUE(std::equal(theirs.begin() + i * B, theirs.begin() + (i + 1) * B,
                           read_block("turns", i).begin()))
        << "block " << i << " is not c2's, the last writer's";
  EXPECT_EQ(tokens("s1").stats().revocations, 1u);
  EXPECT_EQ(tokens("s1").stats().holders_dropped, 0u);
  EXPECT_EQ(f1->stats().tokens_revoked, 1u);
  EXPECT_EQ(f1->stats().tokens_acquired, 1u);
  EXPECT_EQ(f2->stats().tokens_acquired, 1u);
  // Coherence: c2 reads block 3 (its own, cached now), c1 writes it again -- taking the
  // token back from c2 -- and c2, which wrote it last, reads c1's bytes: a read token of
  // its own takes c1's write token down to a read token (a third revocation).
  std::vector<uint8_t> got(kBlock);
  const auto mine = test_pattern(kBlock, 7);
  ASSERT_TRUE(f2->read(3 * B, got).ok());
  ASSERT_TRUE(f1->write(3 * B, mine).ok());
  ASSERT_TRUE(f1->flush().ok());
  ASSERT_TRUE(f2->read(3 * B, got).ok());
  EXPECT_EQ(got, mine) << "c2 kept a stale block";
  EXPECT_EQ(tokens("s1").stats().revocations, 3u);
  EXPECT_EQ(tokens("s1").stats().downgrades, 1u);
  EXPECT_TRUE(f1->close().ok());
  EXPECT_TRUE(f2->close().ok());
}

// Coherent caching: c1 and c2 read blocks 0-7 -- both cache them under shared read tokens,
// with no revocation -- then c2 rewrites blocks 2-5 with its link to s2 slow (100 ms each
// way; blocks 2 and 5 are s2's) and returns before they are acknowledged. c1's next read
// of them returns c2's bytes, not its cached copy: c2's write token took c1's read token
// and cached blocks there, and c1's new read token came only once c2's writes were
// acknowledged (c2 keeps a read token and its other cached blocks). Without read tokens
// (the rule before) c1's read is a cache hit of the old bytes.
TEST_F(TokenSimTest, AReaderSeesAnotherNodesWriteNotItsCachedCopy) {
  const auto old = test_pattern(8 * kBlock, 1);
  {
    auto w = open("c2", "shared");
    ASSERT_TRUE(w && w->write(0, old).ok());
    ASSERT_TRUE(w->close().ok());  // its tokens released
  }
  auto f1 = open("c1", "shared");
  auto f2 = open("c2", "shared");
  ASSERT_TRUE(f1 && f2);
  std::vector<uint8_t> got(8 * kBlock);
  for (auto* f : {f1.get(), f2.get()}) {
    ASSERT_TRUE(f->read(0, got).ok());
    EXPECT_TRUE(got == old);
    EXPECT_EQ(f->stats().read_tokens_acquired, 1u);  // the first read's: the whole file
  }
  EXPECT_EQ(tokens("s1").stats().revocations, 0u) << "readers do not share";
  EXPECT_EQ(tokens("s1").stats().read_grants, 2u);
  const uint64_t fetched = f1->stats().block_reads;
  ASSERT_TRUE(f1->read(0, got).ok());
  EXPECT_EQ(f1->stats().block_reads, fetched) << "c1 did not read from its cache";
  EXPECT_EQ(f1->stats().cache_hits, 8u);

  sim_.set_delay("c2", "s2", 100ms);
  const auto theirs = test_pattern(4 * kBlock, 2);
  ASSERT_TRUE(f2->write(2 * B, theirs).ok());
  EXPECT_EQ(tokens("s1").stats().revocations, 1u);  // c1's read token on blocks 2 on
  const TimePoint t0 = sim_.clock().now();
  std::vector<uint8_t> now(4 * kBlock);
  ASSERT_TRUE(f1->read(2 * B, now).ok());
  EXPECT_TRUE(now == theirs) << "c1 read its stale cached copy";
  EXPECT_GE(sim_.clock().now() - t0, 150ms) << "read before c2's writes were acknowledged";
  EXPECT_EQ(f1->stats().read_tokens_acquired, 2u);
  EXPECT_EQ(tokens("s1").stats().downgrades, 1u);  // c2's write token, down to a read one
  EXPECT_EQ(tokens("s1").stats().holders_dropped, 0u);
  // c2 kept its read token and cache where it did not write: a hit, no token asked.
  const uint64_t hits = f2->stats().cache_hits;
  std::vector<uint8_t> first(2 * kBlock);
  ASSERT_TRUE(f2->read(0, first).ok());
  EXPECT_TRUE(std::equal(first.begin(), first.end(), old.begin()));
  EXPECT_EQ(f2->stats().cache_hits, hits + 2);
  EXPECT_EQ(f2->stats().read_tokens_acquired, 1u);
  sim_.set_delay("c2", "s2", 0ms);
  EXPECT_TRUE(f1->close().ok());
  EXPECT_TRUE(f2->close().ok());
}

// A file closed and opened again at once on one node: the close's TOKEN_RELEASE (held
// 200 ms on c1's way out) reaches the manager after the new open's read token was granted.
// The manager must not let the late release undo that grant: c2's write must still take
// c1's read token (and its cache) so that c1 reads c2's bytes. And a close of one of two
// handles of a file on one node gives back nothing the other still uses.
TEST_F(TokenSimTest, AReleaseOvertakenByTheNextOpensAcquireUndoesNothing) {
  const auto old = test_pattern(8 * kBlock, 3);
  {
    auto w = open("c2", "f");
    ASSERT_TRUE(w && w->write(0, old).ok());
    ASSERT_TRUE(w->close().ok());
  }
  std::vector<uint8_t> got(8 * kBlock);
  {
    auto first = open("c1", "f");
    ASSERT_TRUE(first && first->read(0, got).ok());
    FaultRule late;
    late.action = FaultRule::Action::kDelay;
    late.src = nid("c1");
    late.msg_type = kMsgTokenRelease;
    late.rate = 1;
    late.latency = 200ms;
    sim_.find("c1")->net.add_fault(late);
    ASSERT_TRUE(first->close().ok());  // its release, on its (slow) way
  }
  auto f1 = open("c1", "f");
  ASSERT_TRUE(f1 && f1->read(0, got).ok());  // a read token granted before the release lands
  EXPECT_TRUE(got == old);
  auto twin = open("c1", "f");  // a second handle of the file on c1
  ASSERT_TRUE(twin && twin->read(0, got).ok());
  sim_.run_for(300ms);  // the release lands
  EXPECT_EQ(tokens("s1").stats().stale_releases, 1u);
  ASSERT_TRUE(twin->close().ok());  // sends nothing: f1 still uses c1's tokens
  sim_.run_for(300ms);              // (a release would have landed by now)

  const auto theirs = test_pattern(4 * kBlock, 4);
  auto f2 = open("c2", "f");
  ASSERT_TRUE(f2 && f2->write(2 * B, theirs).ok());
  ASSERT_TRUE(f2->flush().ok());
  std::vector<uint8_t> now(4 * kBlock);
  ASSERT_TRUE(f1->read(2 * B, now).ok());
  EXPECT_TRUE(now == theirs) << "c1 read its stale cached copy: its token was dropped";
  EXPECT_GE(tokens("s1").stats().revocations, 1u);
  EXPECT_TRUE(f1->close().ok());
  EXPECT_TRUE(f2->close().ok());
}

// A holder that answers a revocation when the test lets it, giving back what the test says.
class GatedHolder final : public TokenHolder {
 public:
  explicit GatedHolder(std::string file) : file_(std::move(file)) {}
  const std::string& token_file() const override { return file_; }
  void release_range(uint64_t start, uint64_t end, uint64_t want_end, TokenMode,
                     Released done) override {
    asked_.push_back({start, end, want_end});
    if (open_)
      done(std::min(std::max(end, want_end), release_end_));
    else
      waiting_.push_back({std::max(end, want_end), std::move(done)});
  }
  void lose_tokens(const Status&) override {}
  void open(uint64_t release_end) {
    open_ = true;
    release_end_ = release_end;
    for (auto& [most, done] : std::exchange(waiting_, {})) done(std::min(most, release_end));
  }
  const std::vector<std::array<uint64_t, 3>>& asked() const { return asked_; }

 private:
  const std::string file_;
  bool open_ = false;
  uint64_t release_end_ = 0;
  std::vector<std::array<uint64_t, 3>> asked_;
  std::vector<std::pair<uint64_t, Released>> waiting_;
};

// The holder decides how much of the desired range it gives up (GPFS's rule), the manager
// grants what it gave, and a request waiting for a revocation holds up neither a request
// of another range nor anything but its holder's own requests (a grant to the holder then
// could be undone by its answer). An answer outside the range asked for drops the holder.
TEST_F(TokenSimTest, TheHolderDecidesWhatItGivesUpAndOthersAreNotHeldUp) {
  TokenService &manager = tokens("s1"), &t1 = tokens("c1"), &t2 = tokens("c2");
  const Nid m = nid("s1");
  GatedHolder h1("g");
  t1.add_holder(&h1);
  struct Unregister {
    TokenService& t;
    TokenHolder* h;
    ~Unregister() { t.remove_holder(h); }  // on every way out, before h1 goes
  } unregister{t1, &h1};
  auto g = t1.acquire(m, "g", 0, B, 20 * B);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(*g, (TokenRange{0, 20 * B}));
  // c2 needs block 10 and would like the rest: c1 is asked, and answers when let.
  std::optional<Result<TokenRange>> taking, own;
  t2.acquire_async(m, "g", 10 * B, 11 * B, kEnd, [&](Result<TokenRange> r) { taking = r; });
  ASSERT_TRUE(sim_.run_until([&] { return !h1.asked().empty(); }, 1s));
  EXPECT_EQ(h1.asked()[0], (std::array<uint64_t, 3>{10 * B, 11 * B, kEnd}));
  // Meanwhile c1's own next request waits; c2's request of a range nobody holds does not.
  t1.acquire_async(m, "g", 40 * B, 41 * B, 0, [&](Result<TokenRange> r) { own = r; });
  auto free = t2.acquire(m, "g", 30 * B, 31 * B);
  ASSERT_TRUE(free.ok()) << free.status().to_string();
  EXPECT_EQ(*free, (TokenRange{30 * B, 31 * B}));
  ASSERT_TRUE(sim_.run_for(5s));
  EXPECT_FALSE(own.has_value()) << "granted while being revoked";
  EXPECT_FALSE(taking.has_value());
  // c1 keeps from block 15 on (as a writer of its there would): c2 gets [10, 15) blocks.
  h1.open(15 * B);
  ASSERT_TRUE(sim_.run_until([&] { return taking && own; }, 1s));
  ASSERT_TRUE(taking->ok()) << taking->status().to_string();
  EXPECT_EQ(**taking, (TokenRange{10 * B, 15 * B}));
  ASSERT_TRUE(own->ok()) << own->status().to_string();
  EXPECT_EQ(**own, (TokenRange{40 * B, 41 * B}));
  EXPECT_EQ(manager.stats().revocations, 1u);
  EXPECT_EQ(manager.stats().holders_dropped, 0u);
  // c2 again, inside what c1 kept: c1 answers 15, below the required end -- out of
  // range, so c1 loses its tokens on the file, and c2 is granted.
  auto bad = t2.acquire(m, "g", 16 * B, 17 * B);
  ASSERT_TRUE(bad.ok()) << bad.status().to_string();
  EXPECT_EQ(*bad, (TokenRange{16 * B, 17 * B}));
  EXPECT_EQ(manager.stats().holders_dropped, 1u);
  EXPECT_EQ(manager.stats().revocations, 2u);
  // c1 holds nothing now: c2 takes its old first blocks without a revocation.
  auto after = t2.acquire(m, "g", 0, B, 10 * B);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, (TokenRange{0, 10 * B}));
  EXPECT_EQ(manager.stats().revocations, 2u);
}

// A striped file gives up, of a range another node takes, only what it does not use: a
// writer of its that left off past the required range keeps going there without a new
// token, and the taker gets the rest in one.
TEST_F(TokenSimTest, AWriterKeepsTheRangeItGoesOnInWhenAnotherTakesPartOfItsToken) {
  auto f1 = open("c1", "keep");
  auto f2 = open("c2", "keep");
  ASSERT_TRUE(f1 && f2);
  // c1: two sequential runs, blocks 0-3 and 20-23 (one token: its first write's, the rest
  // of the file).
  for (int i : {0, 1, 2, 3, 20, 21, 22, 23})
    ASSERT_TRUE(f1->write(i * B, test_pattern(kBlock, i)).ok());
  ASSERT_TRUE(f1->flush().ok());
  EXPECT_EQ(f1->stats().tokens_acquired, 1u);
  // c2 writes blocks 10 on: c1 gives up [10, 24) -- not from 24, where its writer goes on.
  for (int i = 10; i < 24; ++i) ASSERT_TRUE(f2->write(i * B, test_pattern(kBlock, i)).ok());
  EXPECT_EQ(f2->stats().tokens_acquired, 1u);
  EXPECT_EQ(f1->stats().tokens_revoked, 1u);
  EXPECT_EQ(tokens("s1").stats().revocations, 1u);
  for (int i = 24; i < 28; ++i) ASSERT_TRUE(f1->write(i * B, test_pattern(kBlock, i)).ok());
  EXPECT_EQ(f1->stats().tokens_acquired, 1u) << "c1 lost the range its writer went on in";
  ASSERT_TRUE(f1->close().ok());
  ASSERT_TRUE(f2->close().ok());
  for (int i : {0, 3, 10, 20, 23, 24, 27})
    EXPECT_EQ(read_block("keep", i), test_pattern(kBlock, i)) << "block " << i;
}

// A holder cut off from the manager does not answer: after the revocation's timeout (10 s
// of manual time, not sooner) the manager drops its tokens on the file and grants the
// waiting writer, which no other file's requests waited for. The writer's request, held
// that long, is answered on its first attempt: its connection is not taken for dead.
TEST_F(TokenSimTest, AHolderThatDoesNotAnswerLosesItsTokensAfterTheTimeout) {
  auto f1 = open("c1", "cut");
  auto f2 = open("c2", "cut");
  auto other = open("c2", "other");
  ASSERT_TRUE(f1 && f2 && other);
  ASSERT_TRUE(f1->write(0, test_pattern(kBlock, 1)).ok());
  ASSERT_TRUE(f1->flush().ok());
  sim_.cut("c1", "s1");
  const TimePoint t0 = sim_.clock().now();
  ASSERT_TRUE(other->write(0, test_pattern(kBlock, 2)).ok());
  EXPECT_LT(sim_.clock().now() - t0, 100ms) << "another file's writer waited";
  const auto theirs = test_pattern(kBlock, 3);
  ASSERT_TRUE(f2->write(0, theirs).ok());
  const Duration took = sim_.clock().now() - t0;
  EXPECT_GE(took, kTimeout);
  EXPECT_LT(took, kTimeout + 1s);
  EXPECT_EQ(tokens("s1").stats().holders_dropped, 1u);
  const ReplyCacheStats rc = sim_.find("s1")->rpc.replay_stats();
  EXPECT_EQ(rc.running_copies + rc.replayed, 0u) << "the held request was sent again";
  ASSERT_TRUE(f2->flush().ok());
  EXPECT_EQ(read_block("cut", 0, "c2"), theirs);
  sim_.heal("c1", "s1");
  EXPECT_TRUE(f2->close().ok());
  EXPECT_TRUE(other->close().ok());
  EXPECT_TRUE(f1->close().ok());
}

// Write-behind on manual time: with a pagepool of two blocks and s2 200 ms away (a round
// trip; blocks 1, 4 and 7 are s2's), a write of 8 blocks returns once all are sent -- when
// s2's first two acknowledgements make room, at 200 ms -- and its flush once the last is
// acknowledged, at 400 ms; s1's blocks never wait for s2's.
TEST_F(TokenSimTest, AWriteWaitsForPagepoolRoomAsLongAsTheSlowServerTakesAndNoLonger) {
  sim_.set_delay("c1", "s2", 100ms);
  StripedFileOptions o;
  o.pagepool = 2 * B;
  o.timeout = kTimeout;
  auto f = StripedFile::open(sim_.find("c1")->rpc, "behind", {nid("s1"), nid("s2")}, o);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const auto data = test_pattern(8 * kBlock, 5);
  const TimePoint t0 = sim_.clock().now();
  ASSERT_TRUE((*f)->write(0, data).ok());
  const Duration wrote = sim_.clock().now() - t0;
  EXPECT_GE(wrote, 200ms);
  EXPECT_LE(wrote, 210ms);  // the 10 ms steps of a wait
  EXPECT_GT((*f)->stats().pagepool_waits, 0u);
  ASSERT_TRUE((*f)->flush().ok());
  const Duration flushed = sim_.clock().now() - t0;
  EXPECT_GE(flushed, 400ms);
  EXPECT_LE(flushed, 420ms);
  std::vector<uint8_t> got(data.size());
  ASSERT_TRUE((*f)->read(0, got).ok());
  EXPECT_TRUE(got == data);
  EXPECT_TRUE((*f)->close().ok());
}

}  // namespace
}  // namespace pfsnet
