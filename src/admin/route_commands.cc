// The admin commands of routes and routers: route_add, route_del, route_show (`pfsnet
// route`, GET /api/v1/routes) and routerstat (`pfsnet routerstat`, GET
// /api/v1/routerstat). Routes added at run time last until the daemon stops ([[route]]
// keeps them across restarts), as `lnetctl route add` does.
#include "admin/node_commands.h"
#include "base/json_fields.h"

namespace pfsnet {

using nlohmann::json;

namespace {

Result<uint32_t> net_field(const json& req) {
  auto it = req.find("net");
  if (it == req.end() || !it->is_string())
    return Status(Code::kInvalidArgument, "net: the remote network, e.g. \"tcp2\"");
  auto n = parse_lnet_net(it->get<std::string>());
  if (!n.ok())
    return Status(Code::kInvalidArgument,
                  "net '" + it->get<std::string>() + "': " + n.status().message());
  return *n;
}

Result<std::optional<Nid>> gateway_field(const json& req, bool required) {
  auto it = req.find("gateway");
  if (it == req.end() || (it->is_string() && it->get<std::string>().empty())) {
    if (required) return Status(Code::kInvalidArgument, "gateway: the router's NID is required");
    return std::optional<Nid>();
  }
  if (!it->is_string()) return Status(Code::kInvalidArgument, "gateway: a NID");
  auto n = Nid::parse(it->get<std::string>());
  if (!n.ok()) return Status(Code::kInvalidArgument, "gateway: " + n.status().message());
  return std::optional<Nid>(*n);
}

Result<json> route_add(const NodeParts& node, const json& req) {
  auto net = net_field(req);
  if (!net.ok()) return net.status();
  auto gw = gateway_field(req, true);
  if (!gw.ok()) return gw.status();
  auto hops = json_int(req, "hops", 1, 1, kMaxRouteHops);
  if (!hops.ok()) return hops.status();
  auto prio = json_int(req, "priority", 0, 0, kMaxRoutePriority);
  if (!prio.ok()) return prio.status();
  RouteConfig r{.net = *net, .gateway = **gw, .hops = *hops, .priority = *prio};
  if (Status s = node.net.add_route(r, req.value("replace", false)); !s.ok()) return s;
  return json{{"added",
               {{"net", lnet_net_name(r.net)},
                {"gateway", r.gateway.to_string()},
                {"hops", r.hops},
                {"priority", r.priority}}}};
}

Result<json> route_del(const NodeParts& node, const json& req) {
  auto net = net_field(req);
  if (!net.ok()) return net.status();
  auto gw = gateway_field(req, false);
  if (!gw.ok()) return gw.status();
  if (Status s = node.net.del_route(*net, *gw); !s.ok()) return s;
  return json{
      {"deleted",
       {{"net", lnet_net_name(*net)}, {"gateway", *gw ? (*gw)->to_string() : std::string()}}}};
}

Result<json> route_show(const NodeParts& node) {
  json a = json::array();
  for (const RouteInfo& i : node.net.routes())
    a.push_back({{"net", lnet_net_name(i.route.net)},
                 {"gateway", i.route.gateway.to_string()},
                 {"hops", i.route.hops},
                 {"priority", i.route.priority},
                 {"usable", i.usable},
                 {"state", i.state},
                 {"connected", i.connected},
                 {"health", i.health},
                 {"credits", i.credits},
                 {"sent", i.sent},
                 {"queued", i.queued},
                 {"since_unix_ms", i.since_unix_ms}});
  return json{{"routes", a}, {"routing", node.net.router_stats().routing}};
}

}  // namespace

json router_stats_json(const RouterStats& s) {
  json pools = json::array();
  for (size_t i = 0; i < kRouterPools; ++i) {
    const RouterPoolStats& p = s.pools[i];
    pools.push_back({{"pool", router_pool_name(RouterPool(i))},
                     {"buffers", p.buffers},
                     {"in_use", p.in_use},
                     {"min_free", p.min_free},
                     {"queued", p.queued},
                     {"waits", p.waits}});
  }
  return json{{"routing", s.routing},
              {"forwarded", s.forwarded},
              {"forwarded_bytes", s.forwarded_bytes},
              {"dropped",
               {{"no_route", s.dropped_no_route},
                {"failed", s.dropped_failed},
                {"loop", s.dropped_loop},
                {"no_window", s.dropped_no_window},
                {"not_router", s.dropped_not_router}}},
              {"corrupt", s.corrupt},
              {"peer_buffer_credits", s.peer_buffer_credits},
              {"held_bytes", s.held_bytes},
              {"held_bytes_max", s.held_bytes_max},
              {"peer_queued", s.peer_queued},
              {"peer_waits", s.peer_waits},
              {"received_routed", s.received_routed},
              {"sent_routed", s.sent_routed},
              {"pools", pools}};
}

void add_route_commands(AdminCommands& cmds, const NodeParts& n) {
  using E = const AdminEmit&;
  cmds.add("route_add", [n](const json& r, E) { return route_add(n, r); });
  cmds.add("route_del", [n](const json& r, E) { return route_del(n, r); });
  cmds.add(
      "route_show", [n](const json&, E) { return route_show(n); }, "routes");
  cmds.add(
      "routerstat",
      [n](const json&, E) -> Result<json> { return router_stats_json(n.net.router_stats()); },
      "routerstat");
}

}  // namespace pfsnet
