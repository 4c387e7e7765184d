#include "storage/block_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"

namespace pfsnet {

namespace {

constexpr size_t kDirectAlign = 4096;

Status sys_error(const std::string& what) {
  return Status(Code::kRemoteError, what + ": " + std::strerror(errno));
}

// Memory for a MemStore's blocks, handed out block by block and never given back (a
// target keeps its files): 2 MiB-aligned chunks the kernel may back with huge pages, so
// writing a new GiB costs 512 page faults, not 262,144 (first writes into fresh 4 KiB
// pages ran at a third of the rewrite rate).
class BlockArena {
 public:
  explicit BlockArena(size_t block_size)
      : bs_(block_size), chunk_((std::max(block_size, kHuge) + kHuge - 1) / kHuge * kHuge) {}
  ~BlockArena() {
    for (void* c : chunks_) munmap(c, chunk_);
  }
  BlockArena(const BlockArena&) = delete;
  BlockArena& operator=(const BlockArena&) = delete;

  // A block's memory (uninitialised), or null when the system has none.
  uint8_t* take() {
    if (chunks_.empty() || next_ + bs_ > chunk_) {
      void* c =
          mmap(nullptr, chunk_ + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (c == MAP_FAILED) return nullptr;
      // Trim to a 2 MiB boundary so the whole chunk can be huge pages.
      auto base = reinterpret_cast<uintptr_t>(c);
      uintptr_t aligned = (base + kHuge - 1) / kHuge * kHuge;
      if (aligned > base) munmap(c, aligned - base);
      munmap(reinterpret_cast<void*>(aligned + chunk_), base + kHuge - aligned);
      madvise(reinterpret_cast<void*>(aligned), chunk_, MADV_HUGEPAGE);  // a hint
      chunks_.push_back(reinterpret_cast<void*>(aligned));
      next_ = 0;
    }
    uint8_t* b = static_cast<uint8_t*>(chunks_.back()) + next_;
    next_ += bs_;
    return b;
  }

 private:
  static constexpr size_t kHuge = 2u << 20;
  const size_t bs_, chunk_;
  std::vector<void*> chunks_;
  size_t next_ = 0;
};

class MemStore final : public BlockStore {
 public:
  MemStore(uint32_t block_size, uint64_t capacity)
      : bs_(block_size), capacity_(capacity), arena_(block_size) {}

  Status write(const std::string& file, uint64_t block, uint32_t offset,
               std::span<const uint8_t> data) override {
    if (block * bs_ + offset + data.size() > capacity_)
      return Status(Code::kRemoteError, "file " + file + " would pass the target's capacity of " +
                                            std::to_string(capacity_) + " bytes");
    MutexLock lk(mu_);
    auto& blocks = files_[file];
    auto it = blocks.find(block);
    if (it == blocks.end()) {
      if (used_ + bs_ > capacity_)
        return Status(Code::kRemoteError, "target mem is full (its capacity of " +
                                              std::to_string(capacity_) + " bytes)");
      // Unwritten bytes read as 0: zero only what this write leaves (a whole-block write,
      // the usual one, zeroes nothing -- a memset of every new block cost a sixth of a
      // server's CPU at 400 MiB/s).
      uint8_t* b = arena_.take();
      if (!b) return Status(Code::kRemoteError, "target mem: out of memory");
      std::memset(b, 0, offset);
      std::memset(b + offset + data.size(), 0, bs_ - offset - data.size());
      it = blocks.emplace(block, b).first;
      used_ += bs_;
    }
    std::memcpy(it->second + offset, data.data(), data.size());
    return Status::Ok();
  }

  Status read(const std::string& file, uint64_t block, uint32_t offset,
              std::span<uint8_t> out) override {
    MutexLock lk(mu_);
    auto f = files_.find(file);
    const uint8_t* src = nullptr;
    if (f != files_.end()) {
      auto it = f->second.find(block);
      if (it != f->second.end()) src = it->second + offset;
    }
    if (src)
      std::memcpy(out.data(), src, out.size());
    else
      std::memset(out.data(), 0, out.size());
    return Status::Ok();
  }

  std::string describe() const override { return "mem"; }

 private:
  const uint32_t bs_;
  const uint64_t capacity_;
  Mutex mu_;
  BlockArena arena_ GUARDED_BY(mu_);
  std::map<std::string, std::unordered_map<uint64_t, uint8_t*>> files_ GUARDED_BY(mu_);
  uint64_t used_ GUARDED_BY(mu_) = 0;
};

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
    int fd = pick(*fds, data.data(), pos, data.size());
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, off_t(pos + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return sys_error("write " + dir_ + "/" + file);
      done += size_t(n);
    }
    return Status::Ok();
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
                  "target '" + spec + "': \"mem\" or an absolute directory path");
  auto d = std::make_unique<DirStore>(spec, block_size, capacity);
  Status s = d->probe();
  if (!s.ok()) return s;
  return std::unique_ptr<BlockStore>(std::move(d));
}

}  // namespace pfsnet
