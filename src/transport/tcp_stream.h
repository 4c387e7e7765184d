// The byte stream beneath TCP framing: the socket itself (PlainStream), or TLS over it
// (TlsStream, tls.h). A stream only moves bytes, never blocking; framing, batching and the
// waits for the socket are the connection's (TcpConnection), written once for both.
// Threads: one reader and one writer at a time, as the connection's read and write paths
// are (TLS serialises the two inside its session).
#pragma once

#include <pfsnet/status.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "transport/tls.h"
#include "transport/tls_records.h"

namespace pfsnet::tcp_detail {

// What one call did: moved `n` bytes; or, with `n` zero and `failed` ok, wants the socket
// readable (read) or writable (write) first; or the connection is over (`failed`: "closed
// by peer", or the reason with its health kind). Built by field name (StreamIo{.n = 5,
// .drained = true}): its flags are bools, and a positional one lands in the wrong field.
struct StreamIo {
  size_t n = 0;
  Status failed;
  bool by_peer = false;  // `failed` is the peer's orderly close
  // A read that took less than it had room for, from the socket itself: the socket had no
  // more, so the next read would only find it empty -- wait for it first. (asio's own reads
  // do so: one system call per message, not a second that fails. TLS never says so: its
  // session may hold decrypted bytes the socket no longer shows.)
  bool drained = false;
  bool tls_refused = false;  // `failed` is TLS's own (an alert, a bad record), not the socket's
};

// Drops the first `n` bytes of `iov` (a write took them): whole buffers go, a partly taken
// one is advanced in place.
inline void skip_written(std::vector<iovec>& iov, size_t n) {
  size_t i = 0;
  while (i < iov.size() && n >= iov[i].iov_len) n -= iov[i++].iov_len;
  if (i < iov.size() && n) {
    iov[i].iov_base = static_cast<uint8_t*>(iov[i].iov_base) + n;
    iov[i].iov_len -= n;
  }
  iov.erase(iov.begin(), iov.begin() + static_cast<long>(i));
}

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Into the buffers, in order; at least one byte of room.
  virtual StreamIo read(std::span<const iovec> into) = 0;
  // From the buffers, in order, as far as the socket takes them. After a short write the
  // next call carries the rest of the same bytes (TLS must be given them again).
  virtual StreamIo write(std::span<const iovec> from) = 0;
};

// recvmsg/sendmsg on the socket, MSG_DONTWAIT.
class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(int fd) : fd_(fd) {}
  StreamIo read(std::span<const iovec> into) override;
  StreamIo write(std::span<const iovec> from) override { return write(from, 0); }
  // With sendmsg flags of the caller's besides (MSG_MORE: more follows at once).
  StreamIo write(std::span<const iovec> from, int flags);

 private:
  int fd_;
};

// Through the connection's TLS session. A write gathers its buffers into one (records are
// cut from it: a record per small frame would cost a record's overhead each) and keeps
// what the socket did not take until the next call.
class TlsStream final : public ByteStream {
 public:
  explicit TlsStream(TlsSession& tls) : tls_(tls) {}
  StreamIo read(std::span<const iovec> into) override;
  StreamIo write(std::span<const iovec> from) override;

 private:
  TlsSession& tls_;
  std::vector<uint8_t> pending_;  // the write's bytes, from pending_off_ not yet taken
  size_t pending_off_ = 0;
};

// TLS records sealed and opened here (tls_records.h) once OpenSSL's handshake is over: many
// records per sendmsg and per recv, sealed from the caller's buffers and opened into them.
// A write seals a batch of the buffers and reports the plaintext of the records the socket
// has taken whole; the rest of the batch stays sealed for the next call, which carries the
// same bytes again (ByteStream::write's rule).
class TlsRecordStream final : public ByteStream {
 public:
  TlsRecordStream(int fd, const TrafficSecret& read, const TrafficSecret& write,
                  uint64_t max_records = kTlsRecordsPerKey);
  StreamIo read(std::span<const iovec> into) override;
  StreamIo write(std::span<const iovec> from) override;
  uint64_t key_updates_sent() const { return sealer_.key_updates(); }
  uint64_t key_updates_received() const { return opener_.key_updates(); }

  static constexpr size_t kBatchPlain = 256 * 1024;  // sealed per sendmsg at most
  static constexpr size_t kInBuffer = 256 * 1024;    // received per recv at most

 private:
  int fd_;
  UpdateRequest update_requested_{false};
  // Writer's.
  RecordSealer sealer_;
  std::unique_ptr<uint8_t[]> out_;
  size_t out_len_ = 0, out_off_ = 0;  // sealed bytes; sent up to out_off_
  std::vector<RecordEnd> ends_;       // the batch's records
  size_t ends_done_ = 0;              // records sent whole (their plaintext reported)
  size_t reported_ = 0;               // plaintext of the batch reported
  // Reader's.
  RecordOpener opener_;
  std::unique_ptr<uint8_t[]> in_;
  size_t in_start_ = 0, in_end_ = 0;  // received, not yet opened
  StreamIo ended_;                    // set once the stream is over: every later read's
  bool over_ = false;
};

}  // namespace pfsnet::tcp_detail
