// Fuzz target: the admin protocol and the HTTP API's query parameters -- one request line
// (AdminCommands::handle_line: JSON, dispatch, every error a reply) or "GET /api/v1/PATH?QUERY"
// (AdminCommands::http_get). The commands are the daemon's own parsers of their requests:
// fault rules, statistics queries, self-test specs, config assignments, tune and ping
// arguments (the parts that act -- sending RPCs, waiting -- are not driven here). Nothing
// an input does may throw or end the process; every refusal names its reason.
#include <nlohmann/json.hpp>
#include <string>

#include "admin/admin_commands.h"
#include "admin/node_commands.h"
#include "admin/stats_json.h"
#include "base/log.h"
#include "fuzz.h"
#include "net/net.h"
#include "rpc/node_core.h"
#include "rpc/ping.h"
#include "rpc/rpc_engine.h"
#include "selftest/selftest.h"
#include "transport/mem_transport.h"

using namespace pfsnet;
using nlohmann::json;

namespace {

// One node's core (for its engine's message type names), built once and never torn down.
struct Parts {
  ManualClock clock;
  MemHub hub;
  Nid nid = *Nid::parse("127.0.0.2@tcp");
  NodeCore core{[this] {
    NodeCoreOptions o;
    o.cfg.nets.push_back(NetConfig{nid});
    o.clock = &clock;
    o.timer_queue = &hub;  // on the manual clock
    o.stats = false;
    o.health = false;
    o.make_transport = [this](TransportEvents& ev, NodeCore& c) {
      TransportOptions to;
      to.cluster_key = "fuzz-cluster-key";
      return std::make_unique<MemTransport>(hub, to, std::vector<Nid>{nid}, c.clock(), ev);
    };
    return o;
  }()};
  RpcEngine& rpc = core.rpc();
  Config base;
  AdminCommands cmds;

  Parts() {
    (void)init_logging("error");  // fault rules log each add and removal
    base = *parse_config("[node]\nname = \"n\"\n[[net]]\nnid = \"127.0.0.2@tcp\"\n", "fuzz");
    using E = const AdminEmit&;
    cmds.add("fault_add", [this](const json& r, E) -> Result<json> {
      auto rule = parse_fault_rule(r, rpc);
      if (!rule.ok()) return rule.status();
      FaultInjector f;
      uint64_t id = f.add(*rule);
      FUZZ_CHECK(f.rules().size() == 1 && !f.rules()[0].describe().empty() && f.del(id));
      return json{{"rule", rule->describe()}};
    });
    cmds.add(
        "diag_rpc",
        [](const json& r, E) -> Result<json> {
          auto q = parse_stats_query(r, [](const std::string& name) -> Result<Nid> {
            auto n = Nid::parse(name);
            if (!n.ok()) return n.status();
            return *n;
          });
          if (!q.ok()) return q.status();
          return json{{"ok", true}};
        },
        "diag/rpc");
    cmds.add("selftest", [](const json& r, E) -> Result<json> {
      auto s = SelftestSpec::from_json(r);
      if (!s.ok()) return s.status();
      return s->to_json();
    });
    cmds.add("config_set", [this](const json& r, E) -> Result<json> {
      LiveConfig live(base);
      std::vector<std::string> set;
      for (const json& a : r.value("set", json::array())) set.push_back(a.get<std::string>());
      auto applied = live.set(set);
      if (!applied.ok()) {
        FUZZ_CHECK(config_diff(base, live.get()).empty());  // a refusal changes nothing
        return applied.status();
      }
      return json{{"changed", applied->changed.size()}};
    });
    cmds.add("tune", [](const json& r, E) -> Result<json> {
      auto t = parse_tune_request(r);
      if (!t.ok()) return t.status();
      return json{{"peers", t->peers.size()}};
    });
    cmds.add("ping", [](const json& r, E) -> Result<json> {
      auto a = parse_ping_args(r, 2 << 20, 50);
      if (!a.ok()) return a.status();
      FUZZ_CHECK(a->count >= 1 && a->count <= 1'000'000 && a->size >= 0 && a->size <= (2 << 20) &&
                 a->timeout_s > 0 && a->timeout_s <= 50 && a->interval_s >= 0 &&
                 a->interval_s <= 60);
      return json{{"nid", a->nid.to_string()}};
    });
  }
};

Parts& parts() {
  static Parts* p = new Parts;  // never destroyed: its threads outlive every input
  return *p;
}

void check_reply(const json& reply) {
  FUZZ_CHECK(reply.is_object() && reply.contains("ok") && reply["ok"].is_boolean());
  if (!reply["ok"].get<bool>())
    FUZZ_CHECK(reply["error"].is_string() && !reply["error"].get<std::string>().empty());
  (void)admin_line(reply);  // renders whatever bytes the request put in it
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1 << 16) return 0;
  Parts& p = parts();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto emit = [](const json&) { return true; };
  if (in.starts_with("GET /api/v1/")) {
    in.remove_prefix(12);
    std::string path(in.substr(0, in.find('?')));
    std::multimap<std::string, std::string> params;
    if (auto q = in.find('?'); q != std::string_view::npos) {
      std::string_view query = in.substr(q + 1);
      while (!query.empty() && params.size() < 64) {
        std::string_view kv = query.substr(0, query.find('&'));
        auto eq = kv.find('=');
        params.emplace(std::string(kv.substr(0, eq)),
                       eq == std::string_view::npos ? "" : std::string(kv.substr(eq + 1)));
        query.remove_prefix(std::min(query.size(), kv.size() + 1));
      }
    }
    Result<json> r = p.cmds.http_get(path, params);
    if (!r.ok()) FUZZ_CHECK(!r.status().message().empty());
    return 0;
  }
  check_reply(p.cmds.handle_line(in, emit));
  return 0;
}

namespace pfsnet::fuzz {

std::vector<std::vector<uint8_t>> fuzz_seeds() {
  auto v = [](std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  return {
      v(R"({"cmd":"fault_add","action":"drop","src":"198.18.1.1@tcp","dst":"*","type":"BRW_WRITE","rate":10,"health":"PEER_NI_UNREACHABLE"})"),
      v(R"({"cmd":"fault_add","action":"delay","type":"any","interval":2,"latency":0.5})"),
      v(R"({"cmd":"fault_add","action":"corrupt","type":7,"rate":1})"),
      v(R"({"cmd":"diag_rpc","what":"all","node":"127.0.0.3@tcp","interval":"60s"})"),
      v(R"({"cmd":"selftest","from":["127.0.0.2@tcp"],"to":["127.0.0.3@tcp"],"concurrency":[1,8],"size":65536,"duration":1})"),
      v(R"({"cmd":"config_set","set":["lnet.peer_credits=16","stats.rpcPerfNumberSecondIntervals=120"]})"),
      v(R"({"cmd":"config_set","set":["lnet.checksum=false"]})"),
      v(R"({"cmd":"tune","probe":true,"peers":["127.0.0.3@tcp"],"size":1048576})"),
      v(R"({"cmd":"ping","nid":"127.0.0.3@tcp","count":3,"size":4096,"mode":"write","interval":0.1,"timeout":5})"),
      v(R"({"cmd":"nope"})"),
      v("GET /api/v1/diag/rpc?what=size&interval=5m&node=127.0.0.3@tcp"),
      v("GET /api/v1/diag/rpc?what=nonsense&node=x"),
  };
}

}  // namespace pfsnet::fuzz
