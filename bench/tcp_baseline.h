// pfsnet_bench's baselines from outside pfsnet, in the same run: raw TCP between two loopback
// addresses (a forked server; a connection's first byte picks echo, sink or source) and
// fabtests' fi_pingpong.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace pfsnet::bench {

struct TcpBaseline {
  std::string server, client;  // IPv4 addresses
  uint16_t port = 0;

  // Forks the server, listening on server:port; its pid.
  pid_t start_server() const;
  // A connection from `client` in `mode` ('E' echo, 'P' polling echo, 'S' sink, 'R' source
  // of 1 MiB writes).
  int connect_mode(char mode) const;
  // The p50 round trip of 64-byte messages, one at a time (us).
  double pingpong_p50_us(int iters) const;
  // 64-byte messages echoed per second, 64 in flight. With `poll` both ends poll their
  // sockets instead of sleeping in read(): the messages then cost what the kernel's TCP
  // path costs, whatever the host's wake-up latency. Without, 64 messages in flight travel
  // as one 4 KiB batch and each end sleeps for each: the figure is mostly two wake-ups per
  // batch, which a VM's idle state moves fivefold (0.8 M msg/s on one day on this machine,
  // 4 M on another).
  double echo_rate(double seconds, bool poll) const;
  // MiB/s written to the sink.
  double stream_mib_s(double seconds) const;
  // The same written with MSG_ZEROCOPY (SO_ZEROCOPY; a ring of 8 buffers, each written
  // again only after the kernel's completion for it): whether the kernel can send from
  // the application's pages on this path. `copied`: the fraction of completions the
  // kernel flagged SO_EE_CODE_ZEROCOPY_COPIED (it copied after all: loopback and every
  // local delivery does). 0 when the socket refuses SO_ZEROCOPY.
  double zerocopy_stream_mib_s(double seconds, double* copied) const;
};

// fi_pingpong (fabtests) with the tcp provider and MSG endpoints, 64-byte messages, the
// server on `server_addr`:`port`: the round trip (us), twice its "usec/xfer". 0 when it fails.
double fi_pingpong_rtt_us(int iters, const std::string& server_addr, uint16_t port);

}  // namespace pfsnet::bench
