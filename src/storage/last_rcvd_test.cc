// LastRcvd (storage/last_rcvd.h): what a target keeps of the writes it executed, read
// back as a restarted server finds it. The block server killed between a write and its
// reply, with real daemons: tests/storage_test.cc.
#include "storage/last_rcvd.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace pfsnet {
namespace {

using Seen = LastRcvd::Seen;

class LastRcvdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/pfsnet-last-rcvd-" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path() const { return dir_ + "/#last_rcvd"; }
  std::unique_ptr<LastRcvd> open() {
    auto r = LastRcvd::open(path());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(*r) : nullptr;
  }
  std::string dir_;
};

const Nid kA = Nid::ipv4(0x1111), kB = Nid::ipv4(0x2222);

// What ran is what a restart finds: per client, its incarnation's xids; a new incarnation
// starts afresh; nothing else is taken for run.
TEST_F(LastRcvdTest, ARestartFindsTheWritesThatRanAndNoOthers) {
  {
    auto r = open();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->seen(kA, 7, 100), Seen::kNew);
    ASSERT_TRUE(r->ran(kA, 7, 100).ok());
    ASSERT_TRUE(r->ran(kA, 7, 102).ok());
    ASSERT_TRUE(r->ran(kB, 9, 5).ok());
    EXPECT_EQ(r->seen(kA, 7, 100), Seen::kRan);
  }  // the server goes
  auto r = open();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->clients(), 2u);
  EXPECT_EQ(r->seen(kA, 7, 100), Seen::kRan);
  EXPECT_EQ(r->seen(kA, 7, 102), Seen::kRan);
  EXPECT_EQ(r->seen(kA, 7, 101), Seen::kNew);  // in flight, never ran
  EXPECT_EQ(r->seen(kA, 8, 100), Seen::kNew);  // another incarnation: a restarted client
  EXPECT_EQ(r->seen(kB, 9, 5), Seen::kRan);
  EXPECT_EQ(r->seen(kB, 7, 100), Seen::kNew);  // another client
  // A's new incarnation takes its slot: the old one's xids are gone, B's stay.
  ASSERT_TRUE(r->ran(kA, 8, 1).ok());
  r.reset();
  r = open();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->seen(kA, 7, 100), Seen::kNew);
  EXPECT_EQ(r->seen(kA, 8, 1), Seen::kRan);
  EXPECT_EQ(r->seen(kB, 9, 5), Seen::kRan);
  EXPECT_EQ(r->clients(), 2u);
}

// An IPv6 client's slot is kept under a hash of its NID marked with bit 63 (the file's slots
// hold 8 bytes): it is found again after a restart, apart from an IPv4 client's and from
// another IPv6 client's.
TEST_F(LastRcvdTest, AnIpv6ClientsWritesSurviveARestartInTheirOwnSlot) {
  const Nid v6a = *Nid::parse("2001:2::5@tcp"), v6b = *Nid::parse("2001:2::6@tcp");
  EXPECT_EQ(LastRcvd::slot_key(kA), kA.small_form());
  EXPECT_NE(LastRcvd::slot_key(v6a) >> 63, 0u);
  EXPECT_NE(LastRcvd::slot_key(v6a), LastRcvd::slot_key(v6b));
  {
    auto r = open();
    ASSERT_TRUE(r);
    ASSERT_TRUE(r->ran(v6a, 4, 40).ok());
    ASSERT_TRUE(r->ran(kA, 4, 41).ok());
  }
  auto r = open();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->clients(), 2u);
  EXPECT_EQ(r->seen(v6a, 4, 40), Seen::kRan);
  EXPECT_EQ(r->seen(v6a, 4, 41), Seen::kNew);
  EXPECT_EQ(r->seen(v6b, 4, 40), Seen::kNew);
  EXPECT_EQ(r->seen(kA, 4, 41), Seen::kRan);
}

// The ring holds a client's last kRing writes: one older than all it holds cannot be
// told (never run again); the newer ones still can, and the order survives a restart.
TEST_F(LastRcvdTest, AWriteOlderThanTheRingIsUnknownNotRunAgain) {
  constexpr uint64_t kRing = LastRcvd::kRing;
  {
    auto r = open();
    ASSERT_TRUE(r);
    for (uint64_t x = 1; x <= kRing + 10; ++x) ASSERT_TRUE(r->ran(kA, 3, x).ok());
    EXPECT_EQ(r->seen(kA, 3, 5), Seen::kUnknown);
    EXPECT_EQ(r->seen(kA, 3, 11), Seen::kRan);
  }
  auto r = open();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->seen(kA, 3, 10), Seen::kUnknown);
  EXPECT_EQ(r->seen(kA, 3, 11), Seen::kRan);
  EXPECT_EQ(r->seen(kA, 3, kRing + 10), Seen::kRan);
  EXPECT_EQ(r->seen(kA, 3, kRing + 11), Seen::kNew);
  // The next goes after the newest: 11 is overwritten, 12 stays.
  ASSERT_TRUE(r->ran(kA, 3, kRing + 11).ok());
  EXPECT_EQ(r->seen(kA, 3, 11), Seen::kUnknown);
  EXPECT_EQ(r->seen(kA, 3, 12), Seen::kRan);
}

// A file that is not a record is refused, unchanged; one cut short in a slot keeps the
// whole slots before it.
TEST_F(LastRcvdTest, AFileThatIsNotARecordIsRefusedAndACutSlotIsDropped) {
  { std::ofstream(path()) << "not a record at all"; }
  auto bad = LastRcvd::open(path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not a pfsnet last_rcvd record"), std::string::npos)
      << bad.status().to_string();
  EXPECT_EQ(std::filesystem::file_size(path()), 19u);
  std::filesystem::remove(path());
  {
    auto r = open();
    ASSERT_TRUE(r);
    ASSERT_TRUE(r->ran(kA, 1, 1).ok());
    ASSERT_TRUE(r->ran(kB, 1, 1).ok());
  }
  std::filesystem::resize_file(path(), std::filesystem::file_size(path()) - 100);
  auto r = open();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->seen(kA, 1, 1), Seen::kRan);
  EXPECT_EQ(r->seen(kB, 1, 1), Seen::kNew);
  EXPECT_EQ(r->clients(), 1u);
}

}  // namespace
}  // namespace pfsnet
