// The admin commands of request scheduling: nrs (`pfsnet nrs`, GET /api/v1/nrs) -- the
// policy in force as a server and, under fair, each class's slots and each client's or
// job's requests, bytes and time held -- and nrs_set (`pfsnet nrs --policy P`), which
// changes the policy as `config set rpc.nrs_policy=P` does (one change path; the HTTP
// API, read-only, has no way to it), then shows it.
#include "admin/node_commands.h"
#include "base/live_config.h"

namespace pfsnet {

using nlohmann::json;

namespace {

double ms(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

json class_json(const RequestScheduler::Figures& f, const char* what) {
  json flows = json::array();
  for (const NrsFlowStats& s : f.flows)
    flows.push_back({{"client", s.key.client.to_string()},
                     {"job", s.key.job},
                     {"weight", s.weight},
                     {"requests", s.requests},
                     {"bytes", s.bytes},
                     {"held", s.held},
                     {"held_bytes", s.held_bytes},
                     {"held_ms", ms(s.held_total)},
                     {"held_max_ms", ms(s.held_max)},
                     {"waiting", s.waiting},
                     {"active", s.active}});
  return json{{"handlers", what},
              {"slots", f.options.slots},
              {"active", f.active},
              {"waiting", f.waiting},
              {"flows", flows}};
}

Result<json> nrs(const NodeParts& node) {
  json out;
  const Config cfg = node.cfg.get();
  out["policy"] = nrs_policy_name(node.rpc.request_policy());
  out["reserve"] = cfg.rpc.nrs_reserve;
  out["idle_ms"] = cfg.rpc.nrs_idle_ms;
  json classes = json::array();
  if (auto f = node.rpc.request_policy_figures()) {
    classes.push_back(class_json(f->handlers, "asynchronous and inline"));
    classes.push_back(class_json(f->workers, "worker"));
  }
  out["classes"] = classes;
  return out;
}

Result<json> nrs_set(const NodeParts& node, const json& req) {
  auto it = req.find("policy");
  if (it == req.end() || !it->is_string())
    return Status(Code::kInvalidArgument, "policy: fifo or fair");
  const std::string p = it->get<std::string>();
  if (auto k = parse_nrs_policy(p); !k.ok()) return k.status();
  auto r = node.cfg.set({"rpc.nrs_policy=\"" + p + "\""});
  if (!r.ok()) return r.status();
  auto out = nrs(node);
  if (out.ok()) (*out)["changed"] = !r->changed.empty();
  return out;
}

}  // namespace

void add_nrs_commands(AdminCommands& cmds, const NodeParts& n) {
  using E = const AdminEmit&;
  cmds.add(
      "nrs", [n](const json&, E) { return nrs(n); }, "nrs");
  cmds.add("nrs_set", [n](const json& r, E) { return nrs_set(n, r); });
}

}  // namespace pfsnet
