// TLS 1.3 for TcpTransport (tls.* config, off by default): every byte of a connection --
// the cluster-key handshake, frames, bulk -- in TLS records, encrypted and authenticated.
//
// Keying. By default from the cluster key: an external PSK (RFC 8446 4.2.11), the
// HMAC-SHA256 of the cluster key over kPskLabel, with (EC)DHE on top (psk_dhe_ke), so a
// leaked cluster key does not open recorded traffic. Or, with cert_file, key_file and
// ca_file, certificates: each end proves one signed by ca_file (mutual), which must name
// the NIDs the peer announces (certificate_names_nids, checked in the handshake). Either way the
// cluster-key HELLO/AUTH handshake then runs inside TLS as without it. Ciphers:
// TLS_AES_128_GCM_SHA256 first (AES-NI), then TLS_CHACHA20_POLY1305_SHA256 (both SHA-256, so the
// PSK's hash).
//
// Records: once the handshake is over, by pfsnet (tls_records.h: Intel's multi-buffer
// AES-GCM, many records per system call, no copy besides the socket's) when tls.records is
// "ipsec-mb" and the suite is TLS_AES_128_GCM_SHA256; the traffic secrets come from
// OpenSSL's key log callback (kept in memory, never written). Else by OpenSSL.
//
// Kernel TLS: SSL_OP_ENABLE_KTLS is set; when the kernel has the tls ULP (CONFIG_TLS) and
// OpenSSL takes it, records are built (send) or opened (receive) by the kernel and
// TlsSession's read/write pass plaintext through it; otherwise OpenSSL does them in
// user space. TlsSession::describe() says which.
//
// Threads: TlsContext is immutable after create() and shared by every connection. A
// TlsSession may be used from any thread: each call holds its mutex (OpenSSL forbids
// concurrent use of one SSL, even one reader and one writer). Every call is non-blocking.
#pragma once

#include <pfsnet/config.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "transport/tls_records.h"
#include "wire/handshake.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace pfsnet {

// The context string of the PSK derived from the cluster key (and the PSK identity).
inline constexpr char kPskLabel[] = "pfsnet tls 1.3 psk v1";

// A certificate a node's TLS uses (tls.cert_file's, or one of tls.ca_file's), as it was
// read at startup: what `pfsnet health` warns of before it expires.
struct CertificateInForce {
  std::string setting;  // "tls.cert_file" or "tls.ca_file"
  std::string file;
  std::string subject;  // its CN ("" when it has none)
  int64_t not_after_unix_ms = 0;
  bool operator==(const CertificateInForce&) const = default;
};

class TlsContext {
 public:
  // Builds the context from the [tls] config: certificates when cert_file is set (each
  // file read and checked now: a bad one is an error naming it), else a PSK from
  // `cluster_key`. Sets SIGPIPE to be ignored when it is at its default (OpenSSL writes
  // with write(2); a closed peer must be an error, not the end of the process).
  static Result<std::shared_ptr<const TlsContext>> create(const TlsConfig& cfg,
                                                          const std::string& cluster_key);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  bool uses_certificates() const { return certs_; }
  // tls.records = "ipsec-mb": records by tls_records.h after the handshake.
  bool own_records() const { return own_records_; }
  SSL_CTX* ctx() const { return ctx_; }
  // With certificates: the node's own and its CA's, with when each expires.
  const std::vector<CertificateInForce>& certificates() const { return certificates_; }

 private:
  TlsContext() = default;
  std::vector<CertificateInForce> certificates_;
  SSL_CTX* ctx_ = nullptr;
  bool certs_ = false;
  bool own_records_ = false;
};

// The PSK keyed from a cluster key: HMAC-SHA256(key, kPskLabel).
std::string tls_psk(std::string_view cluster_key);
// The identity naming a PSK in a ClientHello while a rotation is under way: kPskLabel, a
// space, the PSK's key_fingerprint (which says which key, and nothing of it).
std::string tls_psk_identity(std::string_view psk);

