// LastRcvd: which block writes of each client a target executed, kept with the target --
// Lustre's last_rcvd in the small -- so that a block server killed between a write and its
// reply, and restarted, answers the client's resend of that write (same incarnation and
// xid: rpc/reply_cache.h) without running it again. Run again, it could land over a newer
// write of another node that took the token after the first writer's revocation timed out.
// The engine's reply cache does this within one run of the server; this is what survives
// a restart.
//
// Per client NID one slot: the client engine's incarnation and the xids of its last kRing
// writes executed on the target (a client has at most max_rpcs_in_flight, 8 by default,
// on the wire to one server). A write is recorded after the target took it and before its
// reply: a server killed in between finds it at its restart. A request of a new
// incarnation resets the NID's slot (a restarted client resends nothing of its old one).
//
// The file, for a directory target (DIR/#last_rcvd: '#' is in no striped file's name):
// a 16-byte header ("PFSLRCV1", slot size), then slots of kSlotBytes at fixed places (NID,
// incarnation, kRing xids; 8 bytes each, little-endian; an IPv6 client's NID is kept as
// bit 63 | a 63-bit FNV-1a hash of its address and net -- two such clients alike in it
// would share a slot, and reset each other's at each write of a new incarnation, 2^-63
// likely per pair), each slot's xids written one at a
// time in place (pwrite of 8 bytes: the page cache keeps it for a killed process, as it
// keeps the data of a page-cache target). open("") keeps it in memory only. A target in
// memory keeps none (its data does not survive the process either), nor yet one on a
// block device (its layout has no place for it).
//
// Thread safety: every function from any thread (a mutex inside).
#pragma once

#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "base/mutex.h"

namespace pfsnet {

class LastRcvd {
 public:
  static constexpr size_t kRing = 256;
  static constexpr size_t kMaxSlots = 65536;  // clients per target
  static constexpr size_t kSlotBytes = 8 * (2 + kRing);

  // Opens (creating it if missing) the record at `path`; "" keeps it in memory. Errors: a
  // file that is not a record (its header), or not readable.
  static Result<std::unique_ptr<LastRcvd>> open(const std::string& path);
  ~LastRcvd();

  enum class Seen {
    kNew,      // not executed here: run it
    kRan,      // executed here: answer it done, run it not again
    kUnknown,  // older than every xid the slot still holds, which has wrapped: cannot tell
  };
  Seen seen(const Nid& client, uint64_t incarnation, uint64_t xid) const EXCLUDES(mu_);
  // Records that `xid` of (nid, incarnation) was executed. An error: the record could not
  // be written (the slot table full, or the file).
  Status ran(const Nid& client, uint64_t incarnation, uint64_t xid) EXCLUDES(mu_);
  // The 8 bytes a client's slot is kept under.
  static uint64_t slot_key(const Nid& client);
  size_t clients() const EXCLUDES(mu_);

 private:
  struct Slot {
    size_t index = 0;  // its place in the file
    uint64_t incarnation = 0;
    std::array<uint64_t, kRing> xids{};  // 0: empty
    size_t next = 0;                     // where the next xid goes
    bool wrapped = false;                // every place was used
  };
  LastRcvd(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status load() REQUIRES(mu_);
  Status put(size_t offset, const void* data, size_t n) REQUIRES(mu_);

  const int fd_;  // -1: in memory
  const std::string path_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Slot> slots_ GUARDED_BY(mu_);  // by slot_key
  size_t next_index_ GUARDED_BY(mu_) = 0;                     // the next new slot's place
};

}  // namespace pfsnet
