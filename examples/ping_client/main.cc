// A node of its own, built on the installed libpfsnet's public API (<pfsnet/...>):
// pings a peer's PING service.
//   pfsnet_ping_example LOCAL_NID PEER_NID KEY_FILE [COUNT]
#include <pfsnet/node.h>

#include <cstdio>
#include <cstdlib>

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
  Config cfg;
  cfg.node.name = "ping-example";
  cfg.nets.push_back({*me, 7988});
  auto node = Node::start(cfg, *key);
  if (!node.ok()) {
    std::fprintf(stderr, "%s\n", node.status().to_string().c_str());
    return 1;
  }
  int failed = 0;
  for (int i = 0; i < count; ++i) {
    RpcReply r = (*node)->call(*peer, kMsgPing, Buffer());
    if (r.status.ok())
      std::printf("reply from %s: rtt %.3f ms\n", peer->to_string().c_str(), to_ms(r.round_trip()));
    else
      std::printf("no reply: %s\n", r.status.to_string().c_str()), ++failed;
  }
  return failed ? 1 : 0;
}
