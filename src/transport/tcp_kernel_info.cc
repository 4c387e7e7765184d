#include "transport/tcp_kernel_info.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace pfsnet {

std::optional<TcpKernelInfo> read_tcp_kernel_info(int fd, bool with_buffers) {
  struct tcp_info t {};
  socklen_t len = sizeof(t);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &t, &len) != 0) return std::nullopt;
  // An older kernel fills less: the fields past what it wrote stay 0.
  TcpKernelInfo k;
  k.rtt_us = t.tcpi_rtt;
  k.rttvar_us = t.tcpi_rttvar;
  k.snd_cwnd = t.tcpi_snd_cwnd;
  k.snd_mss = t.tcpi_snd_mss;
  k.pmtu = t.tcpi_pmtu;
  k.lost = t.tcpi_lost;
  k.unacked = t.tcpi_unacked;
  k.retransmitting = t.tcpi_retrans;
  k.total_retrans = t.tcpi_total_retrans;
  k.dsack_dups = t.tcpi_dsack_dups;
  k.segs_out = t.tcpi_segs_out;
  k.bytes_sent = t.tcpi_bytes_sent;
  k.bytes_retrans = t.tcpi_bytes_retrans;
  k.delivery_rate = t.tcpi_delivery_rate;
  k.pacing_rate = t.tcpi_pacing_rate;
  k.min_rtt_us = t.tcpi_min_rtt;
  k.busy_us = t.tcpi_busy_time;
  k.rwnd_limited_us = t.tcpi_rwnd_limited;
  k.sndbuf_limited_us = t.tcpi_sndbuf_limited;
  k.snd_wnd = t.tcpi_snd_wnd;
  k.notsent_bytes = t.tcpi_notsent_bytes;
  k.last_data_sent_ms = t.tcpi_last_data_sent;
  if (!with_buffers) return k;
  int v = 0;
  socklen_t vl = sizeof(v);
  if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &vl) == 0) k.sndbuf = static_cast<uint32_t>(v);
  vl = sizeof(v);
  if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &vl) == 0) k.rcvbuf = static_cast<uint32_t>(v);
  return k;
}

}  // namespace pfsnet
