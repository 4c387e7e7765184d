// Transport tests' raw TCP client: a socket that does the client's half of the handshake
// by hand and then writes frames as bytes (or garbage), and loopback addresses of this
// process's own (transport_test.cc, receive_here_test.cc, bulk_sink_test.cc).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "transport/tcp_transport.h"
#include "transport/test_frames.h"
#include "wire/handshake.h"

namespace pfsnet::test {

// An address on loopback of this process's own (127.X.Y.host, X and Y from the PID): ctest
// runs the cases in parallel, and the ports below come from the PID too -- with one
// address for all, two processes with adjacent PIDs met at one port.
inline Nid own(int host) {
  int pid = static_cast<int>(getpid());
  return *Nid::parse("127." + std::to_string(20 + pid % 200) + "." +
                     std::to_string((pid / 200) % 250) + "." + std::to_string(host) + "@tcp");
}

// A socket connected to `to`:`port` (its reads time out after 5 s), or -1.
inline int raw_connect(const Nid& to, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(to.ipv4());
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool write_all(int fd, const void* p, size_t n) {
  return ::send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

inline bool read_all(int fd, void* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, static_cast<uint8_t*>(p) + got, n - got, 0);
    if (r <= 0) return false;
    got += r;
  }
  return true;
}

inline void send_hs(int fd, FrameKind kind, const Buffer& payload) {
  FrameHeader h;
  h.kind = kind;
  h.payload_len = static_cast<uint32_t>(payload.size());
  EncodedHeader e;
  encode_header(h, &e);
  ASSERT_TRUE(write_all(fd, e.data(), e.size()));
  ASSERT_TRUE(write_all(fd, payload.data(), payload.size()));
}

inline Buffer recv_hs(int fd, FrameHeader* out) {
  EncodedHeader e;
  if (!read_all(fd, e.data(), e.size())) return Buffer();
  auto h = decode_header(e, FrameLimits{});
  if (!h.ok()) return Buffer();
  *out = *h;
  Buffer p(h->payload_len);
  if (!read_all(fd, p.data(), p.size())) return Buffer();
  return p;
}

// The client's half of the handshake by hand, on a raw socket to `to`:`port` from `self`.
// Returns whether the server accepted it.
inline bool raw_handshake(int fd, const Nid& self, std::string_view key) {
  Hello ch;
  ch.nonce = random_nonce();
  ch.nids = {self};
  send_hs(fd, FrameKind::kHello, encode_hello(ch));
  FrameHeader h;
  Buffer p = recv_hs(fd, &h);
  auto sh = decode_hello(p.span());
  if (!sh.ok()) return false;
  Mac m = handshake_mac(key, 'C', ch.nonce, sh->nonce, sh->nids, ch.nids, ch.flags);
  send_hs(fd, FrameKind::kAuth, Buffer::copy_of(std::span<const uint8_t>(m)));
  recv_hs(fd, &h);
  return h.kind == FrameKind::kAuth;
}

// `tb` listening at `to`:`port`, and a raw client from `self` past the handshake (`eb`
// has seen the connection): its socket, or -1 when a step failed.
inline int raw_client(TcpTransport& tb, Recorder& eb, const Nid& self, const Nid& to, uint16_t port,
                      std::string_view key) {
  if (!tb.listen(to, port).ok()) return -1;
  int fd = raw_connect(to, port);
  if (fd < 0) return -1;
  if (!raw_handshake(fd, self, key) || !eb.wait([&] { return eb.conns.size() == 1; })) {
    close(fd);
    return -1;
  }
  return fd;
}

// A TCP transport of `to` (its events to `eb`) and a raw client from `self` connected to
// it through the handshake: the transport, and the client's socket in *fd (-1 when a step
// failed).
inline std::unique_ptr<TcpTransport> transport_with_raw_client(Clock& clock, Recorder& eb,
                                                               const Nid& self, const Nid& to,
                                                               uint16_t port, std::string_view key,
                                                               int* fd) {
  TransportOptions o;
  o.cluster_key = std::string(key);
  o.handshake_timeout = std::chrono::seconds(2);
  auto t = std::make_unique<TcpTransport>(o, std::vector<Nid>{to}, clock, eb);
  *fd = raw_client(*t, eb, self, to, port, key);
  return t;
}

// A frame (a request unless `kind` says) as bytes on the wire: header, payload, bulk.
inline std::vector<uint8_t> wire_frame(uint64_t xid, const Buffer& payload, const Buffer& bulk,
                                       FrameKind kind = FrameKind::kRequest) {
  FrameHeader h;
  h.kind = kind;
  h.xid = xid;
  h.msg_type = 3;
  h.payload_len = static_cast<uint32_t>(payload.size());
  h.bulk_len = static_cast<uint32_t>(bulk.size());
  EncodedHeader e;
  encode_header(h, &e);
  std::vector<uint8_t> out(e.begin(), e.end());
  out.insert(out.end(), payload.data(), payload.data() + payload.size());
  out.insert(out.end(), bulk.data(), bulk.data() + bulk.size());
  return out;
}

}  // namespace pfsnet::test
