// TLS on the TCP transport (tls.h), seen from outside: a relay between the two ends
// records every byte on the wire (nothing readable in it with TLS, the payload in clear
// without) and alters one (the receiver closes the connection as PEER_NI_CORRUPT); ends of
// different settings refuse each other by name; certificates of the cluster's CA are
// accepted and others refused. The frame traffic itself over TLS is the conformance
// suite's TcpTls case.
#include "transport/tls.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>

#include "base/test_nid.h"
#include "transport/tcp_transport.h"
#include "transport/test_frames.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

constexpr char kTlsKey[] = "0123456789abcdef-tls-test-key";

using test::ConnectResult;
using test::Recorder;

// A TCP relay on loopback: accepts one connection on `from`, connects it to `to`, and
// copies bytes both ways, keeping a copy. With tamper_at(N) it flips a byte of the
// client's stream at offset N. Its thread stops at destruction (poll waits are 50 ms).
class Relay {
 public:
  Relay(const char* from, const char* to, uint16_t port) : to_(to), port_(port) {
    lfd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a = addr(from, port);
    ok_ = bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && listen(lfd_, 1) == 0;
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
    for (int fd : {lfd_, cfd_, sfd_})
      if (fd >= 0) close(fd);
  }
  bool ok() const { return ok_; }
  void tamper_at(size_t offset) { tamper_ = offset; }
  std::string seen() {
    std::lock_guard lk(mu_);
    return seen_;
  }

