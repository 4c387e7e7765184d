// pfsnet_soak serve: a libpfsnet Node whose SOAK_WRITE runs once and reports any second
// run of a request -- in this run or an earlier run of the same server, before a kill -- as
// a DUPLICATE line, and whose SOAK_READ answers a seeded pattern.
#include <fcntl.h>
#include <pfsnet/node.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/log.h"
#include "soak.h"

namespace pfsnet::testing {
namespace {

// Which request ids ran, in a window of the newest 2^22 (the client numbers its requests
// in order; a resend comes within seconds, millions of ids later it cannot). Kept in a
// file shared by every run of this server (mapped MAP_SHARED: what a killed run wrote is
// in the page cache for the next), so a write run again after a restart is a DUPLICATE too.
class RanOnce {
 public:
  explicit RanOnce(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(kBytes)) == 0) {
      void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) mem_ = static_cast<uint8_t*>(p);
    }
    if (fd >= 0) ::close(fd);
    if (mem_ == nullptr) {
      std::fprintf(stderr, "soak serve: %s: cannot map it; runs counted in this run only\n",
                   path.c_str());
      own_.resize(kBytes);
      mem_ = own_.data();
    }
  }
  RanOnce(const RanOnce&) = delete;
  RanOnce& operator=(const RanOnce&) = delete;
  ~RanOnce() {
    if (own_.empty()) ::munmap(mem_, kBytes);
  }
  // False when `id` ran before (a duplicate).
  bool first_run(uint64_t id) {
    std::lock_guard lk(mu_);
    uint64_t max;
    std::memcpy(&max, mem_, 8);
    if (id + kWindow <= max) return true;  // older than the window: cannot be told
    while (max < id) {
      ++max;
      set(max % kWindow, false);
    }
    std::memcpy(mem_, &max, 8);
    bool ran = get(id % kWindow);
    set(id % kWindow, true);
    return !ran;
  }

 private:
  static constexpr uint64_t kWindow = uint64_t(1) << 22;
  static constexpr size_t kBytes = 8 + kWindow / 8;  // the highest id, then a bit per id
  bool get(uint64_t i) const { return mem_[8 + i / 8] & (1u << (i % 8)); }
  void set(uint64_t i, bool v) {
    uint8_t& b = mem_[8 + i / 8];
    b = static_cast<uint8_t>(v ? b | (1u << (i % 8)) : b & ~(1u << (i % 8)));
  }
  std::mutex mu_;
  uint8_t* mem_ = nullptr;
  std::vector<uint8_t> own_;
};

}  // namespace

int soak_serve(const std::string& config_path) {
  (void)init_logging("warn");
  auto cfg = load_config(config_path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "soak serve: %s\n", cfg.status().to_string().c_str());
    return 2;
  }
  auto key = load_cluster_key(cfg->node.cluster_key_file);
  if (!key.ok()) {
    std::fprintf(stderr, "soak serve: %s\n", key.status().to_string().c_str());
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // Handlers first, then listen: a restarted server never answers "no handler" (issue 38).
  auto node = Node::create(*cfg, *key);
  if (!node.ok()) {
    std::fprintf(stderr, "soak serve: %s\n", node.status().to_string().c_str());
    return 1;
  }
  RanOnce ran(config_path + ".ran");
  (*node)->handle(
      kSoakWrite, "SOAK_WRITE",
      [&ran](RpcRequest& req) {
        RpcResponse r;
        uint64_t id = get_u64(req.payload, 0);
        if (!ran.first_run(id)) {
          std::printf("DUPLICATE %llu from %s\n", static_cast<unsigned long long>(id),
                      req.from.to_string().c_str());
          std::fflush(stdout);
        }
        r.payload = Buffer::copy_of(req.payload.span());
        r.bulk = make_bulk(Buffer::copy_of(req.bulk.span()));
        return r;
      },
      HandlerMode::kInline, Execution::kOnce);
  (*node)->handle(
      kSoakRead, "SOAK_READ",
      [](RpcRequest& req) {
        RpcResponse r;
        uint32_t size = std::min<uint32_t>(get_u32(req.payload, 8), kMaxBulk);
        r.payload = Buffer::copy_of(req.payload.span());
        r.bulk = make_bulk(soak_pattern(size, get_u32(req.payload, 12)));
        return r;
      },
      HandlerMode::kInline, Execution::kRepeatable);
  if (Status s = (*node)->listen(); !s.ok()) {
    std::fprintf(stderr, "soak serve: %s\n", s.to_string().c_str());
    return 1;
  }
  std::printf("soak server ready\n");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  (*node)->stop();
  return 0;
}

}  // namespace pfsnet::testing
