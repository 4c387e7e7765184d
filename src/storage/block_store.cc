#include "storage/block_store.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "storage/device_layout.h"
#include "wire/crc32c.h"

namespace pfsnet {

namespace {

constexpr size_t kDirectAlign = 4096;

Status sys_error(const std::string& what) {
  return Status(Code::kRemoteError, what + ": " + std::strerror(errno));
}

// Blocks in memory, each its own Buffer. A whole-block write keeps the request's memory as
// the block, and its CRC; a whole-block read shares the block and the CRC with the reply. A
// block being sent is never written in place: a partial write to it copies it first (the
// reply keeps the old), and drops the CRC.
class MemStore final : public BlockStore {
 public:
  MemStore(uint32_t block_size, uint64_t capacity) : bs_(block_size), capacity_(capacity) {}

  Status write(const std::string& file, uint64_t block, uint32_t offset,
               std::span<const uint8_t> data) override {
    if (Status s = fits(file, block, offset + data.size()); !s.ok()) return s;
    MutexLock lk(mu_);
    auto& blocks = files_[file];
    auto it = blocks.find(block);
    if (it == blocks.end()) {
      if (Status s = room_locked(); !s.ok()) return s;
      // Unwritten bytes read as 0: zero only what this write leaves.
      auto b = std::make_shared<Buffer>(bs_);
      std::memset(b->data(), 0, offset);
      std::memset(b->data() + offset + data.size(), 0, bs_ - offset - data.size());
      it = blocks.emplace(block, Block{std::move(b), std::nullopt}).first;
      used_ += bs_;
    } else if (it->second.data.use_count() > 1) {
      it->second.data = std::make_shared<Buffer>(Buffer::copy_of(it->second.data->span()));
    }
    std::memcpy(it->second.data->data() + offset, data.data(), data.size());
    it->second.crc.reset();
    return Status::Ok();
  }

  Status write_block(const std::string& file, uint64_t block, Buffer whole,
                     std::optional<uint32_t> crc) override {
    if (whole.size() != bs_) return write(file, block, 0, whole.span());
    if (Status s = fits(file, block, bs_); !s.ok()) return s;
    // Pooled memory (a fabric's registered buffers) goes back to its pool: copied.
    if (whole.pooled()) whole = Buffer::copy_of(whole.span());
    Block b{std::make_shared<Buffer>(std::move(whole)), crc};
    Block old;  // freed after the lock
    MutexLock lk(mu_);
    auto& blocks = files_[file];
    auto it = blocks.find(block);
    if (it == blocks.end()) {
      if (Status s = room_locked(); !s.ok()) return s;
      blocks.emplace(block, std::move(b));
      used_ += bs_;
    } else {
      old = std::exchange(it->second, std::move(b));
    }
    return Status::Ok();
  }

  Status read(const std::string& file, uint64_t block, uint32_t offset,
              std::span<uint8_t> out) override {
    BulkData b = find(file, block).data;
    if (b)
      std::memcpy(out.data(), b->data() + offset, out.size());
    else
      std::memset(out.data(), 0, out.size());
    return Status::Ok();
  }

  SharedBlock read_block(const std::string& file, uint64_t block) override {
    if (SharedBlock b = find(file, block); b.data) return b;
    MutexLock lk(mu_);
    if (!zeros_.data) {
      Buffer z(bs_);
      std::memset(z.data(), 0, bs_);
      zeros_.crc = crc32c(z.span());
      zeros_.data = make_bulk(std::move(z));
    }
    return zeros_;
  }

  bool wants_aligned() const override { return false; }
  bool blocks_thread() const override { return false; }
  std::string describe() const override { return "mem"; }

 private:
  Status fits(const std::string& file, uint64_t block, uint64_t end) const {
    if (block * bs_ + end > capacity_)
      return Status(Code::kRemoteError, "file " + file + " would pass the target's capacity of " +
                                            std::to_string(capacity_) + " bytes");
    return Status::Ok();
  }
  Status room_locked() const REQUIRES(mu_) {
    if (used_ + bs_ > capacity_)
      return Status(Code::kRemoteError,
                    "target mem is full (its capacity of " + std::to_string(capacity_) + " bytes)");
    return Status::Ok();
  }
  SharedBlock find(const std::string& file, uint64_t block) EXCLUDES(mu_) {
    MutexLock lk(mu_);
    auto f = files_.find(file);
    if (f == files_.end()) return {};
    auto it = f->second.find(block);
    if (it == f->second.end()) return {};
    return {it->second.data, it->second.crc};
  }