 private:
  static sockaddr_in addr(const char* ip, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
  }
  void run() {
    while (!stop_ && cfd_ < 0) {
      pollfd p{lfd_, POLLIN, 0};
      if (poll(&p, 1, 50) == 1) cfd_ = accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
    }
    if (cfd_ < 0) return;
    sfd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = addr(to_, port_);
    if (connect(sfd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return;
    size_t client_bytes = 0;
    char buf[65536];
    while (!stop_) {
      pollfd p[2] = {{cfd_, POLLIN, 0}, {sfd_, POLLIN, 0}};
      if (poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = read(p[i].fd, buf, sizeof(buf));
        if (n <= 0) return;
        if (i == 0) {
          if (tamper_ >= client_bytes && tamper_ < client_bytes + size_t(n))
            buf[tamper_ - client_bytes] ^= 0x20;
          client_bytes += static_cast<size_t>(n);
        }
        {
          std::lock_guard lk(mu_);
          seen_.append(buf, static_cast<size_t>(n));
        }
        int out = i == 0 ? sfd_ : cfd_;
        for (ssize_t off = 0; off < n;) {
          ssize_t w = write(out, buf + off, static_cast<size_t>(n - off));
          if (w <= 0) return;
          off += w;
        }
      }
    }
  }

  const char* to_;
  uint16_t port_;
  int lfd_ = -1, cfd_ = -1, sfd_ = -1;
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> tamper_{SIZE_MAX};
  std::mutex mu_;
  std::string seen_;
  std::thread thread_;
};

TransportOptions opts(bool tls, const TlsConfig* certs = nullptr, std::string key = kTlsKey) {
  TransportOptions o;
  o.cluster_key = key;
  o.handshake_timeout = 3s;
  o.connect_timeout = 3s;
  if (tls) {
    TlsConfig tc = certs ? *certs : TlsConfig{};
    tc.enabled = true;
    auto ctx = TlsContext::create(tc, key);
    EXPECT_TRUE(ctx.ok()) << ctx.status().to_string();
    if (ctx.ok()) o.tls = *ctx;
  }
  return o;
}

// A bulk whose bytes spell a secret, to look for on the wire.
Buffer secret_bulk(size_t n) {
  static const std::string kWord = "SECRET-FILE-DATA.";
  Buffer b(n);
  for (size_t i = 0; i < n; ++i) b.data()[i] = static_cast<uint8_t>(kWord[i % kWord.size()]);
  return b;
}

class TlsTest : public ::testing::Test {
 protected:
  TlsTest() {
    static int instance = 0;
    n_ = ++instance;
    port_ = static_cast<uint16_t>(30000 + (getpid() * 11 + n_ * 3) % 20000);
  }
  MonotonicClock clock_;
  Recorder ea_, eb_;
  Nid a_ = nid("127.0.4.2@tcp"), b_ = nid("127.0.4.3@tcp"), relay_ = nid("127.0.4.4@tcp");
  int n_;
  uint16_t port_;

  // Sends one frame with a 256 KiB secret bulk from A to B through a relay on relay_;
  // returns what the relay saw.
  std::string through_relay(bool tls) {
    TcpTransport tb(opts(tls), {b_}, clock_, eb_);
    EXPECT_TRUE(tb.listen(b_, port_).ok());
    Relay relay("127.0.4.4", "127.0.4.3", port_);
    EXPECT_TRUE(relay.ok());
    TcpTransport ta(opts(tls), {a_}, clock_, ea_);
    ConnectResult cr;
    ta.connect(a_, relay_, port_, cr.cb());
    EXPECT_TRUE(cr.wait());
    EXPECT_TRUE(cr.status.ok()) << cr.status.to_string();
    if (!cr.conn) return "";
    auto f = test::frame(7, 100, 0, nullptr);
    f->bulk = make_bulk(secret_bulk(256 << 10));
    cr.conn->send(std::move(f));
    EXPECT_TRUE(eb_.wait([&] { return eb_.frames.size() == 1; }, 10s));
    std::lock_guard lk(eb_.mu_);
    if (eb_.frames.size() == 1) {
      EXPECT_TRUE(test::same(eb_.frames[0].bulk, secret_bulk(256 << 10)));
    }
    return relay.seen();
  }
};

TEST_F(TlsTest, NothingOnTheWireIsReadable) {
  std::string wire = through_relay(true);
  EXPECT_GT(wire.size(), size_t(256 << 10));
  EXPECT_EQ(wire.find("SECRET-FILE-DATA"), std::string::npos);  // the bulk
  EXPECT_EQ(wire.find("PFS1"), std::string::npos);              // a frame header
  // The HELLOs' NIDs: A's address in either byte order.
  uint32_t addr = a_.ipv4();
  std::string be, le;
  for (int i = 0; i < 4; ++i) {
    be += static_cast<char>(addr >> (24 - 8 * i));
    le += static_cast<char>(addr >> (8 * i));
  }
  EXPECT_EQ(wire.find(be), std::string::npos);
  EXPECT_EQ(wire.find(le), std::string::npos);
  // The relay shows plaintext as it is: without TLS the same check finds the bulk.
  ea_.frames.clear();
  eb_.frames.clear();
  ++port_;
  std::string plain = through_relay(false);
  EXPECT_NE(plain.find("SECRET-FILE-DATA"), std::string::npos);
}

TEST_F(TlsTest, AnAlteredRecordClosesTheConnectionAsCorruptAndIsNotDelivered) {
  TcpTransport tb(opts(true), {b_}, clock_, eb_);
  ASSERT_TRUE(tb.listen(b_, port_).ok());
  Relay relay("127.0.4.4", "127.0.4.3", port_);
  ASSERT_TRUE(relay.ok());
  relay.tamper_at(64 << 10);  // well past the handshake, inside the bulk's records
  TcpTransport ta(opts(true), {a_}, clock_, ea_);
  ConnectResult cr;
  ta.connect(a_, relay_, port_, cr.cb());
  ASSERT_TRUE(cr.wait());
  ASSERT_TRUE(cr.status.ok()) << cr.status.to_string();
  auto f = test::frame(8, 100, 0, nullptr);
  f->bulk = make_bulk(secret_bulk(256 << 10));
  cr.conn->send(std::move(f));
  ASSERT_TRUE(eb_.wait([&] { return !eb_.closed.empty(); }, 10s));
  std::lock_guard lk(eb_.mu_);
  EXPECT_EQ(eb_.closed[0].health_kind(), HealthKind::kPeerNiCorrupt) << eb_.closed[0].to_string();
  EXPECT_NE(eb_.closed[0].message().find("TLS"), std::string::npos);
  EXPECT_TRUE(eb_.frames.empty());  // nothing of the altered frame reached the node
}

TEST_F(TlsTest, PlaintextAndTlsEndsRefuseEachOtherByName) {
  {
    TcpTransport tb(opts(true), {b_}, clock_, eb_);
    ASSERT_TRUE(tb.listen(b_, port_).ok());
    TcpTransport ta(opts(false), {a_}, clock_, ea_);
    ConnectResult cr;
    ta.connect(a_, b_, port_, cr.cb());
    ASSERT_TRUE(cr.wait());
    EXPECT_EQ(cr.status.code(), Code::kRejected) << cr.status.to_string();
    EXPECT_NE(cr.status.message().find("requires TLS"), std::string::npos) << cr.status.to_string();
  }
  {
    TcpTransport tb(opts(false), {b_}, clock_, eb_);
    ASSERT_TRUE(tb.listen(b_, port_ + 1).ok());
    TcpTransport ta(opts(true), {a_}, clock_, ea_);
    ConnectResult cr;
    ta.connect(a_, b_, port_ + 1, cr.cb());
    ASSERT_TRUE(cr.wait());
    EXPECT_FALSE(cr.status.ok());
    EXPECT_NE(cr.status.message().find("TLS"), std::string::npos) << cr.status.to_string();
  }
  std::lock_guard lk(eb_.mu_);
  EXPECT_TRUE(eb_.conns.empty());
}

// A CA and a node certificate signed by it, made with the openssl command; the node's
// names 127.0.4.2 and 127.0.4.3 in its subjectAltName (both ends of these tests use it).
struct Pki {
  std::string dir, ca, cert, key;
};
// Another certificate of `p`'s CA, for `key` (the node's), naming `san` (an openssl
// subjectAltName value; empty: no subjectAltName) and valid for `days`: returns its path.
std::string issue(const Pki& p, const std::string& name, const std::string& san, int days = 2) {
  std::string ext = p.dir + "/" + name + ".ext";
  std::ofstream(ext) << (san.empty() ? "" : "subjectAltName=" + san + "\n");
  std::string cmd = "set -e; cd " + p.dir + "; openssl req -new -key node.key -out " + name +
                    ".csr -subj /CN=" + name + " 2>/dev/null; openssl x509 -req -in " + name +
                    ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -out " + name + ".pem -days " +
                    std::to_string(days) + " -extfile " + ext + " 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return p.dir + "/" + name + ".pem";
}
Pki make_pki(const std::string& name) {
  Pki p;
  p.dir = ::testing::TempDir() + "/pfsnet_tls_" + std::to_string(getpid()) + "_" + name;
  p.ca = p.dir + "/ca.pem";
  p.cert = p.dir + "/node.pem";
  p.key = p.dir + "/node.key";
  std::string d = p.dir;
  std::string cmd = "set -e; rm -rf " + d + "; mkdir -p " + d + "; cd " + d +
                    "; openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                    "-nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=" +
                    name +
                    "-ca 2>/dev/null; openssl req -newkey ec -pkeyopt "
                    "ec_paramgen_curve:prime256v1 -nodes -keyout node.key -out node.csr -subj "
                    "/CN=node 2>/dev/null; openssl x509 -req -in node.csr -CA ca.pem -CAkey "
                    "ca.key -CAcreateserial -out scratch.pem -days 2 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  p.cert = issue(p, "node", "IP:127.0.4.2,IP:127.0.4.3");
  return p;
}

TEST_F(TlsTest, CertificatesOfTheClusterCaAreAcceptedAndOthersRefused) {
  Pki ours = make_pki("ours"), theirs = make_pki("theirs");
  TlsConfig mine{true, ours.cert, ours.key, ours.ca};
  TlsConfig stranger{true, theirs.cert, theirs.key, ours.ca};  // trusts us, signed by another
  TcpTransport tb(opts(true, &mine), {b_}, clock_, eb_);
  ASSERT_TRUE(tb.listen(b_, port_).ok());
  {
    TcpTransport ta(opts(true, &mine), {a_}, clock_, ea_);
    ConnectResult cr;
    ta.connect(a_, b_, port_, cr.cb());
    ASSERT_TRUE(cr.wait());
    ASSERT_TRUE(cr.status.ok()) << cr.status.to_string();
  }
  {
    TcpTransport ta(opts(true, &stranger), {a_}, clock_, ea_);
    ConnectResult cr;
    ta.connect(a_, b_, port_, cr.cb());
    ASSERT_TRUE(cr.wait());
    EXPECT_EQ(cr.status.code(), Code::kRejected) << cr.status.to_string();
    EXPECT_EQ(cr.status.health_kind(), HealthKind::kPeerNiConnectionRejected);
  }
  std::lock_guard lk(eb_.mu_);
  EXPECT_EQ(eb_.conns.size(), 1u);

  // Files that are missing or do not belong together are named at startup.
  TlsConfig missing{true, ours.dir + "/nope.pem", ours.key, ours.ca};
  auto r = TlsContext::create(missing, kTlsKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tls.cert_file"), std::string::npos);
  TlsConfig mismatched{true, ours.cert, theirs.key, ours.ca};
  r = TlsContext::create(mismatched, kTlsKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not match"), std::string::npos);
  std::system(("rm -rf " + ours.dir + " " + theirs.dir).c_str());
}

// The certificates a context keeps for `pfsnet health`: the node's own and every CA of a
// bundle, each with its CN and its end (2 days from now, as make_pki issues them).
TEST(TlsContextTest, KeepsEachCertificateItUsesAndWhenItEnds) {
  Pki a = make_pki("kept-a"), b = make_pki("kept-b");
  const std::string bundle = a.dir + "/bundle.pem";
  ASSERT_EQ(std::system(("cat " + a.ca + " " + b.ca + " > " + bundle).c_str()), 0);
  auto ctx = TlsContext::create(TlsConfig{true, a.cert, a.key, bundle}, kTlsKey);
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  const std::vector<CertificateInForce>& v = (*ctx)->certificates();
  ASSERT_EQ(v.size(), 3u);
  const int64_t now_ms = unix_ms(MonotonicClock().wall_now());
  const std::vector<std::pair<std::string, std::string>> want = {
      {"tls.cert_file", "node"}, {"tls.ca_file", "kept-a-ca"}, {"tls.ca_file", "kept-b-ca"}};
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].setting, want[i].first);
    EXPECT_EQ(v[i].file, i == 0 ? a.cert : bundle);
    EXPECT_EQ(v[i].subject, want[i].second);
    // openssl's -days 2: within a minute of 2 days from now.
    EXPECT_NEAR(static_cast<double>(v[i].not_after_unix_ms - now_ms), 2 * 86'400'000.0, 60'000.0)
        << v[i].subject;
  }
  // With the cluster key (no certificates), none.
  auto psk = TlsContext::create(TlsConfig{true, "", "", ""}, kTlsKey);
  ASSERT_TRUE(psk.ok());
  EXPECT_TRUE((*psk)->certificates().empty());
  std::system(("rm -rf " + a.dir + " " + b.dir).c_str());
}

// A certificate names its node by the IP addresses of the node's NIDs (subjectAltName): a
// peer whose certificate -- of the cluster's CA, so TLS accepts it -- names another address,
// or none, is refused in the handshake with what it names and what it announced, whichever
// end it is; the refusal reaches the other end in the REJECT.
TEST_F(TlsTest, ACertificateForAnotherNidIsRefusedByName) {
  Pki ours = make_pki("named");
  const std::string other = issue(ours, "other", "IP:127.0.4.9,DNS:oss9");
  const std::string none = issue(ours, "none", "");
  TlsConfig good{true, ours.cert, ours.key, ours.ca};
  TlsConfig wrong{true, other, ours.key, ours.ca};
  TlsConfig unnamed{true, none, ours.key, ours.ca};
  auto attempt = [&](const TlsConfig& client, const TlsConfig& server) {
    Recorder ea, eb;
    TcpTransport tb(opts(true, &server), {b_}, clock_, eb);
    EXPECT_TRUE(tb.listen(b_, port_).ok());
    TcpTransport ta(opts(true, &client), {a_}, clock_, ea);
    ConnectResult cr;
    ta.connect(a_, b_, port_, cr.cb());
    EXPECT_TRUE(cr.wait());
    // The server reports its end after sending its last AUTH, which the client may take
    // first: an accepted connection is waited for; a refused one is never reported (the
    // refusing end stops before it, the other end is refused before it would).
    if (cr.status.ok()) {
      EXPECT_TRUE(eb.wait([&] { return eb.conns.size() == 1; }));
    }
    std::lock_guard lk(eb.mu_);
    EXPECT_EQ(eb.conns.size(), cr.status.ok() ? 1u : 0u);
    return cr.status;
  };
  Status s = attempt(good, good);
  EXPECT_TRUE(s.ok()) << s.to_string();
  // The client's names another node: the server refuses it, and says why.
  s = attempt(wrong, good);
  EXPECT_EQ(s.code(), Code::kRejected) << s.to_string();
  EXPECT_EQ(s.health_kind(), HealthKind::kPeerNiConnectionRejected);
  EXPECT_NE(s.message().find("refused by 127.0.4.3@tcp: its certificate (CN other) names "
                             "127.0.4.9 in subjectAltName, not 127.0.4.2 of 127.0.4.2@tcp"),
            std::string::npos)
      << s.to_string();
  // The server's names another node: the client refuses it.
  s = attempt(good, wrong);
  EXPECT_EQ(s.code(), Code::kRejected) << s.to_string();
  EXPECT_NE(s.message().find("refusing 127.0.4.3@tcp: its certificate (CN other) names "
                             "127.0.4.9 in subjectAltName, not 127.0.4.3"),
            std::string::npos)
      << s.to_string();
  // One that names no address at all.
  s = attempt(unnamed, good);
  EXPECT_EQ(s.code(), Code::kRejected) << s.to_string();
  EXPECT_NE(s.message().find("names no IP address"), std::string::npos) << s.to_string();
  std::system(("rm -rf " + ours.dir).c_str());
}

TEST(TlsNamesTest, EveryAnnouncedNidMustBeNamed) {
  const std::vector<Nid> two = {nid("198.18.0.2@tcp"), nid("198.18.1.2@o2ib")};
  EXPECT_EQ(certificate_names_nids("oss1", {"198.18.1.2", "198.18.0.2"}, two), "");
  EXPECT_NE(certificate_names_nids("oss1", {"198.18.0.2"}, two)
                .find("names 198.18.0.2 in subjectAltName, not 198.18.1.2 of 198.18.1.2@o2ib"),
            std::string::npos);
  EXPECT_NE(certificate_names_nids("", {}, two).find("(no CN) names no IP address"),
            std::string::npos);
}

TEST(TlsSessionTest, DescribesItsCipherAndWhereRecordsAreMade) {
  // A connected pair of sockets and both handshakes stepped by hand.
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  TlsConfig tc;
  tc.enabled = true;
  auto ctx = TlsContext::create(tc, kTlsKey);
  ASSERT_TRUE(ctx.ok());
  TlsSession client(*ctx, sv[0], true, kTlsKey), server(*ctx, sv[1], false, kTlsKey);
  bool c_done = false, s_done = false;
  for (int i = 0; i < 20 && !(c_done && s_done); ++i) {
    if (!c_done) {
      TlsIo r = client.handshake();
      ASSERT_NE(r.want, TlsIo::Want::kError) << r.error;
      c_done = r.want == TlsIo::Want::kNone;
    }
    if (!s_done) {
      TlsIo r = server.handshake();
      ASSERT_NE(r.want, TlsIo::Want::kError) << r.error;
      s_done = r.want == TlsIo::Want::kNone;
    }
  }
  ASSERT_TRUE(c_done && s_done);
  std::string d = client.describe();
  EXPECT_NE(d.find("TLSv1.3 TLS_AES_128_GCM_SHA256 psk"), std::string::npos) << d;
  // This kernel may or may not have the tls ULP; the description says which way it went.
  EXPECT_NE(d.find(client.ktls_send() ? "kernel TLS" : "user-space TLS"), std::string::npos) << d;
  TlsIo w = client.write("hello", 5);
  EXPECT_EQ(w.n, 5u);
  char buf[16] = {};
  TlsIo r = server.read(buf, sizeof(buf));
  EXPECT_EQ(r.n, 5u);
  EXPECT_EQ(std::string(buf, 5), "hello");
  r = server.read(buf, sizeof(buf));
  EXPECT_EQ(r.want, TlsIo::Want::kRead);  // nothing more: wait for the socket
  close(sv[0]);
  r = server.read(buf, sizeof(buf));
  EXPECT_EQ(r.want, TlsIo::Want::kClosed);
  close(sv[1]);
}

}  // namespace
}  // namespace pfsnet
