// TLS 1.3 record protection (RFC 8446 section 5) for TLS_AES_128_GCM_SHA256, done here
// rather than by OpenSSL once its handshake is over -- what kernel TLS does, in user space:
// OpenSSL agrees the keys, these seal and open the records. The records on the wire are
// TLS's own (an OpenSSL peer reads and writes them, tls_records_test.cc), but:
//   - AES-GCM is Intel's multi-buffer library's (intel-ipsec-mb: VAES and VPCLMULQDQ on
//     AVX-512 where the CPU has them, 10.7 GB/s on this VM where OpenSSL 3.0 does 4.2);
//   - a record is sealed straight from the caller's buffers into the bytes sent, and opened
//     straight from the bytes received into the caller's buffers: no copy besides the
//     socket's (OpenSSL copies each record's plaintext once more each way);
//   - many records go in one sendmsg and come in one recv (OpenSSL writes each with its own
//     write(2)).
// Keys: the traffic secrets of the handshake (tls.h captures them), expanded here with
// HKDF-Expand-Label. Key updates both ways: a sealer sends KeyUpdate after `max_records`
// records under one key (RFC 8446 5.5's limit for AES-GCM is 2^24.5), or when the peer
// asks; an opener follows the peer's. Alerts: close_notify is the end of the stream; any
// other ends the connection with its name.
//
// Threads: a RecordSealer is the writer's and a RecordOpener the reader's; the two share
// nothing but the flag by which a peer's request for a key update reaches the sealer.
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

struct gcm_key_data;

namespace pfsnet {

inline constexpr size_t kTlsMaxPlain = 16384;  // a record's most plaintext (2^14)
inline constexpr size_t kTlsHeader = 5;
inline constexpr size_t kTlsTag = 16;
// A record on the wire at most: header, plaintext, its content type byte, the tag.
inline constexpr size_t kTlsMaxRecord = kTlsHeader + kTlsMaxPlain + 1 + kTlsTag;
inline constexpr uint64_t kTlsRecordsPerKey = uint64_t{1} << 24;

using TrafficSecret = std::array<uint8_t, 32>;  // a SHA-256 suite's traffic secret

// HKDF-Expand-Label(secret, label, "", n) of RFC 8446 7.1, n <= 32.
std::vector<uint8_t> hkdf_expand_label(std::span<const uint8_t> secret, const std::string& label,
                                       size_t n);

// One direction's key: AES-128-GCM key, IV and record sequence number, from a secret.
class TrafficKey {
 public:
  explicit TrafficKey(const TrafficSecret& secret);
  ~TrafficKey();
  TrafficKey(const TrafficKey&) = delete;
  TrafficKey& operator=(const TrafficKey&) = delete;
  // The next secret (RFC 8446 7.2): the key and IV from it, sequence number 0.
  void update();
  // The nonce of the next record, and the count of records sealed or opened so far.
  std::array<uint8_t, 12> next_nonce();
  uint64_t seq() const { return seq_; }
  const gcm_key_data& key() const { return *key_; }

 private:
  void derive();
  TrafficSecret secret_;
  std::unique_ptr<gcm_key_data> key_;
  std::array<uint8_t, 12> iv_{};
  uint64_t seq_ = 0;
};

// Set by an opener that read a KeyUpdate asking for ours; taken by the sealer.
using UpdateRequest = std::atomic<bool>;

// Where a sealed record ends in the bytes to send, and how much plaintext is sealed up to
// its end (a KeyUpdate record adds none).
struct RecordEnd {
  size_t out_end = 0;
  size_t plain_end = 0;
};

class RecordSealer {
 public:
  RecordSealer(const TrafficSecret& secret, UpdateRequest& requested,
               uint64_t max_records = kTlsRecordsPerKey);
  // The most bytes seal() appends for `plain` bytes of plaintext.
  static size_t sealed_size(size_t plain);
  // Seals up to `max_plain` bytes of `from` (after its first `skip` bytes) as application
  // data records at out + out_len (room for sealed_size(max_plain)), a KeyUpdate before
  // them when one is due (the peer asked, or this key's records are at the limit); returns
  // the plaintext bytes sealed and appends each record's end to `ends`.
  size_t seal(std::span<const iovec> from, size_t skip, size_t max_plain, uint8_t* out,
              size_t& out_len, std::vector<RecordEnd>& ends);
  uint64_t key_updates() const { return updates_; }

 private:
  void seal_record(uint8_t type, std::span<const iovec> from, size_t skip, size_t n, uint8_t* out);
  TrafficKey key_;
  UpdateRequest& requested_;
  uint64_t max_records_;
  uint64_t updates_ = 0;
};

// What opening the records received did.
struct OpenResult {
  size_t n = 0;          // plaintext bytes into the caller's buffers
  bool closed = false;   // close_notify: the peer's end of stream
  bool bad_mac = false;  // a record failed authentication
  std::string error;     // non-empty: the stream is over (an alert, a malformed record)
  bool alert = false;    // `error` is the peer's alert
};

class RecordOpener {
 public:
  RecordOpener(const TrafficSecret& secret, UpdateRequest& requested);
  // Opens whole records at the front of `in` (the bytes received; `used` says how many it
  // took) into `into`, as far as they fit: a record larger than the room left is opened
  // aside and given out over later calls. Records other than application data are handled
  // here (KeyUpdate, alerts).
  OpenResult open(std::span<const uint8_t> in, size_t& used, std::span<const iovec> into);
  // Plaintext opened aside and not yet given out.
  bool has_plain() const { return plain_off_ < plain_len_; }
  // The size of the whole record at the front of `in`, or 0 while it is not all there.
  static size_t record_size(std::span<const uint8_t> in);
  uint64_t key_updates() const { return updates_; }

 private:
  // Opens one record (ciphertext `body` under `header`) into `dst`, which has room for its
  // inner plaintext; false (and `r` says why) when it fails authentication.
  bool decrypt(const uint8_t* header, std::span<const uint8_t> body,
               const std::array<uint8_t, 12>& nonce, std::span<const iovec> dst, OpenResult& r);
  // A record's content of another type than application data; false when the stream ends.
  bool handle_control(uint8_t type, std::span<const uint8_t> content, OpenResult& r);

  TrafficKey key_;
  UpdateRequest& requested_;
  std::unique_ptr<uint8_t[]> plain_;  // a record opened aside: [plain_off_, plain_len_) to give
  size_t plain_off_ = 0, plain_len_ = 0;
  uint64_t updates_ = 0;
};

}  // namespace pfsnet
