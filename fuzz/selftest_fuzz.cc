// Fuzz target: self-test requests -- SELFTEST_RUN's payload from a peer (decode_load_request:
// the load this node is asked to put on others), its reply (decode_client_result) and the
// admin `selftest` request (SelftestSpec::from_json). Whatever arrives is refused or held within
// its limits, and what is accepted survives its own encoding. The first byte picks which.
#include <nlohmann/json.hpp>

#include "fuzz.h"
#include "selftest/selftest.h"

using namespace pfsnet;
using nlohmann::json;

namespace {
constexpr uint32_t kMaxBulk = 2 << 20;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::span<const uint8_t> in(data + 1, size - 1);
  if (data[0] % 3 == 2) {  // a client's result, as the node running the sweep reads it
    auto c = decode_client_result(in);
    if (c.ok()) {
      FUZZ_CHECK(c->latencies_ms.size() <= 2000 && c->timeline.size() <= 3700 && c->seconds >= 0 &&
                 c->rtt_ms >= 0);
      Buffer e = encode_client_result(*c);  // ... and survives its encoding
      auto again = decode_client_result(e.span());
      FUZZ_CHECK(again.ok() && again->rpcs == c->rpcs && again->timeline == c->timeline &&
                 again->latencies_ms == c->latencies_ms && again->first_error == c->first_error);
    } else
      FUZZ_CHECK(!c.status().message().empty());
    return 0;
  }
  if (data[0] % 3 == 0) {
    auto r = decode_load_request(in, kMaxBulk);
    if (!r.ok()) {
      FUZZ_CHECK(r.status().code() == Code::kProtocol);
      return 0;
    }
    FUZZ_CHECK(!r->targets.empty() && r->targets.size() <= LoadRequest::kMaxTargets);
    FUZZ_CHECK(r->size <= kMaxBulk && r->concurrency >= 1 && r->concurrency <= 4096);
    FUZZ_CHECK(r->duration_s > 0 && r->duration_s <= 3600);
    FUZZ_CHECK(r->test == "ping" || r->test == "brw");
    FUZZ_CHECK(r->mode == "write" || r->mode == "read");
    Buffer e = r->encode();
    auto again = decode_load_request(e.span(), kMaxBulk);
    FUZZ_CHECK(again.ok() && again->targets == r->targets && again->size == r->size &&
               again->concurrency == r->concurrency && again->duration_s == r->duration_s &&
               again->test == r->test && again->mode == r->mode);
    return 0;
  }
  json j = json::parse(in.begin(), in.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  Result<SelftestSpec> s = Status(Code::kInternal, "");
  try {
    s = SelftestSpec::from_json(j);
  } catch (const json::exception&) {
    return 0;  // a field of the wrong type: the admin dispatcher answers with its message
  }
  if (!s.ok()) return 0;
  FUZZ_CHECK(!s->clients.empty() && !s->servers.empty());
  FUZZ_CHECK(!s->concurrency.empty() && s->concurrency.size() <= 64);
  auto again = SelftestSpec::from_json(s->to_json());
  FUZZ_CHECK(again.ok() && again->to_json() == s->to_json());
  return 0;
}

namespace pfsnet::fuzz {

std::vector<std::vector<uint8_t>> fuzz_seeds() {
  LoadRequest r;
  r.targets = {*Nid::parse("198.18.1.2@tcp"), *Nid::parse("198.18.2.2@o2ib1")};
  r.size = 1 << 20;
  r.concurrency = 8;
  r.duration_s = 2.5;
  r.mode = "read";
  std::string spec = R"({"from":["127.0.0.2@tcp"],"to":["127.0.0.3@tcp","127.0.0.4@tcp"],)"
                     R"("test":"brw","mode":"write","size":65536,"concurrency":[1,2,4,8],)"
                     R"("distribute":"1:N","duration":1.5,"link_mbit":1000})";
  ClientResult result;
  result.rpcs = 1200;
  result.errors = 1;
  result.bytes = 1258291200;
  result.seconds = 1.5;
  result.rtt_ms = 0.25;
  result.latencies_ms = {0.5, 0.75, 1.25};
  result.timeline = {1048576, 2097152};
  result.first_error = "TIMEOUT";
  auto text = [](const std::string& t) {
    return std::span(reinterpret_cast<const uint8_t*>(t.data()), t.size());
  };
  return {tagged(0, r.encode()), tagged(1, text(spec)), tagged(2, encode_client_result(result))};
}

}  // namespace pfsnet::fuzz
