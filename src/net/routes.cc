#include "net/routes.h"

#include <algorithm>
#include <tuple>

namespace pfsnet {

std::optional<size_t> choose_route(std::span<const RouteConfig> routes,
                                   std::span<const GatewayView> views) {
  std::optional<size_t> best;
  // Lexicographic, smaller is better: priority, hops, less health, fewer credits, used
  // more lately.
  auto key = [&](size_t i) {
    return std::make_tuple(routes[i].priority, routes[i].hops, -views[i].health, -views[i].credits,
                           views[i].last_used);
  };
  for (size_t i = 0; i < routes.size() && i < views.size(); ++i) {
    if (!views[i].usable) continue;
    if (!best || key(i) < key(*best)) best = i;
  }
  return best;
}

Status RouteTable::add(const RouteConfig& r, bool replace) {
  for (RouteConfig& o : routes_)
    if (o.net == r.net && o.gateway == r.gateway) {
      if (!replace)
        return Status(Code::kInvalidArgument, "a route to " + lnet_net_name(r.net) + " via " +
                                                  r.gateway.to_string() + " exists already");
      o = r;
      return Status::Ok();
    }
  routes_.push_back(r);
  return Status::Ok();
}

Status RouteTable::del(uint32_t net, const std::optional<Nid>& gateway) {
  auto n = std::erase_if(routes_, [&](const RouteConfig& r) {
    return r.net == net && (!gateway || r.gateway == *gateway);
  });
  if (n == 0)
    return Status(Code::kNotFound, "no route to " + lnet_net_name(net) +
                                       (gateway ? " via " + gateway->to_string() : std::string()));
  return Status::Ok();
}

std::vector<RouteConfig> RouteTable::to(uint32_t net) const {
  std::vector<RouteConfig> v;
  for (const RouteConfig& r : routes_)
    if (r.net == net) v.push_back(r);
  return v;
}

std::vector<RouteConfig> RouteTable::all() const {
  std::vector<RouteConfig> v = routes_;
  std::stable_sort(v.begin(), v.end(),
                   [](const RouteConfig& a, const RouteConfig& b) { return a.net < b.net; });
  return v;
}

bool RouteTable::is_gateway(const Nid& gateway) const {
  return std::any_of(routes_.begin(), routes_.end(),
                     [&](const RouteConfig& r) { return r.gateway == gateway; });
}

}  // namespace pfsnet
