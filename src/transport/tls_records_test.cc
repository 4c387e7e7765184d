// TLS records sealed and opened by pfsnet (tls_records.h) against OpenSSL's own record
// layer at the other end of a socket: what one writes the other reads, both ways, through
// key updates each side starts or asks for, padded records, and close_notify; and, with no
// socket, a sealed record altered or cut is refused.
#include "transport/tls_records.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "transport/tcp_stream.h"
#include "transport/tls.h"

namespace pfsnet {
namespace {

constexpr char kRecordsKey[] = "0123456789abcdef-records-test-key";

std::vector<uint8_t> record_bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed + (i >> 12));
  return v;
}

// Our end (TlsSession, records "ipsec-mb") and OpenSSL's (a bare SSL of a context with
// records "openssl") over a socket pair, the handshake stepped by hand.
class RecordsInteropTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv_), 0);
    TlsConfig ours{true, "", "", "", "ipsec-mb"}, theirs{true, "", "", "", "openssl"};
    ours_ctx_ = *TlsContext::create(ours, kRecordsKey);
    their_ctx_ = *TlsContext::create(theirs, kRecordsKey);
    ours_ = std::make_unique<TlsSession>(ours_ctx_, sv_[0], true, ClusterKeys(kRecordsKey));
    peer_ = SSL_new(their_ctx_->ctx());
    peer_psks_.attach(peer_);
    SSL_set_fd(peer_, sv_[1]);
    SSL_set_accept_state(peer_);
    bool ours_done = false, peer_done = false;
    for (int i = 0; i < 20 && !(ours_done && peer_done); ++i) {
      if (!ours_done) {
        TlsIo r = ours_->handshake();
        ASSERT_NE(r.want, TlsIo::Want::kError) << r.error;
        ours_done = r.want == TlsIo::Want::kNone;
      }
      if (!peer_done) {
        int ok = SSL_do_handshake(peer_);
        if (ok != 1) {
          ASSERT_EQ(SSL_get_error(peer_, ok), SSL_ERROR_WANT_READ);
        }
        peer_done = ok == 1;
      }
    }
    ASSERT_TRUE(ours_done && peer_done);
    auto secrets = ours_->take_traffic_secrets();
    ASSERT_TRUE(secrets.has_value());
    stream_ = std::make_unique<tcp_detail::TlsRecordStream>(sv_[0], secrets->read, secrets->write,
                                                            kMaxRecords);
  }
  void TearDown() override {
    if (peer_ != nullptr) SSL_free(peer_);
    close(sv_[0]);
    close(sv_[1]);
  }

  // Ours writes `data` while OpenSSL reads it; what OpenSSL read.
  std::vector<uint8_t> ours_to_peer(const std::vector<uint8_t>& data) {
    std::vector<uint8_t> got(data.size());
    size_t sent = 0, read = 0;
    for (int i = 0; i < 100000 && read < data.size(); ++i) {
      if (sent < data.size()) {
        iovec v{const_cast<uint8_t*>(data.data()) + sent, data.size() - sent};
        tcp_detail::StreamIo w = stream_->write({&v, 1});
        EXPECT_TRUE(w.failed.ok()) << w.failed.to_string();
        sent += w.n;
      }
      size_t n = 0;
      if (SSL_read_ex(peer_, got.data() + read, got.size() - read, &n) == 1) read += n;
    }
    got.resize(read);
    return got;
  }

  // OpenSSL writes `data` while ours reads it into two buffers at a time (a 24-byte
  // "header" and the rest), as the connection reads a frame.
  std::vector<uint8_t> peer_to_ours(const std::vector<uint8_t>& data) {
    std::vector<uint8_t> got(data.size());
    size_t sent = 0, read = 0;
    for (int i = 0; i < 100000 && read < data.size(); ++i) {
      size_t n = 0;
      if (sent < data.size() && SSL_write_ex(peer_, data.data() + sent, data.size() - sent, &n))
        sent += n;
      size_t head = std::min<size_t>(24, data.size() - read);
      iovec v[2] = {{got.data() + read, head},
                    {got.data() + read + head, data.size() - read - head}};
      tcp_detail::StreamIo r = stream_->read({v, v[1].iov_len ? 2u : 1u});
      EXPECT_TRUE(r.failed.ok()) << r.failed.to_string();
      if (!r.failed.ok()) break;
      read += r.n;
    }
    got.resize(read);
    return got;
  }

  static constexpr uint64_t kMaxRecords = 4;  // a key update every few records
  int sv_[2] = {-1, -1};
  std::shared_ptr<const TlsContext> ours_ctx_, their_ctx_;
  std::unique_ptr<TlsSession> ours_;
  TlsPsks peer_psks_{ClusterKeys(kRecordsKey)};
  SSL* peer_ = nullptr;
  std::unique_ptr<tcp_detail::TlsRecordStream> stream_;
};

TEST_F(RecordsInteropTest, OpenSslReadsOurRecordsAcrossOurKeyUpdates) {
  std::vector<uint8_t> data = record_bytes(600 * 1024 + 77, 1);
  EXPECT_EQ(ours_to_peer(data), data);
  // 38 records under keys good for 4 each (a KeyUpdate is one of the 4).
  EXPECT_GE(stream_->key_updates_sent(), 12u);
  EXPECT_NE(ours_->describe().find("records: ipsec-mb"), std::string::npos) << ours_->describe();
}