  struct Block {
    std::shared_ptr<Buffer> data;
    std::optional<uint32_t> crc;  // of data, while it is the writer's whole block
  };

  const uint32_t bs_;
  const uint64_t capacity_;
  Mutex mu_;
  std::map<std::string, std::unordered_map<uint64_t, Block>> files_ GUARDED_BY(mu_);
  uint64_t used_ GUARDED_BY(mu_) = 0;
  SharedBlock zeros_ GUARDED_BY(mu_);  // the block never written
};

// Memory aligned for O_DIRECT, freed with free().
struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t, AlignedFree>;
AlignedBytes aligned_bytes(size_t n) {
  return AlignedBytes(static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, n)));
}

Status pwrite_all(int fd, const uint8_t* p, size_t n, uint64_t pos, const std::string& what) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(fd, p + done, n - done, off_t(pos + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return sys_error(what);
    done += size_t(w);
  }
  return Status::Ok();
}

Status pread_all(int fd, uint8_t* p, size_t n, uint64_t pos, const std::string& what) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, off_t(pos + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r == 0 ? Status(Code::kRemoteError, what + ": short read") : sys_error(what);
    done += size_t(r);
  }
  return Status::Ok();
}

class DirStore final : public BlockStore {
 public:
  DirStore(std::string dir, uint32_t block_size, uint64_t capacity)
      : dir_(std::move(dir)), bs_(block_size), capacity_(capacity) {}
  ~DirStore() override {
    for (auto& [name, f] : files_) {
      if (f.fd >= 0) ::close(f.fd);
      if (f.direct >= 0) ::close(f.direct);
    }
  }

  Status write(const std::string& file, uint64_t block, uint32_t offset,
               std::span<const uint8_t> data) override {
    auto fds = open_file(file);
    if (!fds.ok()) return fds.status();
    uint64_t pos = block * bs_ + offset;
    if (pos + data.size() > capacity_)
      return Status(Code::kRemoteError, "file " + file + " would pass the target's capacity of " +
                                            std::to_string(capacity_) + " bytes");
    return pwrite_all(pick(*fds, data.data(), pos, data.size()), data.data(), data.size(), pos,
                      "write " + dir_ + "/" + file);
  }

  Status read(const std::string& file, uint64_t block, uint32_t offset,
              std::span<uint8_t> out) override {
    auto fds = open_file(file);
    if (!fds.ok()) return fds.status();
    uint64_t pos = block * bs_ + offset;
    int fd = pick(*fds, out.data(), pos, out.size());
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd, out.data() + done, out.size() - done, off_t(pos + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return sys_error("read " + dir_ + "/" + file);
      if (n == 0) {  // past the end: never written
        std::memset(out.data() + done, 0, out.size() - done);
        break;
      }
      done += size_t(n);
    }
    return Status::Ok();
  }

  std::string describe() const override {
    MutexLock lk(mu_);
    return dir_ + (direct_ok_ ? " (O_DIRECT)" : " (page cache)");
  }

