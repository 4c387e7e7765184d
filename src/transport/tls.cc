#include "transport/tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <ctime>
#include <string_view>

namespace pfsnet {
namespace {

constexpr size_t kReadAhead = 64 * 1024;
constexpr char kCipherSuites[] = "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256";
// TLS_AES_128_GCM_SHA256's code point: the cipher a PSK session is made for.
constexpr unsigned char kPskCipher[2] = {0x13, 0x01};

// The newest error on this thread's OpenSSL queue, as text; the queue is emptied.
std::string openssl_error() {
  unsigned long e = ERR_get_error();
  unsigned long last = e;
  while (e != 0) {
    last = e;
    e = ERR_get_error();
  }
  if (last == 0) return "unknown TLS error";
  char buf[256];
  ERR_error_string_n(last, buf, sizeof(buf));
  return buf;
}

// The PSK's session: TLS 1.3, its cipher, the key. Ownership goes to OpenSSL.
SSL_SESSION* psk_session(SSL* ssl, const std::string& psk) {
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kPskCipher);
  if (cipher == nullptr) return nullptr;
  SSL_SESSION* s = SSL_SESSION_new();
  if (s == nullptr) return nullptr;
  if (!SSL_SESSION_set1_master_key(s, reinterpret_cast<const unsigned char*>(psk.data()),
                                   psk.size()) ||
      !SSL_SESSION_set_cipher(s, cipher) || !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

int ctx_index() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// The SSL's capture of its traffic secrets (TlsSession::Captured), for the key log callback.
int session_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// "CLIENT_TRAFFIC_SECRET_0 <client random> <secret>" in hex: the secret, into `out`.
bool parse_secret(std::string_view line, std::string_view label, TrafficSecret& out) {
  if (line.substr(0, label.size()) != label || line.size() <= label.size() ||
      line[label.size()] != ' ')
    return false;
  size_t sp = line.rfind(' ');
  std::string_view hex = line.substr(sp + 1);
  if (hex.size() != 2 * out.size()) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

// OpenSSL's key log line of a session: its first application traffic secrets are kept
// (in memory only) for the records after the handshake.
void keep_secret(const SSL* ssl, const char* line) {
  auto* c = static_cast<CapturedSecrets*>(SSL_get_ex_data(ssl, session_index()));
  if (c == nullptr) return;
  if (parse_secret(line, "CLIENT_TRAFFIC_SECRET_0", c->client_secret)) c->client = true;
  if (parse_secret(line, "SERVER_TRAFFIC_SECRET_0", c->server_secret)) c->server = true;
}

// The SSL's PSKs (TlsPsks::attach), for the PSK callbacks.
int psk_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

const TlsPsks* psks_of(SSL* ssl) {
  return static_cast<const TlsPsks*>(SSL_get_ex_data(ssl, psk_index()));
}

// Client: offer the PSK of its current cluster key (its hash is SHA-256; asked again for
// another hash, none), under that key's identity.
int use_psk(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* idlen,
            SSL_SESSION** sess) {
  *sess = nullptr;
  if (md != nullptr && EVP_MD_get_type(md) != NID_sha256) return 1;
  const TlsPsks* p = psks_of(ssl);
  if (p == nullptr || p->keys.empty()) return 0;
  *sess = psk_session(ssl, p->keys[0].psk);
  if (*sess == nullptr) return 0;
  *id = reinterpret_cast<const unsigned char*>(p->offer.data());
  *idlen = p->offer.size();
  return 1;
}

// Server: the PSK of the cluster key the client's identity names; an identity none of its
// keys has gets none (the handshake then fails: this server has no certificate).
int find_psk(SSL* ssl, const unsigned char* id, size_t idlen, SSL_SESSION** sess) {
  *sess = nullptr;
  const TlsPsks* p = psks_of(ssl);
  if (p == nullptr) return 0;
  const std::string* psk = p->find(std::string_view(reinterpret_cast<const char*>(id), idlen));
  if (psk == nullptr) return 1;
  *sess = psk_session(ssl, *psk);
  return *sess != nullptr ? 1 : 0;
}

// `x`'s subject CN, or "".
std::string common_name(X509* x) {
  char cn[256] = {};
  if (x == nullptr ||
      X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn - 1) < 0)
    return "";
  return cn;
}

CertificateInForce in_force(const char* setting, const std::string& file, X509* x) {
  CertificateInForce c{setting, file, common_name(x), 0};
  std::tm tm{};
  if (x != nullptr && ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1)
    c.not_after_unix_ms = static_cast<int64_t>(timegm(&tm)) * 1000;
  return c;
}

}  // namespace

Result<std::shared_ptr<const TlsContext>> TlsContext::create(const TlsConfig& cfg,
                                                             const std::string& cluster_key) {
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
    std::signal(SIGPIPE, SIG_IGN);
  ERR_clear_error();
  std::shared_ptr<TlsContext> t(new TlsContext());
  t->ctx_ = SSL_CTX_new(TLS_method());
  if (t->ctx_ == nullptr) return Status(Code::kInternal, "TLS: " + openssl_error());
  SSL_CTX* c = t->ctx_;
  SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION);
  if (!SSL_CTX_set_ciphersuites(c, kCipherSuites))
    return Status(Code::kInternal, "TLS ciphers: " + openssl_error());
  // No tickets, no resumption, no early data: every connection runs a full handshake.
  SSL_CTX_set_num_tickets(c, 0);
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  // A peer that closes without close_notify (pfsnet never sends one: a connection ends
  // with its socket) is an end of stream, not an error.
  SSL_CTX_set_options(c, SSL_OP_NO_TICKET | SSL_OP_ENABLE_KTLS | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  t->own_records_ = cfg.records != "openssl";
  if (!t->own_records_) {
    // Read ahead into a buffer of several records: one read(2) brings in up to 64 KiB of
    // records instead of one call per record (and one for its header).
    SSL_CTX_set_read_ahead(c, 1);
    SSL_CTX_set_default_read_buffer_len(c, kReadAhead);
  }
  // (With records of our own OpenSSL reads no further than the handshake's last record:
  // what follows is ours, so nothing may wait in its buffer.)
  if (t->own_records_) SSL_CTX_set_keylog_callback(c, keep_secret);
  SSL_CTX_set_ex_data(c, ctx_index(), t.get());
  if (!cfg.cert_file.empty()) {
    t->certs_ = true;
    if (SSL_CTX_use_certificate_chain_file(c, cfg.cert_file.c_str()) != 1)
      return Status(Code::kInvalidArgument,
                    "tls.cert_file " + cfg.cert_file + ": " + openssl_error());
    if (SSL_CTX_use_PrivateKey_file(c, cfg.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      bool mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
      std::string why = openssl_error();
      return Status(Code::kInvalidArgument,
                    "tls.key_file " + cfg.key_file +
                        (mismatch ? " does not match tls.cert_file " + cfg.cert_file : ": " + why));
    }
    if (SSL_CTX_check_private_key(c) != 1)
      return Status(Code::kInvalidArgument, "tls.key_file " + cfg.key_file +
                                                " does not match tls.cert_file " + cfg.cert_file);
    if (SSL_CTX_load_verify_locations(c, cfg.ca_file.c_str(), nullptr) != 1)
      return Status(Code::kInvalidArgument, "tls.ca_file " + cfg.ca_file + ": " + openssl_error());
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    t->certificates_.push_back(
        in_force("tls.cert_file", cfg.cert_file, SSL_CTX_get0_certificate(c)));
    // The CA certificates load_verify_locations took in (every one of a bundle).
    STACK_OF(X509_OBJECT)* cas = X509_STORE_get0_objects(SSL_CTX_get_cert_store(c));
    for (int i = 0; i < sk_X509_OBJECT_num(cas); ++i)
      if (X509* ca = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(cas, i)))
        t->certificates_.push_back(in_force("tls.ca_file", cfg.ca_file, ca));
  } else {
    if (cluster_key.empty())
      return Status(Code::kInvalidArgument, "TLS keyed from the cluster key needs a cluster key");
    SSL_CTX_set_psk_use_session_callback(c, use_psk);
    SSL_CTX_set_psk_find_session_callback(c, find_psk);
  }
  return std::shared_ptr<const TlsContext>(std::move(t));
}

TlsContext::~TlsContext() {
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

std::string tls_psk(std::string_view cluster_key) {
  unsigned char mac[32];
  unsigned int len = sizeof(mac);
  HMAC(EVP_sha256(), cluster_key.data(), static_cast<int>(cluster_key.size()),
       reinterpret_cast<const unsigned char*>(kPskLabel), sizeof(kPskLabel) - 1, mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

std::string tls_psk_identity(std::string_view psk) {
  return std::string(kPskLabel) + " " + key_fingerprint(psk);
}

TlsPsks::TlsPsks(const ClusterKeys& k) {
  for (const std::string* key : {&k.current, &k.next, &k.previous}) {
    if (key->empty()) continue;
    std::string psk = tls_psk(*key);
    std::string id = tls_psk_identity(psk);
    keys.push_back({std::move(psk), std::move(id)});
  }
  if (!keys.empty()) offer = k.rotating() ? keys[0].identity : std::string(kPskLabel);
}

TlsPsks::~TlsPsks() {
  for (Key& k : keys) OPENSSL_cleanse(k.psk.data(), k.psk.size());
}

void TlsPsks::attach(SSL* ssl) { SSL_set_ex_data(ssl, psk_index(), this); }

const std::string* TlsPsks::find(std::string_view identity) const {
  if (keys.empty()) return nullptr;
  if (identity == kPskLabel) return &keys[0].psk;
  for (const Key& k : keys)
    if (k.identity == identity) return &k.psk;
  return nullptr;
}

TlsSession::TlsSession(std::shared_ptr<const TlsContext> ctx, int fd, bool client,
                       const ClusterKeys& keys)
    : ctx_(std::move(ctx)),
      is_client_(client),
      psks_(ctx_->uses_certificates() ? ClusterKeys() : keys) {
  MutexLock lk(mu_);
  ssl_ = SSL_new(ctx_->ctx());
  if (ssl_ == nullptr) return;
  SSL_set_fd(ssl_, fd);
  if (ctx_->own_records()) SSL_set_ex_data(ssl_, session_index(), &captured_);
  if (!ctx_->uses_certificates()) psks_.attach(ssl_);
  if (client) {
    SSL_set_connect_state(ssl_);
  } else {
    SSL_set_accept_state(ssl_);
  }
}

TlsSession::~TlsSession() {
  MutexLock lk(mu_);
  if (ssl_ != nullptr) SSL_free(ssl_);
  OPENSSL_cleanse(&captured_, sizeof(captured_));
}

std::optional<TrafficSecrets> TlsSession::take_traffic_secrets() {
  bool kernel = ktls_send() || ktls_recv();
  MutexLock lk(mu_);
  if (ssl_ == nullptr || kernel || !ctx_->own_records() || !SSL_is_init_finished(ssl_) ||
      !captured_.client || !captured_.server || SSL_has_pending(ssl_))
    return std::nullopt;
  const SSL_CIPHER* c = SSL_get_current_cipher(ssl_);
  if (c == nullptr || SSL_CIPHER_get_protocol_id(c) != 0x1301) return std::nullopt;
  TrafficSecrets s;
  s.read = is_client_ ? captured_.server_secret : captured_.client_secret;
  s.write = is_client_ ? captured_.client_secret : captured_.server_secret;
  OPENSSL_cleanse(&captured_, sizeof(captured_));
  records_taken_ = true;
  return s;
}

TlsIo TlsSession::result_of(int ok, size_t n) {
  TlsIo r;
  if (ok > 0) {
    r.n = n;
    return r;
  }
  int err = SSL_get_error(ssl_, ok);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      r.want = TlsIo::Want::kRead;
      return r;
    case SSL_ERROR_WANT_WRITE:
      r.want = TlsIo::Want::kWrite;
      return r;
    case SSL_ERROR_ZERO_RETURN:
      r.want = TlsIo::Want::kClosed;
      return r;
    case SSL_ERROR_SYSCALL:
      if (errno == 0 && ERR_peek_error() == 0) {
        r.want = TlsIo::Want::kClosed;  // end of stream without close_notify
        return r;
      }
      r.want = TlsIo::Want::kError;
      r.sys_errno = errno;
      r.error = ERR_peek_error() != 0 ? openssl_error() : std::strerror(errno);
      return r;
    default: {
      r.want = TlsIo::Want::kError;
      unsigned long e = ERR_peek_last_error();
      r.bad_mac = ERR_GET_REASON(e) == SSL_R_DECRYPTION_FAILED_OR_BAD_RECORD_MAC;
      r.error = openssl_error();
      if (ctx_->uses_certificates() && SSL_get_verify_result(ssl_) != X509_V_OK)
        r.error += std::string(" (certificate: ") +
                   X509_verify_cert_error_string(SSL_get_verify_result(ssl_)) + ")";
      return r;
    }
  }
}

TlsIo TlsSession::handshake() {
  MutexLock lk(mu_);
  if (ssl_ == nullptr) return TlsIo{0, TlsIo::Want::kError, "TLS: no session", 0, false};
  ERR_clear_error();
  errno = 0;
  int ok = SSL_do_handshake(ssl_);
  return result_of(ok, 0);
}

TlsIo TlsSession::read(void* p, size_t n) {
  MutexLock lk(mu_);
  if (ssl_ == nullptr) return TlsIo{0, TlsIo::Want::kError, "TLS: no session", 0, false};
  ERR_clear_error();
  errno = 0;
  size_t got = 0;
  int ok = SSL_read_ex(ssl_, p, n, &got);
  return result_of(ok, got);
}

TlsIo TlsSession::write(const void* p, size_t n) {
  MutexLock lk(mu_);
  if (ssl_ == nullptr) return TlsIo{0, TlsIo::Want::kError, "TLS: no session", 0, false};
  ERR_clear_error();
  errno = 0;
  size_t put = 0;
  int ok = SSL_write_ex(ssl_, p, n, &put);
  return result_of(ok, put);
}

bool TlsSession::ktls_send() const {
  MutexLock lk(mu_);
  return ssl_ != nullptr && BIO_get_ktls_send(SSL_get_wbio(ssl_));
}

bool TlsSession::ktls_recv() const {
  MutexLock lk(mu_);
  return ssl_ != nullptr && BIO_get_ktls_recv(SSL_get_rbio(ssl_));
}

std::string certificate_names_nids(const std::string& subject,
                                   const std::vector<std::string>& ip_names,
                                   const std::vector<Nid>& nids) {
  for (const Nid& n : nids) {
    const std::string a = n.address_string();
    if (std::find(ip_names.begin(), ip_names.end(), a) != ip_names.end()) continue;
    std::string named;
    for (const std::string& ip : ip_names) named += (named.empty() ? "" : ", ") + ip;
    return "its certificate (" + (subject.empty() ? std::string("no CN") : "CN " + subject) +
           ") names " + (named.empty() ? std::string("no IP address") : named) +
           " in subjectAltName, not " + a + " of " + n.to_string() + ", which the peer announces";
  }
  return "";
}

std::string TlsSession::peer_subject() const {
  MutexLock lk(mu_);
  return common_name(ssl_ ? SSL_get0_peer_certificate(ssl_) : nullptr);
}

std::vector<std::string> TlsSession::peer_ip_names() const {
  std::vector<std::string> out;
  MutexLock lk(mu_);
  X509* cert = ssl_ ? SSL_get0_peer_certificate(ssl_) : nullptr;
  if (!cert) return out;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (!names) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(names, i);
    if (g->type != GEN_IPADD) continue;
    const ASN1_OCTET_STRING* ip = g->d.iPAddress;
    char text[INET6_ADDRSTRLEN] = {};
    int family = ip->length == 4 ? AF_INET : ip->length == 16 ? AF_INET6 : 0;
    if (family && inet_ntop(family, ip->data, text, sizeof text)) out.push_back(text);
  }
  GENERAL_NAMES_free(names);
  return out;
}

std::string TlsSession::describe() const {
  bool send = ktls_send(), recv = ktls_recv();
  MutexLock lk(mu_);
  if (ssl_ == nullptr) return "TLS (no session)";
  const SSL_CIPHER* c = SSL_get_current_cipher(ssl_);
  std::string s = std::string(SSL_get_version(ssl_)) + " " +
                  (c != nullptr ? SSL_CIPHER_get_name(c) : "?") +
                  (ctx_->uses_certificates() ? " certificates" : " psk");
  if (send || recv) {
    s += std::string(", kernel TLS ") + (send && recv ? "send+receive" : send ? "send" : "receive");
  } else {
    s += records_taken_ ? ", user-space TLS (records: ipsec-mb)"
                        : ", user-space TLS (records: OpenSSL)";
  }
  return s;
}

}  // namespace pfsnet
