// A node of its own, built on the installed libpfsnet: pings a peer's PING service.
//   pfsnet_ping_example LOCAL_NID PEER_NID KEY_FILE [COUNT]
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "base/config.h"
#include "net/net.h"
#include "rpc/ping.h"
#include "rpc/rpc_engine.h"
#include "transport/tcp_transport.h"

using namespace pfsnet;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s LOCAL_NID PEER_NID KEY_FILE [COUNT]\n", argv[0]);
    return 2;
  }
  auto me = Nid::parse(argv[1]), peer = Nid::parse(argv[2]);
  auto key = load_cluster_key(argv[3]);
  if (!me.ok() || !peer.ok() || !key.ok()) {
    std::fprintf(stderr, "bad argument: %s%s%s\n", me.status().message().c_str(),
                 peer.status().message().c_str(), key.status().message().c_str());
    return 2;
  }
  int count = argc > 4 ? std::atoi(argv[4]) : 3;
  MonotonicClock clock;
  Net net(NetOptions{}, {*me}, clock, [&](TransportEvents& ev) {
    TransportOptions to;
    to.cluster_key = *key;
    return std::make_unique<TcpTransport>(to, std::vector<Nid>{*me}, clock, ev);
  });
  if (Status s = net.start(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    return 1;
  }
  RpcEngine rpc(net, RpcOptions{});
  int failed = 0;
  for (int i = 0; i < count; ++i) {
    RpcReply r = rpc.call(*peer, kMsgPing, Buffer());
    if (r.status.ok())
      std::printf("reply from %s: rtt %.3f ms\n", peer->to_string().c_str(), to_ms(r.round_trip()));
    else
      std::printf("no reply: %s\n", r.status.to_string().c_str()), ++failed;
  }
  return failed ? 1 : 0;
}