  Status probe() {
    if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) return sys_error("mkdir " + dir_);
    struct stat st {};
    if (::stat(dir_.c_str(), &st) != 0) return sys_error("stat " + dir_);
    if (!S_ISDIR(st.st_mode))
      return Status(Code::kInvalidArgument, "target " + dir_ + " is not a directory");
    // Whether the file system takes O_DIRECT (tmpfs does not).
    std::string probe = dir_ + "/.direct-probe";
    int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
    MutexLock lk(mu_);
    direct_ok_ = fd >= 0;
    if (fd >= 0) ::close(fd);
    ::unlink(probe.c_str());
    return Status::Ok();
  }

 private:
  struct Fds {
    int fd = -1, direct = -1;
  };

  Result<Fds> open_file(const std::string& file) {
    MutexLock lk(mu_);
    auto it = files_.find(file);
    if (it != files_.end()) return it->second;
    std::string path = dir_ + "/" + file;
    Fds f;
    f.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f.fd < 0) return sys_error("open " + path);
    if (direct_ok_) f.direct = ::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    files_.emplace(file, f);
    return f;
  }

  // O_DIRECT for an aligned transfer when the file has it.
  static int pick(const Fds& f, const void* mem, uint64_t pos, size_t len) {
    bool aligned = reinterpret_cast<uintptr_t>(mem) % kDirectAlign == 0 &&
                   pos % kDirectAlign == 0 && len % kDirectAlign == 0;
    return aligned && f.direct >= 0 ? f.direct : f.fd;
  }

  const std::string dir_;
  const uint32_t bs_;
  const uint64_t capacity_;
  mutable Mutex mu_;
  std::map<std::string, Fds> files_ GUARDED_BY(mu_);
  bool direct_ok_ GUARDED_BY(mu_) = false;
};

// A raw block device (device_layout.h): the blocks of every striped file in slots, found
// through the slot table, which is read once at open and kept in memory. The device is
// opened O_EXCL, so one that is mounted or used by another such opener is refused. A new
// block's slot is written whole (zeros around the data) before its record; other writers
// and readers of that block wait for it (at most kInitWait).
class DevStore final : public BlockStore {
 public:
  DevStore(std::string dev, uint32_t block_size, uint64_t capacity)
      : dev_(std::move(dev)), bs_(block_size), capacity_(capacity) {}
  ~DevStore() override {
    if (fd_ >= 0) ::close(fd_);
    if (direct_ >= 0) ::close(direct_);
  }

  Status open() {
    fd_ = ::open(dev_.c_str(), O_RDWR | O_EXCL | O_CLOEXEC);
    if (fd_ < 0)
      return errno == EBUSY
                 ? Status(Code::kInvalidArgument, "target " + dev_ +
                                                      " is in use (mounted, or opened by another "
                                                      "program or target)")
                 : sys_error("open " + dev_);
    direct_ = ::open(dev_.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);  // -1: page cache only
    uint64_t bytes = 0;
    if (::ioctl(fd_, BLKGETSIZE64, &bytes) != 0) return sys_error("size of " + dev_);
    std::vector<uint8_t> first(kDeviceLabelBytes);
    Status s = pread_all(fd_, first.data(), first.size(), 0, "read the label of " + dev_);
    if (!s.ok()) return s;
    LabelRead label = decode_device_label(first, bytes);
    if (label.state == LabelState::kForeign)
      return Status(Code::kInvalidArgument,
                    "target " + dev_ + ": " + label.why +
                        "; pfsnet labels only a device whose first 4 KiB are zeros (clear them "
                        "with dd if=/dev/zero of=" +
                        dev_ + " bs=4096 count=1 if its data may go)");
    if (label.state == LabelState::kBlank) {
      auto l = DeviceLayout::fit(bytes, bs_);
      if (!l.ok())
        return Status(Code::kInvalidArgument, "target " + dev_ + ": " + l.status().message());
      s = format(*l);
      if (!s.ok()) return s;
      layout_ = *l;
    } else {
      if (label.layout.block_size != bs_)
        return Status(Code::kInvalidArgument, "target " + dev_ + " was labelled for blocks of " +
                                                  std::to_string(label.layout.block_size) +
                                                  " bytes, storage.block_size is " +
                                                  std::to_string(bs_));
      layout_ = label.layout;
    }
    return load();
  }

