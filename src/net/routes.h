// Routes (LNet's `lnetctl route`): which routers reach a network this node has no NI on,
// and the choice among them. A pure core: RouteTable holds the routes as the config and
// `pfsnet route add/del` leave them, choose_route() picks one for a frame from what the
// Net sees of each gateway. Net (net_router.cc) is the shell that locks and asks.
//
// The choice, LNet's order: only a gateway that is usable (its NI reachable, not backing
// off a failed connect, not declared dead, and -- once router pings have run -- alive with
// its far side), then the lowest priority, then the fewest hops, then the healthiest
// gateway NI, then the most credits, then the one used longest ago: several equal gateways
// share the load.
// Thread safety: RouteTable is a plain value (Net locks it); choose_route is a function.
#pragma once

#include <pfsnet/config.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pfsnet {

// What the Net sees of one route's gateway when a frame is to go.
struct GatewayView {
  bool usable = true;   // see above
  int health = 1000;    // the gateway NI's health, less the penalty of a degraded NI
  int64_t credits = 0;  // credits free on the path to it (negative: messages queued)
  uint64_t last_used = 0;
};

// The index in `views` (one per candidate route, in the same order as `routes`) of the
// route a frame takes; nullopt when no gateway is usable.
std::optional<size_t> choose_route(std::span<const RouteConfig> routes,
                                   std::span<const GatewayView> views);

class RouteTable {
 public:
  // Adds a route; kInvalidArgument when one to the same network via the same gateway is
  // there (`replace`: it takes the new hops and priority instead).
  Status add(const RouteConfig& r, bool replace = false);
  // Removes the route to `net` via `gateway`, or every route to `net` without one.
  // kNotFound when there was none.
  Status del(uint32_t net, const std::optional<Nid>& gateway);
  // The routes to `net` (none: empty), in the order they were added.
  std::vector<RouteConfig> to(uint32_t net) const;
  // Every route, by network and then in the order added.
  std::vector<RouteConfig> all() const;
  bool empty() const { return routes_.empty(); }
  // Whether any route names `gateway` (a frame from it is a router's).
  bool is_gateway(const Nid& gateway) const;

 private:
  std::vector<RouteConfig> routes_;
};

}  // namespace pfsnet