// A connection's PSKs, one per cluster key it holds (current first). A client offers its
// current key's: under kPskLabel alone when it holds one key (what every release sends),
// under that key's identity while it rotates. A server finds kPskLabel's in its current
// key, any other identity's in the key it names.
struct TlsPsks {
  struct Key {
    std::string psk, identity;
  };
  explicit TlsPsks(const ClusterKeys& keys);
  ~TlsPsks();
  TlsPsks(const TlsPsks&) = delete;
  TlsPsks& operator=(const TlsPsks&) = delete;
  // The PSK for a client's identity (null: none of these keys).
  const std::string* find(std::string_view identity) const;
  // Makes them the PSKs of `ssl`, an SSL of a TlsContext keyed from the cluster key (what
  // TlsSession does; for a bare SSL, as tests make). `this` outlives its handshake.
  void attach(SSL* ssl);
  std::vector<Key> keys;
  std::string offer;  // the identity a client offers
};

// A certificate names a node by the IP addresses of its NIDs, each an iPAddress entry of
// its subjectAltName (not its host name: a NID is an address, a node's NIDs are several,
// and an address is checked without asking DNS). "" when `ip_names` hold the address of
// every NID in `nids`; else the refusal, naming what the certificate names and the NID it
// does not.
std::string certificate_names_nids(const std::string& subject,
                                   const std::vector<std::string>& ip_names,
                                   const std::vector<Nid>& nids);

// What the key log callback saw of a session's first application traffic secrets.
struct CapturedSecrets {
  bool client = false, server = false;
  TrafficSecret client_secret{}, server_secret{};
};

// A connection's application traffic secrets, by direction.
struct TrafficSecrets {
  TrafficSecret read, write;
};

// What a non-blocking TLS call did: moved `n` bytes, or wants the socket readable or
// writable before it is called again with the same arguments, or ended.
struct TlsIo {
  enum class Want { kNone, kRead, kWrite, kClosed, kError };
  size_t n = 0;
  Want want = Want::kNone;
  std::string error;     // kError: OpenSSL's reason (or the system error)
  int sys_errno = 0;     // kError from a system call: its errno
  bool bad_mac = false;  // kError: a record failed authentication (altered on the way)
};

// One connection's TLS state over its socket `fd` (non-blocking; not owned: closing it
// is the caller's).
class TlsSession {
 public:
  // `keys`: the node's cluster keys now, which key the PSK when `ctx` has no certificates.
  TlsSession(std::shared_ptr<const TlsContext> ctx, int fd, bool client,
             const ClusterKeys& keys = {});
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // One step of the handshake: kNone when it is done.
  TlsIo handshake();
  TlsIo read(void* p, size_t n);
  // Writes whole records of up to `n` bytes (partial writes allowed: n says how many went);
  // after kWrite, call again with the same bytes.
  TlsIo write(const void* p, size_t n);

  // After the handshake: the traffic secrets, when the records are to be pfsnet's from
  // here on (tls.records "ipsec-mb", TLS_AES_128_GCM_SHA256, no kernel TLS, nothing read
  // ahead or pending in OpenSSL); the session keeps no copy and must not read or write again.
  std::optional<TrafficSecrets> take_traffic_secrets();

  // With certificates, after the handshake: the peer certificate's subject (its CN) and the
  // IP addresses of its subjectAltName ("198.18.0.2", "2001:2::5"), which say what node
  // it is (certificate_names_nids).
  std::string peer_subject() const;
  bool uses_certificates() const { return ctx_->uses_certificates(); }
  std::vector<std::string> peer_ip_names() const;

  // "TLSv1.3 TLS_AES_128_GCM_SHA256 psk, user-space TLS (records: ipsec-mb)" (after the
  // handshake).
  std::string describe() const;
  bool ktls_send() const;
  bool ktls_recv() const;

 private:
  TlsIo result_of(int ok, size_t n) REQUIRES(mu_);

  std::shared_ptr<const TlsContext> ctx_;
  mutable Mutex mu_;
  SSL* ssl_ GUARDED_BY(mu_) = nullptr;
  bool is_client_ = false;
  CapturedSecrets captured_ GUARDED_BY(mu_);  // by the key log callback, in handshake()
  bool records_taken_ GUARDED_BY(mu_) = false;
  TlsPsks psks_;  // read by OpenSSL's PSK callbacks, in handshake()
};

}  // namespace pfsnet
