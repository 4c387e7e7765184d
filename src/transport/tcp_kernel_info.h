// The kernel's figures of a TCP socket (TCP_INFO), read into pfsnet's TcpKernelInfo. In a
// file of its own: the full struct tcp_info is in <linux/tcp.h>, which clashes with the
// older copy in <netinet/tcp.h> that asio includes.
// Threads: any; the caller keeps the descriptor open for the call.
#pragma once

#include <pfsnet/ni_info.h>

#include <optional>

namespace pfsnet {

// nullopt when the descriptor is not a TCP socket (or the kernel refuses). `with_buffers`:
// also SO_SNDBUF and SO_RCVBUF (two more system calls); else they stay 0.
std::optional<TcpKernelInfo> read_tcp_kernel_info(int fd, bool with_buffers);

}  // namespace pfsnet
