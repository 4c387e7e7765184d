#include <gtest/gtest.h>
#include <pfsnet/nid.h>

namespace pfsnet {
namespace {

TEST(NidTest, ParsesAndPrints) {
  for (const char* text : {"127.0.0.2@tcp", "10.1.0.5@tcp1", "10.2.0.5@o2ib", "0.0.0.0@tcp",
                           "255.255.255.255@o2ib65535", "198.18.0.1@tcp7"}) {
    auto nid = Nid::parse(text);
    ASSERT_TRUE(nid.ok()) << text << ": " << nid.status().to_string();
    EXPECT_EQ(nid->to_string(), text);
  }
  auto n = Nid::parse("10.1.0.5@tcp1");
  EXPECT_EQ(n->addr, (10u << 24) | (1u << 16) | 5u);
  EXPECT_EQ(n->net_num, 1);
  EXPECT_FALSE(n->is_verbs());
  EXPECT_TRUE(Nid::parse("10.2.0.5@o2ib")->is_verbs());
}

TEST(NidTest, TcpZeroIsTcp) { EXPECT_EQ(Nid::parse("1.2.3.4@tcp0")->to_string(), "1.2.3.4@tcp"); }

TEST(NidTest, RejectsMalformed) {
  for (const char* text :
       {"", "@tcp", "127.0.0.2", "127.0.0.2@", "127.0.0.2@udp", "127.0.0@tcp", "127.0.0.2.1@tcp",
        "256.0.0.1@tcp", "1.2.3.-4@tcp", "a.b.c.d@tcp", "1..2.3@tcp", "01.2.3.4@tcp",
        "1.2.3.4@tcp65536", "1.2.3.4@tcpx", "1.2.3.4 @tcp", "1.2.3.4@tcp@tcp"}) {
    auto nid = Nid::parse(text);
    EXPECT_FALSE(nid.ok()) << "accepted '" << text << "'";
    if (!nid.ok()) {
      EXPECT_EQ(nid.status().code(), Code::kInvalidArgument);
      EXPECT_NE(nid.status().message().find("malformed NID"), std::string::npos);
    }
  }
}

TEST(NidTest, PackRoundTrip) {
  auto n = *Nid::parse("10.2.0.5@o2ib3");
  auto back = Nid::unpack(n.pack());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, n);
  EXPECT_FALSE(Nid::unpack(uint64_t(9) << 48).ok());
}

}  // namespace
}  // namespace pfsnet
