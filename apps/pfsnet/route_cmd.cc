// pfsnet route add|del|show (lnetctl route), pfsnet routes (route show) and pfsnet
// routerstat (LNet's routerstat: what this node forwarded and its buffers).
#include <cinttypes>

#include "cli.h"

namespace pfsnet::cli {

namespace {

struct RouteArgs {
  std::string net, gateway;
  int64_t hops = 1, priority = 0;
  bool replace = false;
};

void print_routes(const json& r) {
  if (r["routes"].empty()) {
    std::printf("no routes%s\n", r.value("routing", false) ? " (this node routes for others)" : "");
    return;
  }
  std::printf("%-8s %-24s %4s %8s %6s %7s %6s %10s  %s\n", "net", "gateway", "hops", "priority",
              "health", "credits", "queued", "sent", "state");
  for (const json& e : r["routes"])
    std::printf("%-8s %-24s %4" PRId64 " %8" PRId64 " %6d %7" PRId64 " %6" PRId64 " %10" PRIu64
                "  %s\n",
                e["net"].get<std::string>().c_str(), e["gateway"].get<std::string>().c_str(),
                e["hops"].get<int64_t>(), e["priority"].get<int64_t>(), e["health"].get<int>(),
                e["credits"].get<int64_t>(), e.value("queued", int64_t{0}),
                e["sent"].get<uint64_t>(), e["state"].get<std::string>().c_str());
  if (r.value("routing", false)) std::printf("this node routes for others (lnet.routing)\n");
}

void print_routerstat(const json& r) {
  if (!r.value("routing", false))
    std::printf("this node does not route for others (lnet.routing = false)\n");
  const json& d = r["dropped"];
  std::printf(
      "forwarded %" PRIu64 " frames, %s; dropped: no route %" PRIu64 ", next hop failed %" PRIu64
      ", loop %" PRIu64 ", not a router %" PRIu64 "; forwarded damaged %" PRIu64 "\n",
      r["forwarded"].get<uint64_t>(), human_bytes(r["forwarded_bytes"].get<uint64_t>()).c_str(),
      d["no_route"].get<uint64_t>(), d["failed"].get<uint64_t>(), d["loop"].get<uint64_t>(),
      d["not_router"].get<uint64_t>(), r["corrupt"].get<uint64_t>());
  std::printf("routed frames: sent %" PRIu64 ", received %" PRIu64 "\n",
              r["sent_routed"].get<uint64_t>(), r["received_routed"].get<uint64_t>());
  if (!r.value("routing", false)) return;
  std::printf("%-6s %8s %7s %8s %7s %10s\n", "pool", "buffers", "in_use", "min_free", "queued",
              "waits");
  for (const json& p : r["pools"])
    std::printf("%-6s %8" PRId64 " %7" PRId64 " %8" PRId64 " %7" PRId64 " %10" PRIu64 "\n",
                p["pool"].get<std::string>().c_str(), p["buffers"].get<int64_t>(),
                p["in_use"].get<int64_t>(), p["min_free"].get<int64_t>(),
                p["queued"].get<int64_t>(), p["waits"].get<uint64_t>());
  std::printf("held to forward: %s now, %s at most\n",
              human_bytes(r["held_bytes"].get<uint64_t>()).c_str(),
              human_bytes(r["held_bytes_max"].get<uint64_t>()).c_str());
  std::printf("peer_buffer_credits %" PRId64 ": %" PRId64
              " frame(s) waiting for their peer's, %" PRIu64 " since start\n",
              r["peer_buffer_credits"].get<int64_t>(), r["peer_queued"].get<int64_t>(),
              r["peer_waits"].get<uint64_t>());
}

int show(Invocation& inv) {
  return request(inv, {{"cmd", "route_show"}}, std::chrono::seconds(10), print_routes);
}

}  // namespace

void add_route(CLI::App& app, Invocation& inv) {
  auto* route = app.add_subcommand(
      "route", "routes to networks this node has no NI on, like lnetctl route (add, del, show)");
  route->require_subcommand(1);
  auto a = std::make_shared<RouteArgs>();
  auto* add = route->add_subcommand(
      "add",
      "route frames for NET through the router GATEWAY (until the daemon stops; "
      "[[route]] in the config keeps it)");
  add->add_option("--net", a->net, "the remote network, e.g. tcp2 or o2ib1")->required();
  add->add_option("--gateway", a->gateway, "the router's NID, on a network of this node")
      ->required();
  add->add_option("--hops", a->hops, "routers on the way (default 1)")
      ->check(CLI::Range(int64_t(1), int64_t(255)));
  add->add_option("--priority", a->priority, "lower is preferred (default 0)")
      ->check(CLI::Range(int64_t(0), int64_t(2147483647)));
  add->add_flag("--replace", a->replace, "change the hops and priority of a route that is there");
  add_json_flag(add, inv);
  add->callback([&inv, a] {
    inv.rc = request(inv,
                     {{"cmd", "route_add"},
                      {"net", a->net},
                      {"gateway", a->gateway},
                      {"hops", a->hops},
                      {"priority", a->priority},
                      {"replace", a->replace}},
                     std::chrono::seconds(10), [](const json& r) {
                       const json& x = r["added"];
                       std::printf("route to %s via %s (hops %" PRId64 ", priority %" PRId64 ")\n",
                                   x["net"].get<std::string>().c_str(),
                                   x["gateway"].get<std::string>().c_str(),
                                   x["hops"].get<int64_t>(), x["priority"].get<int64_t>());
                     });
  });
  auto* del = route->add_subcommand("del", "remove the route to NET via GATEWAY, or every one");
  del->add_option("--net", a->net, "the remote network")->required();
  del->add_option("--gateway", a->gateway, "only this gateway's route (default: every one)");
  add_json_flag(del, inv);
  del->callback([&inv, a] {
    inv.rc =
        request(inv, {{"cmd", "route_del"}, {"net", a->net}, {"gateway", a->gateway}},
                std::chrono::seconds(10), [](const json& r) {
                  const json& x = r["deleted"];
                  std::string gw = x["gateway"].get<std::string>();
                  std::printf("route(s) to %s%s deleted\n", x["net"].get<std::string>().c_str(),
                              gw.empty() ? "" : (" via " + gw).c_str());
                });
  });
  auto* sh = route->add_subcommand(
      "show", "every route: its gateway's state, hops, priority, health, credits, queue and sends");
  add_json_flag(sh, inv);
  sh->callback([&inv] { inv.rc = show(inv); });

  auto* routes = app.add_subcommand("routes", "the same as route show");
  add_json_flag(routes, inv);
  routes->callback([&inv] { inv.rc = show(inv); });

  auto* stat = app.add_subcommand(
      "routerstat",
      "what this node forwarded as a router (frames, bytes, drops) and its buffers per pool");
  add_json_flag(stat, inv);
  stat->callback([&inv] {
    inv.rc = request(inv, {{"cmd", "routerstat"}}, std::chrono::seconds(10), print_routerstat);
  });
}

}  // namespace pfsnet::cli