TEST_F(RecordsInteropTest, WeReadOpenSslsRecordsPaddedAndAcrossItsKeyUpdateAndAnswerIt) {
  SSL_set_block_padding(peer_, 4096);  // every record padded to a multiple of 4 KiB
  std::vector<uint8_t> data = record_bytes(300 * 1024 + 5, 2);
  EXPECT_EQ(peer_to_ours(data), data);
  EXPECT_EQ(stream_->key_updates_received(), 0u);
  // OpenSSL updates its key and asks for ours: we follow, and our next write updates too.
  ASSERT_EQ(SSL_key_update(peer_, SSL_KEY_UPDATE_REQUESTED), 1);
  std::vector<uint8_t> after = record_bytes(40 * 1024, 3);
  EXPECT_EQ(peer_to_ours(after), after);
  EXPECT_EQ(stream_->key_updates_received(), 1u);
  uint64_t sent_before = stream_->key_updates_sent();
  std::vector<uint8_t> reply = record_bytes(1000, 4);
  EXPECT_EQ(ours_to_peer(reply), reply);
  EXPECT_EQ(stream_->key_updates_sent(), sent_before + 1);
  // close_notify: the end of our stream.
  SSL_shutdown(peer_);
  uint8_t b[16];
  iovec v{b, sizeof(b)};
  tcp_detail::StreamIo r = stream_->read({&v, 1});
  EXPECT_TRUE(r.by_peer) << r.failed.to_string();
  EXPECT_FALSE(stream_->read({&v, 1}).failed.ok());  // and every read after it
}

TEST(TlsRecordsTest, SealedRecordsOpenIntoAnyBuffersAndAnAlteredOrMalformedOneIsRefused) {
  TrafficSecret secret{};
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(i * 7);
  UpdateRequest req_a{false}, req_b{false};
  RecordSealer sealer(secret, req_a);
  std::vector<uint8_t> a = record_bytes(40000, 5), b = record_bytes(3, 6),
                       c = record_bytes(30000, 7);
  iovec from[3] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  std::vector<uint8_t> out(RecordSealer::sealed_size(a.size() + b.size() + c.size()));
  size_t out_len = 0;
  std::vector<RecordEnd> ends;
  size_t sealed = sealer.seal({from, 3}, 0, 1 << 20, out.data(), out_len, ends);
  ASSERT_EQ(sealed, a.size() + b.size() + c.size());
  ASSERT_EQ(ends.size(), 5u);  // 70003 bytes: four whole records and one short
  EXPECT_EQ(ends.back().out_end, out_len);
  EXPECT_EQ(out_len, sealed + 5 * (kTlsHeader + 1 + kTlsTag));

  std::vector<uint8_t> want = a;
  want.insert(want.end(), b.begin(), b.end());
  want.insert(want.end(), c.begin(), c.end());
  {  // opened into odd-sized buffers: some records straight in, some aside
    RecordOpener opener(secret, req_b);
    std::vector<uint8_t> got(want.size());
    size_t in_off = 0, got_off = 0;
    for (int i = 0; i < 1000 && got_off < got.size(); ++i) {
      size_t room = std::min<size_t>(got.size() - got_off, i % 2 ? 20000 : 7);
      iovec v{got.data() + got_off, room};
      size_t used = 0;
      OpenResult r = opener.open({out.data() + in_off, out_len - in_off}, used, {&v, 1});
      ASSERT_TRUE(r.error.empty()) << r.error;
      in_off += used;
      got_off += r.n;
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(in_off, out_len);
  }
  {  // one bit flipped in the second record's ciphertext
    std::vector<uint8_t> bad(out.begin(), out.begin() + static_cast<long>(out_len));
    bad[ends[0].out_end + 100] ^= 0x10;
    RecordOpener opener(secret, req_b);
    std::vector<uint8_t> got(want.size());
    iovec v{got.data(), got.size()};
    size_t used = 0;
    OpenResult r = opener.open(bad, used, {&v, 1});
    EXPECT_TRUE(r.bad_mac);
    EXPECT_EQ(r.n, kTlsMaxPlain);  // the first record, and nothing of the altered one
  }
  {  // a header claiming more than a record may hold; another record type
    std::vector<uint8_t> bad = {23, 3, 3, 0x50, 0x00};
    RecordOpener opener(secret, req_b);
    uint8_t buf[64];
    iovec v{buf, sizeof(buf)};
    size_t used = 0;
    OpenResult r = opener.open(bad, used, {&v, 1});
    EXPECT_NE(r.error.find("malformed record"), std::string::npos) << r.error;
    bad = {22, 3, 3, 0, 20};
    r = opener.open(bad, used, {&v, 1});
    EXPECT_NE(r.error.find("malformed record (type 22"), std::string::npos) << r.error;
  }
  {  // under another key: refused
    TrafficSecret other = secret;
    other[0] ^= 1;
    RecordOpener opener(other, req_b);
    uint8_t buf[64];
    iovec v{buf, sizeof(buf)};
    size_t used = 0;
    OpenResult r = opener.open({out.data(), out_len}, used, {&v, 1});
    EXPECT_TRUE(r.bad_mac);
    EXPECT_EQ(r.n, 0u);
  }
}

TEST(TlsRecordsTest, HkdfExpandLabelMatchesRfc8448) {
  // RFC 8448 (TLS 1.3 traces), "Simple 1-RTT Handshake": the server's application traffic
  // secret and the key and IV expanded from it.
  auto hex = [](const std::string& h) {
    std::vector<uint8_t> v;
    for (size_t i = 0; i + 1 < h.size(); i += 2)
      v.push_back(std::stoi(h.substr(i, 2), nullptr, 16));
    return v;
  };
  std::vector<uint8_t> secret =
      hex("a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643");
  EXPECT_EQ(hkdf_expand_label(secret, "key", 16), hex("9f02283b6c9c07efc26bb9f2ac92e356"));
  EXPECT_EQ(hkdf_expand_label(secret, "iv", 12), hex("cf782b88dd83549aadf1e984"));
}

}  // namespace
}  // namespace pfsnet
