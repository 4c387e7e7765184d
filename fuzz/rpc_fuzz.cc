// Fuzz target: the RPC engine's own messages from peers -- RPC_DONE (rpc/reply_cache.h: an
// upper bound and the xids still open below it), then applied to a reply cache holding
// records of that incarnation, which must stay within its window and never hold a record
// the message called finished -- and a ROUTER_PING's answer (rpc/router_pinger.h), which
// decodes within its bounds and re-encodes to itself, or fails cleanly.
#include "fuzz.h"
#include "rpc/reply_cache.h"
#include "rpc/router_pinger.h"

using namespace pfsnet;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto rp = decode_router_ping_reply(std::span<const uint8_t>(data, size));
  if (rp.ok()) {
    FUZZ_CHECK(rp->nis.size() <= kMaxRouterPingNis);
    auto again = decode_router_ping_reply(encode_router_ping_reply(*rp).span());
    FUZZ_CHECK(again.ok() && again->routing == rp->routing && again->nis == rp->nis);
  } else {
    FUZZ_CHECK(rp.status().code() == Code::kProtocol);
  }
  auto d = decode_done(std::span<const uint8_t>(data, size));
  if (!d.ok()) {
    FUZZ_CHECK(d.status().code() == Code::kProtocol);
    return 0;
  }
  FUZZ_CHECK(d->open.size() <= kMaxDoneOpen);
  for (size_t i = 0; i < d->open.size(); ++i) {
    FUZZ_CHECK(d->open[i] < d->upper);
    FUZZ_CHECK(i == 0 || d->open[i - 1] < d->open[i]);
  }
  auto again = decode_done(encode_done(*d).span());
  FUZZ_CHECK(again.ok() && again->upper == d->upper && again->open == d->open);
  // Applied to a cache with records 1..64 of the incarnation (each done, reply kept).
  ReplyCacheOptions o;
  o.window = 64;
  ReplyCache rc(o);
  const TimePoint t0{};
  for (uint64_t x = 1; x <= 64; ++x) {
    FUZZ_CHECK(rc.admit(7, x, uint32_t(x), ReplyPath{Nid::ipv4(1), Nid::ipv4(2)}, t0).what ==
               Admit::kRun);
    rc.finish(7, x, std::make_shared<SavedReply>());
  }
  rc.done(7, *d, t0);
  FUZZ_CHECK(rc.stats().entries <= 64);
  for (uint64_t x = 1; x <= 64; ++x) {
    bool finished = x < d->upper && !std::binary_search(d->open.begin(), d->open.end(), x);
    Admit a = rc.admit(7, x, uint32_t(x), ReplyPath{Nid::ipv4(1), Nid::ipv4(2)}, t0).what;
    FUZZ_CHECK(finished ? a == Admit::kFinished : a == Admit::kSaved);
  }
  return 0;
}

namespace pfsnet::fuzz {
std::vector<std::vector<uint8_t>> fuzz_seeds() {
  return {bytes_of(encode_done(DoneAck{100, {3, 7, 99}})), bytes_of(encode_done(DoneAck{1, {}})),
          bytes_of(encode_done(DoneAck{40, {1, 2, 30}})),
          bytes_of(encode_done(DoneAck{UINT64_MAX, {0, UINT64_MAX - 1}})),
          bytes_of(
              encode_router_ping_reply(RouterPingReply{true,
                                                       {{*Nid::parse("198.18.1.2@tcp1"), true},
                                                        {*Nid::parse("2001:2::2@tcp2"), false},
                                                        {*Nid::parse("198.18.3.2@o2ib"), true}}}))};
}
}  // namespace pfsnet::fuzz
