// Zero-copy sends over TCP (Linux MSG_ZEROCOPY; socklnd's zc_min_payload): a frame's bulk
// of lnet.zc_min_payload bytes or more is sent from where it is, the kernel pinning its
// pages instead of copying them into the socket, and the bulk is kept (its BulkData held)
// until the kernel says it is done with them -- a notification on the socket's error
// queue, for a range of the socket's zero-copy send calls -- not merely until the write
// returned. Headers and payloads are small and copied as before (the connection sends
// them apart: a zero-copy send pins every byte it is given, and headers are reused).
//
// Where the kernel delivers to a socket on the same host (loopback, veth between
// namespaces) it copies every such send after all, and says so
// (SO_EE_CODE_ZEROCOPY_COPIED): a connection whose first kHiddenCopyProof completed sends
// were all copied stops sending zero-copy (it would pay for the pinning and the
// notifications and save nothing).
//
// A closed connection's socket may still hold pinned bulk (unacknowledged, or queued in
// the device): ZcGraveyard keeps the socket open through a descriptor of its own and the
// bulk held until the kernel's notifications say all of it is done (or, at the
// transport's stop, resets the connection -- the kernel then drops what it still had to
// send -- and lets go).
//
// ZcLedger is the pure bookkeeping (tested alone); ZeroCopySends adds the system calls.
// Threads: ZeroCopySends and ZcGraveyard are thread-safe (the connection's writer sends,
// its reader and the graveyard reap); ZcLedger is not.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/status.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "base/mutex.h"
#include "transport/tcp_stream.h"
#include "transport/transport.h"

namespace pfsnet::tcp_detail {

// The socket's zero-copy send calls, numbered as the kernel numbers them (from 0, one per
// successful call, 32 bits wrapping), the bulk each call pinned, and which calls the
// kernel has completed. A call's bulk is let go once it and every call before it completed
// (notifications may come out of order; the bulk of several calls is often the same).
class ZcLedger {
 public:
  ZcLedger() = default;
  // Tests: as if `made` calls had been made and completed (the kernel's numbers then go
  // on from the low 32 bits of `made`).
  explicit ZcLedger(uint64_t made) : next_(made), first_open_(made) {}
  // The next call was made; `hold` stays until it completes.
  void issued(BulkData hold);
  // The kernel completed calls lo..hi (inclusive, its 32-bit numbers; `copied`: it copied
  // them after all). Returns the bulk no call still pins, for the caller to free (outside
  // any lock). A range that names calls not made is ignored.
  std::vector<BulkData> completed(uint32_t lo, uint32_t hi, bool copied);
  // Everything still held, for a connection reset or abandoned.
  std::vector<BulkData> take_all();

  uint64_t outstanding() const { return next_ - first_open_; }
  uint64_t issued_total() const { return next_; }
  uint64_t completed_total() const { return completed_; }
  uint64_t copied_total() const { return copied_; }

 private:
  uint64_t next_ = 0;                               // calls made
  uint64_t first_open_ = 0;                         // every call before it completed
  std::deque<bool> done_;                           // calls first_open_..next_-1: completed?
  std::deque<std::pair<uint64_t, BulkData>> held_;  // by call, in order
  uint64_t completed_ = 0, copied_ = 0;
};

class ZeroCopySends {
 public:
  // Completed sends, all copied, that turn a connection's zero-copy sends off.
  static constexpr uint64_t kHiddenCopyProof = 8;

  // `keep_when_copied`: never turn off (tests of the path over loopback).
  ZeroCopySends(size_t min_payload, bool keep_when_copied)
      : min_(min_payload), keep_when_copied_(keep_when_copied) {}

  // Whether `len` bytes of bulk go zero-copy (on, and long enough).
  bool wants(size_t len) const { return len >= min_ && on_.load(std::memory_order_relaxed); }
  bool on() const { return on_.load(std::memory_order_relaxed); }
  // One non-blocking zero-copy send of `v` (bulk of `hold`) on `fd`; as
  // PlainStream::write. Holds `hold` when the kernel took any of it.
  StreamIo send(int fd, const iovec& v, const BulkData& hold) EXCLUDES(mu_);
  // Reads the completions on `fd`'s error queue and lets go of the bulk they free.
  // Returns whether it read any.
  bool reap(int fd) EXCLUDES(mu_);
  // Sends not yet completed (lock-free: asked on every read of the connection).
  uint64_t outstanding() const { return outstanding_.load(std::memory_order_acquire); }
  std::vector<BulkData> take_all() EXCLUDES(mu_);
  ZeroCopyStats stats() const EXCLUDES(mu_);

 private:
  const size_t min_;
  const bool keep_when_copied_;
  std::atomic<bool> on_{true};
  std::atomic<uint64_t> outstanding_{0};  // ledger_.outstanding(), set under mu_
  mutable Mutex mu_;
  ZcLedger ledger_ GUARDED_BY(mu_);
  uint64_t fallback_copies_ GUARDED_BY(mu_) = 0;
  bool turned_off_ GUARDED_BY(mu_) = false;
};

// Sockets of closed connections whose zero-copy sends the kernel has not completed: a
// TCP transport's, swept by its first I/O thread while it keeps any.
class ZcGraveyard {
 public:
  ~ZcGraveyard() { finish(); }
  // A connection closed: when `z` has sends the kernel has not completed, keeps its socket
  // open (a descriptor of its own, dup(fd)) and their bulk held until it completes them;
  // else only counts its figures. After finish(): reaped once, then let go as finish()
  // lets go.
  void retire(int fd, std::shared_ptr<ZeroCopySends> z) EXCLUDES(mu_);
  // Reaps every socket kept; closes those with nothing outstanding. Returns how many are
  // still kept. Any thread (the transport's timer).
  size_t sweep() EXCLUDES(mu_);
  // The transport stops: a last sweep, then each socket still kept is reset (SO_LINGER 0:
  // the kernel drops what it had yet to send) and closed, and its bulk let go.
  void finish() EXCLUDES(mu_);
  size_t kept() const EXCLUDES(mu_);
  // Sends and completions of the connections kept here and let go, for the transport's
  // totals.
  ZeroCopyStats stats() const EXCLUDES(mu_);

 private:
  struct Kept {
    int fd;
    std::shared_ptr<ZeroCopySends> z;
  };
  static void reset_and_close(int fd);
  mutable Mutex mu_;
  std::vector<Kept> kept_ GUARDED_BY(mu_);
  bool finished_ GUARDED_BY(mu_) = false;
  ZeroCopyStats gone_ GUARDED_BY(mu_);  // of the connections let go
};

}  // namespace pfsnet::tcp_detail
