// The provider's own RMA streaming figure, the baseline of the fabric LND's 1 MiB bulk:
// fi_read()s (or fi_write()s) of `size` bytes, `depth` in flight, between two MSG endpoints of a
// libfabric provider on loopback (each end its own fabric and domain, as two nodes would have, and
// its own thread polling its completion queue). Nothing else: no RPC, credits, handshake
// or statistics. Debian ships no fi_rma_bw, hence this loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pfsnet::bench {

enum class RmaOp { kRead, kWrite };

// MiB/s read (or written) over `seconds`; 0 (and a message on stderr) when the provider
// fails.
double fabric_rma_mib_s(RmaOp op, const std::string& provider, const std::string& addr,
                        uint16_t port, size_t size, int depth, double seconds);

}  // namespace pfsnet::bench