  Status write(const std::string& file, uint64_t block, uint32_t offset,
               std::span<const uint8_t> data) override {
    if (block * bs_ + offset + data.size() > capacity_)
      return Status(Code::kRemoteError, "file " + file + " would pass the target's capacity of " +
                                            std::to_string(capacity_) + " bytes");
    uint64_t slot = 0;
    bool fresh = false;
    {
      MutexLock lk(mu_);
      auto& blocks = files_[file];
      auto it = blocks.find(block);
      if (it == blocks.end()) {
        if (free_.empty())
          return Status(Code::kRemoteError, "target " + dev_ + " is full (" +
                                                std::to_string(layout_.slots) + " blocks)");
        slot = free_.back();
        free_.pop_back();
        blocks.emplace(block, slot);
        initializing_.insert(slot);
        fresh = true;
      } else {
        slot = it->second;
        Status w = wait_initialized(lk, file, block, slot);
        if (!w.ok()) return w;
      }
    }
    if (fresh) return initialize(file, block, slot, offset, data);
    return pwrite_all(pick(data.data(), layout_.block_offset(slot) + offset, data.size()),
                      data.data(), data.size(), layout_.block_offset(slot) + offset,
                      "write " + dev_);
  }

  Status read(const std::string& file, uint64_t block, uint32_t offset,
              std::span<uint8_t> out) override {
    uint64_t slot = 0;
    {
      MutexLock lk(mu_);
      auto f = files_.find(file);
      bool found = f != files_.end() && f->second.count(block);
      if (!found) {
        std::memset(out.data(), 0, out.size());  // never written
        return Status::Ok();
      }
      slot = f->second.at(block);
      Status w = wait_initialized(lk, file, block, slot);
      if (!w.ok()) return w;
    }
    uint64_t pos = layout_.block_offset(slot) + offset;
    return pread_all(pick(out.data(), pos, out.size()), out.data(), out.size(), pos,
                     "read " + dev_);
  }

  std::string describe() const override {
    MutexLock lk(mu_);
    return dev_ + " (block device" + (direct_ >= 0 ? ", O_DIRECT" : ", page cache") + ", " +
           std::to_string(layout_.slots - free_.size()) + " of " + std::to_string(layout_.slots) +
           " blocks used)";
  }

 private:
  static constexpr auto kInitWait = std::chrono::seconds(30);

  // A blank device: the slot table zeroed (BLKZEROOUT where the device has it), then the
  // label, then both made durable.
  Status format(const DeviceLayout& l) {
    uint64_t range[2] = {kDeviceLabelBytes, l.data_offset - kDeviceLabelBytes};
    if (::ioctl(fd_, BLKZEROOUT, range) != 0) {
      std::vector<uint8_t> zeros(1 << 20, 0);
      for (uint64_t pos = kDeviceLabelBytes; pos < l.data_offset; pos += zeros.size()) {
        size_t n = size_t(std::min<uint64_t>(zeros.size(), l.data_offset - pos));
        Status s = pwrite_all(fd_, zeros.data(), n, pos, "clear the slot table of " + dev_);
        if (!s.ok()) return s;
      }
    }
    auto label = encode_device_label(l);
    Status s = pwrite_all(fd_, label.data(), label.size(), 0, "label " + dev_);
    if (!s.ok()) return s;
    if (::fsync(fd_) != 0) return sys_error("fsync " + dev_);
    return Status::Ok();
  }

  // The slot table into memory: every used slot's (file, block), the rest free.
  Status load() {
    MutexLock lk(mu_);
    std::vector<uint8_t> chunk(1 << 20);
    const uint64_t per = chunk.size() / kDeviceRecordBytes;
    std::vector<uint64_t> free;
    for (uint64_t first = 0; first < layout_.slots; first += per) {
      uint64_t n = std::min(per, layout_.slots - first);
      Status s = pread_all(fd_, chunk.data(), n * kDeviceRecordBytes, layout_.record_offset(first),
                           "read the slot table of " + dev_);
      if (!s.ok()) return s;
      for (uint64_t i = 0; i < n; ++i) {
        auto rec = decode_slot_record(
            std::span(chunk.data() + i * kDeviceRecordBytes, kDeviceRecordBytes));
        if (rec && files_[rec->file].emplace(rec->block, first + i).second) continue;
        free.push_back(first + i);  // free, torn, or a second record of one block
      }
    }
    free_.assign(free.rbegin(), free.rend());  // the lowest slot is taken first
    return Status::Ok();
  }

