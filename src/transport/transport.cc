#include "transport/transport.h"

#include <pfsnet/version.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "transport/tls.h"

namespace pfsnet {

Buffer OutFrame::wire_payload() const {
  Buffer b(payload_len());
  if (!payload.empty()) std::memcpy(b.data(), payload.data(), payload.size());
  if (sealed) std::memcpy(b.data() + payload.size(), seal, kDataCrcSize);
  return b;
}

void Connection::return_credit(const std::shared_ptr<Connection>& c, uint32_t high_water) {
  if (c->credits_to_return_.fetch_add(1) + 1 >= high_water) flush_credits(c);
}

void Connection::flush_credits(const std::shared_ptr<Connection>& c) {
  if (c->credits_to_return() == 0 || c->credit_flush_pending_.exchange(true)) return;
  std::weak_ptr<Connection> weak = c;
  c->post([weak] {
    auto conn = weak.lock();
    if (!conn) return;
    conn->credit_flush_pending_.store(false);
    if (conn->credits_to_return() == 0 || !conn->is_open()) return;
    auto f = std::make_unique<OutFrame>();
    f->hdr.kind = FrameKind::kCredit;
    f->hdr.src_nid = conn->local_nid();
    f->hdr.dst_nid = conn->peer_nid();
    conn->send(std::move(f));
  });
}

ClusterKeyRing::ClusterKeyRing(ClusterKeys keys) : s_(std::make_shared<Shared>()) {
  MutexLock lk(s_->mu);
  s_->keys = std::move(keys);
}

ClusterKeys ClusterKeyRing::get() const {
  MutexLock lk(s_->mu);
  return s_->keys;
}

void ClusterKeyRing::set(ClusterKeys keys) {
  MutexLock lk(s_->mu);
  s_->keys = std::move(keys);
}

uint64_t new_connection_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

Result<TransportOptions> transport_options(const Config& cfg, ClusterKeys cluster_key) {
  TransportOptions to;
  to.limits.max_bulk = static_cast<uint32_t>(cfg.max_bulk());
  to.busy_poll = std::chrono::microseconds(cfg.lnet.busy_poll_us);
  to.tx_buffer_bytes = static_cast<int>(cfg.lnet.tx_buffer_size);
  to.rx_buffer_bytes = static_cast<int>(cfg.lnet.rx_buffer_size);
  to.io_threads = io_threads_in_force(cfg);
  to.zc_min_payload = static_cast<size_t>(cfg.lnet.zc_min_payload);
  if (cfg.tls.enabled) {
    for (const NetConfig& n : cfg.nets)
      if (n.nid.is_verbs())
        return Status(Code::kInvalidArgument,
                      "tls.enabled: TLS covers TCP NIs only, and " + n.nid.to_string() +
                          " is carried by libfabric (its traffic would not be encrypted)");
    auto tls = TlsContext::create(cfg.tls, cluster_key.current);
    if (!tls.ok()) return tls.status();
    to.tls = *tls;
  }
  to.cluster_key = std::move(cluster_key);
  // Peers see this build's release, and this run's instance (a restart changes it).
  to.wire.release = release_name();
  Nonce r = random_nonce();
  std::memcpy(&to.wire.instance, r.data(), sizeof to.wire.instance);
  to.wire.instance |= 1;
  return to;
}

Result<ClusterKeys> load_cluster_keys(const std::string& path) {
  auto current = load_cluster_key(path);
  if (!current.ok()) return current.status();
  ClusterKeys k(std::move(*current));
  for (auto [suffix, key] : {std::pair{".next", &k.next}, std::pair{".prev", &k.previous}}) {
    std::string file = path + suffix;
    if (access(file.c_str(), F_OK) != 0 && errno == ENOENT) continue;
    auto r = load_cluster_key(file);
    if (!r.ok()) return r.status();
    *key = std::move(*r);
  }
  if (!k.next.empty() && !k.previous.empty())
    return Status(Code::kInvalidArgument,
                  path + ".next and " + path +
                      ".prev both exist: retire the last rotation's previous key "
                      "(pfsnet keygen --retire) before the next rotation begins");
  if (k.next == k.current || k.previous == k.current)
    return Status(Code::kInvalidArgument, path + (k.next == k.current ? ".next" : ".prev") +
                                              " holds the current key itself");
  return k;
}

int default_io_threads(int cpus) { return std::min(std::max(3, cpus / 2), std::max(1, cpus)); }

int io_threads_in_force(const Config& cfg) {
  if (cfg.lnet.io_threads > 0) return static_cast<int>(cfg.lnet.io_threads);
  cpu_set_t set;
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  return default_io_threads(cpus);
}

std::vector<EmulationRule> emulation_rules(const Config& cfg) {
  std::vector<EmulationRule> rules;
  for (const EmulationConfig& e : cfg.emulation) {
    EmulationRule r;
    // The config parser has checked both NIDs.
    if (!e.ni.empty()) r.local = Nid::parse(e.ni).value_or(Nid());
    if (!e.peer.empty()) r.peer = Nid::parse(e.peer).value_or(Nid());
    r.delay =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(e.delay_ms));
    r.bits_per_second = e.rate_mbit * 1e6;
    r.shared = e.shared;
    rules.push_back(r);
    PFS_LOG_WARN(
        "LINK EMULATION ON: frames from {} to {} are delayed {} ms one way{}{} -- this "
        "node does not run at the speed of its network",
        e.ni.empty() ? "any NI" : e.ni, e.peer.empty() ? "any peer" : e.peer, e.delay_ms,
        e.rate_mbit > 0 ? " and limited to " + std::to_string(e.rate_mbit) + " Mbit/s"
                        : std::string(),
        e.shared ? " (one link shared by all peers, each way)" : "");
  }
  return rules;
}

}  // namespace pfsnet
