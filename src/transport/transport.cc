#include "transport/transport.h"

#include "base/log.h"

namespace pfsnet {

TransportOptions transport_options(const Config& cfg, std::string cluster_key) {
  TransportOptions to;
  to.cluster_key = std::move(cluster_key);
  to.limits.max_bulk = static_cast<uint32_t>(cfg.max_bulk());
  for (const EmulationConfig& e : cfg.emulation) {
    EmulationRule r;
    // The config parser has checked both NIDs.
    if (!e.ni.empty()) r.local = Nid::parse(e.ni).value_or(Nid());
    if (!e.peer.empty()) r.peer = Nid::parse(e.peer).value_or(Nid());
    r.delay =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(e.delay_ms));
    r.bits_per_second = e.rate_mbit * 1e6;
    to.emulation.push_back(r);
    PFS_LOG_WARN(
        "LINK EMULATION ON: frames from {} to {} are delayed {} ms one way{} -- this "
        "node does not run at the speed of its network",
        e.ni.empty() ? "any NI" : e.ni, e.peer.empty() ? "any peer" : e.peer, e.delay_ms,
        e.rate_mbit > 0 ? " and limited to " + std::to_string(e.rate_mbit) + " Mbit/s"
                        : std::string());
  }
  return to;
}

}  // namespace pfsnet
