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
  EXPECT_EQ(n->ipv4(), (10u << 24) | (1u << 16) | 5u);
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

// IPv6 NIDs are written as Lustre 2.16 writes large NIDs: the address's canonical text
// (RFC 5952, as inet_ntop gives it) before the '@', no brackets.
TEST(NidTest, ParsesAndPrintsIpv6AsLustreDoes) {
  for (const char* text : {"2001:2::5@tcp", "::1@tcp", "2001:2:0:1::a@tcp3", "fd00::1@o2ib"}) {
    auto nid = Nid::parse(text);
    ASSERT_TRUE(nid.ok()) << text << ": " << nid.status().to_string();
    EXPECT_EQ(nid->to_string(), text);
    EXPECT_TRUE(nid->is_large());
    EXPECT_EQ(nid->addr_len, 16);
    EXPECT_EQ(nid->ipv4(), 0u);
    EXPECT_EQ(nid->small_form(), 0u) << "a large NID has no 64-bit form";
  }
  // Any inet_pton form reads; it prints canonically.
  EXPECT_EQ(Nid::parse("2001:0002:0000:0000::0005@tcp1")->to_string(), "2001:2::5@tcp1");
  EXPECT_EQ(Nid::parse("::1@tcp")->addr[15], 1);
  EXPECT_FALSE(Nid::parse("127.0.0.1@tcp")->is_large());
  for (const char* text : {"[::1]@tcp", "2001:2::g@tcp", "2001:2:::5@tcp", "::1@", "::1@udp",
                           "fe80::1%lo@tcp", "::ffff:198.18.0.1@tcp", "1:2:3:4:5:6:7:8:9@tcp"}) {
    auto nid = Nid::parse(text);
    EXPECT_FALSE(nid.ok()) << "accepted '" << text << "'";
  }
  EXPECT_NE(Nid::parse("::ffff:198.18.0.1@tcp").status().message().find("IPv4-mapped"),
            std::string::npos);
}

// IPv4 and IPv6 NIDs are distinct keys and sort IPv4 first within a network.
TEST(NidTest, Ipv6NidsCompareAndHashApartFromIpv4Ones) {
  Nid a = *Nid::parse("2001:2::5@tcp"), b = *Nid::parse("2001:2::6@tcp"),
      v4 = *Nid::parse("255.255.255.255@tcp"), o = *Nid::parse("2001:2::5@tcp1");
  EXPECT_NE(a, b);
  EXPECT_NE(a, o);
  EXPECT_LT(v4, a);
  EXPECT_LT(a, b);
  EXPECT_NE(std::hash<Nid>()(a), std::hash<Nid>()(b));
  EXPECT_EQ(a.net(), v4.net());
  EXPECT_NE(a.net(), o.net());
  EXPECT_EQ(nid_seed(v4), v4.small_form());
}

TEST(NidTest, PackRoundTrip) {
  auto n = *Nid::parse("10.2.0.5@o2ib3");
  auto back = Nid::unpack(n.small_form());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, n);
  EXPECT_FALSE(Nid::unpack(uint64_t(9) << 48).ok());
}

}  // namespace
}  // namespace pfsnet
