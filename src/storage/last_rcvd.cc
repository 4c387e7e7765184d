#include "storage/last_rcvd.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace pfsnet {

namespace {

constexpr char kLastRcvdMagic[8] = {'P', 'F', 'S', 'L', 'R', 'C', 'V', '1'};
constexpr size_t kLastRcvdHeader = 16;

void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}
size_t slot_offset(size_t index) { return kLastRcvdHeader + index * LastRcvd::kSlotBytes; }

}  // namespace

Result<std::unique_ptr<LastRcvd>> LastRcvd::open(const std::string& path) {
  if (path.empty()) return std::unique_ptr<LastRcvd>(new LastRcvd(-1, ""));
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status(Code::kRemoteError, "last_rcvd " + path + ": " + std::strerror(errno));
  std::unique_ptr<LastRcvd> r(new LastRcvd(fd, path));
  MutexLock lk(r->mu_);
  if (Status s = r->load(); !s.ok()) return s;
  return r;
}

LastRcvd::~LastRcvd() {
  if (fd_ >= 0) ::close(fd_);
}

Status LastRcvd::put(size_t offset, const void* data, size_t n) {
  if (fd_ < 0) return Status::Ok();
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t done = 0; done < n;) {
    ssize_t w = ::pwrite(fd_, p + done, n - done, off_t(offset + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return Status(Code::kRemoteError, "last_rcvd " + path_ + ": " + std::strerror(errno));
    done += size_t(w);
  }
  return Status::Ok();
}

Status LastRcvd::load() {
  struct stat st {};
  if (::fstat(fd_, &st) != 0)
    return Status(Code::kRemoteError, "last_rcvd " + path_ + ": " + std::strerror(errno));
  const size_t size = size_t(st.st_size);
  if (size == 0) {
    uint8_t h[kLastRcvdHeader] = {};
    std::memcpy(h, kLastRcvdMagic, 8);
    put_u64(h + 8, kSlotBytes);
    return put(0, h, kLastRcvdHeader);
  }
  auto bad = [&](const std::string& why) {
    return Status(Code::kInvalidArgument, "last_rcvd " + path_ + ": " + why);
  };
  std::vector<uint8_t> all(size);
  for (size_t done = 0; done < size;) {
    ssize_t n = ::pread(fd_, all.data() + done, size - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Status(Code::kRemoteError, "last_rcvd " + path_ + ": " + std::strerror(errno));
    done += size_t(n);
  }
  if (size < kLastRcvdHeader || std::memcmp(all.data(), kLastRcvdMagic, 8) != 0)
    return bad("not a pfsnet last_rcvd record (its header)");
  if (get_u64(all.data() + 8) != kSlotBytes)
    return bad("slots of " + std::to_string(get_u64(all.data() + 8)) + " bytes, not " +
               std::to_string(kSlotBytes));
  // A slot cut short by a kill while it was first written is not there.
  for (size_t i = 0; slot_offset(i + 1) <= size && i < kMaxSlots; ++i) {
    const uint8_t* p = all.data() + slot_offset(i);
    const uint64_t nid = get_u64(p);
    if (nid == 0) continue;
    Slot s;
    s.index = i;
    s.incarnation = get_u64(p + 8);
    size_t used = 0, newest = 0;
    for (size_t k = 0; k < kRing; ++k) {
      s.xids[k] = get_u64(p + 16 + 8 * k);
      if (s.xids[k] == 0) continue;
      ++used;
      if (s.xids[k] > s.xids[newest]) newest = k;
    }
    // Places fill in order from 0 until the ring wraps; then the next goes after the newest.
    s.wrapped = used == kRing;
    s.next = s.wrapped ? (newest + 1) % kRing : used;
    slots_[nid] = s;
    next_index_ = i + 1;
  }
  return Status::Ok();
}

uint64_t LastRcvd::slot_key(const Nid& client) {
  if (!client.is_large()) return client.small_form();
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: the same in every build, as the file needs
  auto mix = [&h](uint8_t b) { h = (h ^ b) * 0x100000001b3ull; };
  mix(static_cast<uint8_t>(client.type));
  mix(static_cast<uint8_t>(client.net_num));
  mix(static_cast<uint8_t>(client.net_num >> 8));
  for (size_t i = 0; i < client.addr_len; ++i) mix(client.addr[i]);
  return h | 1ull << 63;
}

LastRcvd::Seen LastRcvd::seen(const Nid& client, uint64_t incarnation, uint64_t xid) const {
  const uint64_t nid = slot_key(client);
  MutexLock lk(mu_);
  auto it = slots_.find(nid);
  if (it == slots_.end() || it->second.incarnation != incarnation || xid == 0) return Seen::kNew;
  const Slot& s = it->second;
  if (std::find(s.xids.begin(), s.xids.end(), xid) != s.xids.end()) return Seen::kRan;
  if (s.wrapped && xid < *std::min_element(s.xids.begin(), s.xids.end())) return Seen::kUnknown;
  return Seen::kNew;
}

Status LastRcvd::ran(const Nid& client, uint64_t incarnation, uint64_t xid) {
  const uint64_t nid = slot_key(client);
  MutexLock lk(mu_);
  auto it = slots_.find(nid);
  if (it == slots_.end()) {
    if (slots_.size() >= kMaxSlots)
      return Status(Code::kRemoteError,
                    "last_rcvd " + path_ + ": " + std::to_string(kMaxSlots) + " clients already");
    Slot s;
    s.index = next_index_++;  // slots are never freed
    it = slots_.emplace(nid, s).first;
  }
  Slot& s = it->second;
  if (s.incarnation != incarnation) {
    // A new incarnation of the client: nothing of the old one comes again.
    s.incarnation = incarnation;
    s.xids.fill(0);
    s.next = 0;
    s.wrapped = false;
    std::vector<uint8_t> slot(kSlotBytes, 0);
    put_u64(slot.data(), nid);
    put_u64(slot.data() + 8, incarnation);
    if (Status st = put(slot_offset(s.index), slot.data(), slot.size()); !st.ok()) return st;
  }
  s.xids[s.next] = xid;
  uint8_t b[8];
  put_u64(b, xid);
  Status st = put(slot_offset(s.index) + 16 + 8 * s.next, b, 8);
  s.next = (s.next + 1) % kRing;
  s.wrapped = s.wrapped || s.next == 0;
  return st;
}

size_t LastRcvd::clients() const {
  MutexLock lk(mu_);
  return slots_.size();
}

}  // namespace pfsnet
