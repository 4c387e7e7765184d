// FabricTransport: the RDMA LND, on libfabric (o2iblnd's pattern). It carries the `@o2ib`
// networks: the `verbs` provider on InfiniBand/RoCE, `tcp` anywhere (tests, CI).
//
// Connections are libfabric MSG endpoints, set up by the connection manager (fabric
// events) with both ends' parameters (receive depth, message size: wire/fabric_wire.h) in
// its private data, then authenticated with the cluster key by the same handshake as TCP
// (wire/handshake.h), in messages. Small frames go whole as sends into receive buffers
// the peer has posted and registered; a frame larger than a message goes by RMA: the
// receiver reads the payload and bulk from the sender's registered memory and answers
// when it has them -- except a reply's bulk when its request offered a sink: a request
// that expects bulk back (OutFrame::reply_sink) carries the address and key of registered
// memory of its sender's, the server RMA-writes the reply's bulk there and then sends the
// reply's message (o2iblnd's GET). Sink memory comes from a pool per NI (reg_pool.h), so
// steady traffic registers none. The connection's own credits (one per posted receive buffer,
// returned as buffers are reposted, on any message or a NOOP) keep a sender from overrunning them.
//
// Threads: one I/O thread per transport polls the completion and event queues (busy
// polling TransportOptions::busy_poll, or FabricOptions::rma_poll while an RMA is under
// way, before it sleeps on their wait descriptors); every callback runs there, or on a
// thread waiting for a reply that calls progress() while the I/O thread is not polling
// (one pass at a time: callbacks never run concurrently). So a blocking caller on a spare
// core takes its reply from the completion queue itself, as fi_pingpong does, with no
// thread hand-off. Senders post their sends on their own thread (the domain is
// FI_THREAD_SAFE); public methods are thread-safe except stop(), which must not run on the
// I/O thread.
#pragma once

#include <pfsnet/clock.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/fabric_health.h"
#include "transport/transport.h"

struct fi_info;

namespace pfsnet {

struct FabricOptions {
  std::string provider = "verbs";  // libfabric provider: "verbs", "tcp"
  std::string domain;              // libfabric domain (device or interface); "" = any
  uint32_t rx_depth = 64;          // receive buffers posted per connection
  uint32_t msg_size = 4096;        // bytes per message: larger frames go by RMA
  // While an RMA is under way on one of its connections, the I/O thread polls up to this
  // long after its last completion before it sleeps, instead of TransportOptions::busy_poll
  // (which, when 0, turns this off too). A provider without hardware RMA (tcp) moves the
  // data only while it is polled, one wake-up per socket's worth if the thread sleeps; a
  // verbs NIC completes a MiB in tens of µs. At most this much CPU per completion.
  std::chrono::microseconds rma_poll{1000};
  // A read's reply whose bulk is RMA-written into the requester's sink: its message is
  // posted right behind the write where the provider delivers sends after writes in order
  // (FI_ORDER_SAW, as tcp does), so it arrives with its data still in the requester's
  // cache. Otherwise (or false here) the message waits for the write's completion, and
  // arrives behind the next write.
  bool ordered_replies = true;
};

// What the fabric transport asks of a provider (fi_getinfo hints): MSG endpoints with sends
// and RMA, the registration modes it honours, any thread may post. The caller frees it
// (fi_freeinfo). For baselines that must ask the same (bench/).
fi_info* fabric_hints(const std::string& provider, const std::string& domain);

class FabricTransport final : public Transport {
 public:
  // `node_nids`: every NID of this node, announced in handshakes. `clock` and `events`
  // must outlive the transport.
  FabricTransport(TransportOptions opts, FabricOptions fopts, std::vector<Nid> node_nids,
                  Clock& clock, TransportEvents& events);
  ~FabricTransport() override;

  // Whether libfabric offers `fopts.provider` (on `fopts.domain`) with MSG endpoints and
  // RMA on `local`'s address; the error names the provider, the address and libfabric's
  // answer.
  static Status probe(const FabricOptions& fopts, const Nid& local);

  Status listen(const Nid& local, uint16_t port) override;
  void connect(const Nid& local, const Nid& remote, uint16_t port, ConnectCallback cb) override;
  void post(std::function<void()> fn) override;
  bool progress() override;
  void stop() override;

  // Fault injection at the transport seam (LNet health's errors, without the hardware): the
  // next connection attempt (kConnect) or the next data frame sent on an open connection
  // (kCompletion; the frame is not sent) fails with libfabric error `err` (an errno), as
  // if the provider had reported it, and goes through the same mapping to health
  // (fabric_health.h). One-shot; any thread.
  void inject_fault(FabricSite site, int err);

  // What the transport did with memory since it started (tests, diagnostics). Any thread.
  struct Counters {
    uint64_t rma_reads = 0;             // reads of a peer's payload or bulk
    uint64_t sink_writes = 0;           // reply bulk written into a sink the peer offered
    uint64_t sinks_offered = 0;         // reply sinks offered with requests
    uint64_t registrations = 0;         // memory registered for one frame
    uint64_t sink_registrations = 0;    // pooled sink memory registered (once per chunk)
    uint64_t sink_replies_ordered = 0;  // reply messages posted right behind their write
  };
  Counters counters() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pfsnet