  // A new block: its slot written whole (a partial first write with zeros around it, in an
  // aligned copy), then its record; on failure the slot is free again.
  Status initialize(const std::string& file, uint64_t block, uint64_t slot, uint32_t offset,
                    std::span<const uint8_t> data) {
    Status s;
    const uint64_t pos = layout_.block_offset(slot);
    AlignedBytes whole;
    if (offset == 0 && data.size() == bs_) {  // the usual case: a whole block, as it came
      s = pwrite_all(pick(data.data(), pos, bs_), data.data(), bs_, pos, "write " + dev_);
    } else if (!(whole = aligned_bytes(bs_))) {
      s = Status(Code::kRemoteError, "target " + dev_ + ": out of memory");
    } else {
      std::memset(whole.get(), 0, bs_);
      std::memcpy(whole.get() + offset, data.data(), data.size());
      s = pwrite_all(direct_ >= 0 ? direct_ : fd_, whole.get(), bs_, pos, "write " + dev_);
    }
    if (s.ok()) {
      auto rec = encode_slot_record({file, block});
      s = pwrite_all(fd_, rec.data(), rec.size(), layout_.record_offset(slot),
                     "write the slot table of " + dev_);
    }
    MutexLock lk(mu_);
    initializing_.erase(slot);
    if (!s.ok()) {
      files_[file].erase(block);
      free_.push_back(slot);
    }
    cv_.notify_all();
    return s;
  }

  // Waits until the slot of `file`'s `block` has had its first write; OK when it is still
  // that block's slot then (a failed first write frees it again).
  Status wait_initialized(MutexLock& lk, const std::string& file, uint64_t block, uint64_t slot)
      REQUIRES(mu_) {
    if (!cv_.wait_for(lk, kInitWait, [&]() REQUIRES(mu_) { return !initializing_.count(slot); }))
      return Status(Code::kRemoteError, "target " + dev_ + ": a block's first write did not end");
    auto f = files_.find(file);
    if (f == files_.end() || !f->second.count(block) || f->second.at(block) != slot)
      return Status(Code::kRemoteError, "target " + dev_ + ": the block's first write failed");
    return Status::Ok();
  }

  int pick(const void* mem, uint64_t pos, size_t len) const {
    bool aligned = reinterpret_cast<uintptr_t>(mem) % kDirectAlign == 0 &&
                   pos % kDirectAlign == 0 && len % kDirectAlign == 0;
    return aligned && direct_ >= 0 ? direct_ : fd_;
  }

  const std::string dev_;
  const uint32_t bs_;
  const uint64_t capacity_;
  int fd_ = -1, direct_ = -1;  // set by open(), then read only
  DeviceLayout layout_;        // likewise
  mutable Mutex mu_;
  CondVar cv_;
  std::map<std::string, std::unordered_map<uint64_t, uint64_t>> files_ GUARDED_BY(mu_);
  std::vector<uint64_t> free_ GUARDED_BY(mu_);  // slots, highest first
  std::set<uint64_t> initializing_ GUARDED_BY(mu_);
};

}  // namespace

Status check_file_name(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64 && name != "." && name != "..";
  for (char c : name)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-');
  if (!ok)
    return Status(Code::kInvalidArgument,
                  "file name '" + name.substr(0, 80) +
                      "': 1..64 of letters, digits, '.', '_' and '-', not '.' or '..'");
  return Status::Ok();
}

Result<std::unique_ptr<BlockStore>> open_block_store(const std::string& spec, uint32_t block_size,
                                                     uint64_t capacity) {
  if (spec == "mem") return std::unique_ptr<BlockStore>(new MemStore(block_size, capacity));
  if (spec.empty() || spec[0] != '/')
    return Status(Code::kInvalidArgument,
                  "target '" + spec + "': \"mem\", an absolute directory path or a block device");
  struct stat st {};
  if (::stat(spec.c_str(), &st) == 0 && S_ISBLK(st.st_mode)) {
    auto d = std::make_unique<DevStore>(spec, block_size, capacity);
    Status s = d->open();
    if (!s.ok()) return s;
    return std::unique_ptr<BlockStore>(std::move(d));
  }
  auto d = std::make_unique<DirStore>(spec, block_size, capacity);
  Status s = d->probe();
  if (!s.ok()) return s;
  return std::unique_ptr<BlockStore>(std::move(d));
}

}  // namespace pfsnet
