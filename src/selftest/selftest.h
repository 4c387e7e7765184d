// Self-test, modelled on lnet_selftest: a test (ping, or brw read/write of `size` bytes)
// from a group of client nodes to a group of server nodes, `concurrency` RPCs in flight
// per client, targets given by the distribution (1:1 -- client i to server i mod n; 1:N --
// every client to every server, round-robin), for `duration`.
//
// The node that runs `pfsnet selftest` drives the clients' daemons with SELFTEST_RUN RPCs
// (one per client per concurrency step, in parallel) and collects their results; each
// client first measures its RTT to its servers with 0-byte PINGs, then runs the load.
// Per step it reports MiB/s, RPCs/s, latency p50/p99, and beside them the theoretical
// peak min(link rate, RPCs in flight x size / RTT) and the efficiency.
// Threads: SelftestService's handler runs on a worker (it blocks for `duration`).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rpc/rpc_engine.h"

namespace pfsnet {

struct SelftestSpec {
  std::vector<Nid> clients, servers;
  std::string test = "brw";    // "ping" or "brw"
  std::string mode = "write";  // brw: "write" or "read"
  uint32_t size = 1 << 20;     // bytes of bulk per RPC (ping: echoed both ways)
  std::vector<int> concurrency = {1};
  std::string distribute = "1:1";  // "1:1" or "1:N"
  double duration_s = 5;
  double link_mbit = 0;  // per client; 0: unknown (the theory is RPCs x size / RTT alone)

  // Parses and validates the admin request's JSON; errors say what is wrong.
  static Result<SelftestSpec> from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
};

// What one client measured in one step.
struct ClientResult {
  uint64_t rpcs = 0, errors = 0, bytes = 0;
  double seconds = 0;
  double rtt_ms = 0;                 // min PING round trip to its servers
  std::vector<double> latencies_ms;  // a sample (at most 2,000)
  std::vector<uint64_t> timeline;    // bytes completed in each second from the start
  std::string first_error;
};

// SELFTEST_RUN's request: one client's share of a step -- its targets, the test, and the
// load to keep on them.
struct LoadRequest {
  static constexpr size_t kMaxTargets = 1024;
  std::vector<Nid> targets;    // 1..kMaxTargets
  std::string test = "brw";    // "ping" or "brw"
  std::string mode = "write";  // brw: "write" or "read"
  uint32_t size = 0;           // bytes per RPC, at most the engine's bulk limit
  int concurrency = 1;         // 1..4096 (as SelftestSpec)
  double duration_s = 1;       // (0, 3600] seconds

  Buffer encode() const;  // the byte codec (wire/byte_codec.h), as every internal message
};
// Decodes a SELFTEST_RUN payload from a peer: the fields above, each checked (a peer's
// request could otherwise ask this node for any load; size at most `max_bulk`); errors
// are kProtocol and name the field.
Result<LoadRequest> decode_load_request(std::span<const uint8_t> payload, uint32_t max_bulk);

// SELFTEST_RUN's reply from a client: its result (a client that failed answers with an
// error status instead). Decoded with each field checked (counts 0..2^62, times finite
// and >= 0, at most 2,000 latencies and 3,700 seconds of timeline); malformed: kProtocol.
Buffer encode_client_result(const ClientResult& c);
Result<ClientResult> decode_client_result(std::span<const uint8_t> payload);

// Serves SELFTEST_RUN on `rpc` (register before traffic).
void serve_selftest(RpcEngine& rpc, Clock& clock);

// Runs the whole sweep from this node; returns {"steps": [...], ...} (see the .cc).
Result<nlohmann::json> run_selftest(RpcEngine& rpc, const SelftestSpec& spec);

// An SVG chart of throughput against concurrency, with the theory line.
std::string selftest_svg(const nlohmann::json& result);

}  // namespace pfsnet
