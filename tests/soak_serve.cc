// pfsnet_soak serve: a libpfsnet Node whose SOAK_WRITE runs once and reports any second
// run of a request as a DUPLICATE line, and whose SOAK_READ answers a seeded pattern.
#include <pfsnet/node.h>
#include <signal.h>

#include <cstdio>
#include <mutex>
#include <vector>

#include "base/log.h"
#include "soak.h"

namespace pfsnet::testing {
namespace {

// Which request ids ran, in a window of the newest 2^22 (the client numbers its requests
// in order; a resend comes within seconds, millions of ids later it cannot).
class RanOnce {
 public:
  // False when `id` ran before (a duplicate).
  bool first_run(uint64_t id) {
    std::lock_guard lk(mu_);
    if (id + kWindow <= max_) return true;  // older than the window: cannot be told
    while (max_ < id) {
      ++max_;
      bits_[max_ % kWindow] = false;
    }
    bool ran = bits_[id % kWindow];
    bits_[id % kWindow] = true;
    return !ran;
  }

 private:
  static constexpr uint64_t kWindow = uint64_t(1) << 22;
  std::mutex mu_;
  std::vector<bool> bits_ = std::vector<bool>(kWindow);
  uint64_t max_ = 0;
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
  RanOnce ran;
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
