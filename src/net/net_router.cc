// Net: routes and routers (LNet's routing). A frame for a NID on a network no local NI is
// on goes to a gateway chosen among the routes to that network (routes.h), carrying its
// two ends in the route extension field (wire/frame.h, ExtType::kRoute); a router
// (lnet.routing) forwards such a frame to its destination when it shares the network, or
// to the next router. Per hop: the frame holds a credit of the connection it came on
// until it has been written on the next one, and a router buffer of its class and one of
// its peer's router credits meanwhile (router_buffers.h). The data checksum is the
// sender's, end to end: a router checks it (to count damage against the hop it came on)
// and forwards the frame as it came either way; the destination refuses a damaged one and
// its sender sends it again. Exactly-once is the destination's (its reply cache): a router
// keeps no RPC state. A router stores and forwards whole frames (the transport delivers
// them whole): a 1 MiB frame waits for its last byte before its first goes on.
#include <algorithm>
#include <deque>

#include "base/log.h"
#include "base/mutex.h"
#include "net/net_internal.h"
#include "net/peer_table.h"
#include "wire/le.h"

namespace pfsnet {

// ---- routes ----

Status Net::add_route(const RouteConfig& r, bool replace) {
  std::vector<NetConfig> nets;
  for (const Nid& n : local_nids_) nets.push_back(NetConfig{.nid = n});
  if (Status s = check_route(r, nets); !s.ok()) return s;
  {
    MutexLock lk(routes_mu_);
    if (Status s = routes_.add(r, replace); !s.ok()) return s;
  }
  PFS_LOG_INFO("route to {} via {} (hops {}, priority {}) {}", lnet_net_name(r.net),
               r.gateway.to_string(), r.hops, r.priority, replace ? "set" : "added");
  return Status::Ok();
}

Status Net::del_route(uint32_t net, const std::optional<Nid>& gateway) {
  {
    MutexLock lk(routes_mu_);
    if (Status s = routes_.del(net, gateway); !s.ok()) return s;
  }
  PFS_LOG_INFO("route to {}{} deleted", lnet_net_name(net),
               gateway ? " via " + gateway->to_string() : std::string());
  return Status::Ok();
}

bool Net::routed(const Nid& nid) const {
  for (const Nid& n : local_nids_)
    if (same_net(n, nid)) return false;
  return true;
}

std::optional<Nid> Net::route_local(const Nid& dst) const {
  std::vector<RouteConfig> routes;
  {
    MutexLock lk(routes_mu_);
    routes = routes_.to(dst.net());
  }
  for (const RouteConfig& r : routes)
    for (const Nid& n : local_nids_)
      if (same_net(n, r.gateway)) return n;
  return std::nullopt;
}

std::vector<Nid> Net::gateways() const {
  std::vector<Nid> v;
  MutexLock lk(routes_mu_);
  for (const RouteConfig& r : routes_.all())
    if (std::find(v.begin(), v.end(), r.gateway) == v.end()) v.push_back(r.gateway);
  return v;
}

void Net::set_gateway_status(const Nid& gw, GatewayStatus s) {
  s.at = clock_.now();
  s.since_unix_ms = unix_ms(clock_.wall_now());
  bool was_answering = true, was_routing = true;
  {
    MutexLock lk(routes_mu_);
    auto it = gateway_status_.find(gw);
    if (it != gateway_status_.end()) {
      const GatewayStatus& o = it->second;
      was_answering = o.answered;
      was_routing = o.routing;
      if (o.answered == s.answered && o.routing == s.routing && o.nis == s.nis)
        s.since_unix_ms = o.since_unix_ms;  // nothing changed: since then
    }
    gateway_status_[gw] = s;
  }
  if (!s.answered && was_answering)
    PFS_LOG_WARN(
        "gateway {} is dead to this node: its router ping failed ({}); routes through "
        "it are not used until it answers",
        gw.to_string(), s.why);
  else if (s.answered && !was_answering)
    PFS_LOG_INFO("gateway {} answers router pings again", gw.to_string());
  if (s.answered && !s.routing && was_routing)
    PFS_LOG_WARN("gateway {} does not route (its lnet.routing is off): not used", gw.to_string());
}

std::vector<std::pair<Nid, bool>> Net::local_ni_states() const {
  std::vector<std::pair<Nid, bool>> v;
  for (const auto& ni : nis_) v.emplace_back(ni->nid, ni->up.load());
  return v;
}

std::string Net::status_problem(const RouteConfig& r, const GatewayStatus& st,
                                TimePoint now) const {
  if (!st.answered)
    return fmt::format("dead: its router ping failed {:.1f} s ago ({})",
                       std::chrono::duration<double>(now - st.at).count(), st.why);
  if (!st.routing) return "it does not route (lnet.routing is off there)";
  if (!opts_.avoid_asym_router_failure) return "";
  // Its far side: an NI on the route's network that is up (one hop), or for a longer route
  // any NI up besides those on this node's networks.
  bool far = false, any_on_net = false;
  std::string down;
  for (const auto& [ni, up] : st.nis) {
    bool on_net = ni.net() == r.net;
    any_on_net |= on_net;
    if (on_net && !up) down += (down.empty() ? "" : ", ") + ni.to_string();
    if (up && (on_net || (r.hops > 1 && routed(ni)))) far = true;
  }
  if (far) return "";
  if (!down.empty())
    return "its NI " + down + " is down: it cannot reach " + lnet_net_name(r.net) +
           " (asymmetric router failure)";
  if (r.hops == 1 && !any_on_net)
    return "it has no NI on " + lnet_net_name(r.net) + " (a route of 1 hop through it)";
  return "none of its NIs beyond this node's networks is up";
}

GatewayView Net::gateway_view(const RouteConfig& r, PeerNi& gw, TimePoint now, std::string* why) {
  GatewayView v;
  v.health = gw.health.selection_value();
  if (gw.dead.load()) {
    v.usable = false;
    if (why) {
      MutexLock lk(dead_mu_);
      *why = "declared dead: " + dead_why_[gw.nid];
    }
    return v;
  }
  // What its last router ping found, judged where it is kept (no copy of it per send).
  // Until its first answer a gateway is taken as up (LNet's default).
  std::string bad;
  {
    MutexLock lk(routes_mu_);
    if (auto it = gateway_status_.find(gw.nid); it != gateway_status_.end())
      bad = status_problem(r, it->second, now);
  }
  if (!bad.empty()) {
    v.usable = false;
    if (why) *why = std::move(bad);
    return v;
  }
  thread_local std::vector<Path*> paths;
  table_->peer_paths(gw, &paths);
  bool any_up = false, any_free = false;
  std::string backoff;
  int64_t credits = INT64_MIN;
  for (Path* p : paths) {
    if (!p->ni->up.load()) continue;
    any_up = true;
    MutexLock lk(p->ni->mu);
    if (p->backing_off(now)) {
      if (backoff.empty())
        backoff = fmt::format("reconnect {} -> {} backs off {:.1f} s more after: {}",
                              p->ni->nid.to_string(), p->pni->nid.to_string(),
                              std::chrono::duration<double>(p->next_connect() - now).count(),
                              p->last_connect_error());
      continue;
    }
    any_free = true;
    int64_t window = p->tx_state ? p->tx_state->tx_credits : peer_credits();
    credits = std::max(credits, std::min(p->ni->tx_credits, window) -
                                    static_cast<int64_t>(p->queue.size() + p->bulk_queue.size()));
  }
  v.credits = credits == INT64_MIN ? 0 : credits;
  v.usable = any_free;
  if (why && !any_free)
    *why = !any_up ? "no local NI up on " + lnet_net_name(gw.nid.net()) : backoff;
  return v;
}

Net::Path* Net::gateway_path(const Nid& dst, Status* err) {
  std::vector<RouteConfig> routes;
  {
    MutexLock lk(routes_mu_);
    routes = routes_.to(dst.net());
  }
  const std::string net_name = lnet_net_name(dst.net());
  if (routes.empty()) {
    // The caller's mistake (or the config's), as a NID on no network of this node was
    // before routes: not worth sending again.
    *err = Status(Code::kInvalidArgument, "no route to " + dst.to_string() + ": no local NI on " +
                                              net_name +
                                              " and no route to it ([[route]], pfsnet route add)");
    return nullptr;
  }
  TimePoint now = clock_.now();
  std::vector<PeerNi*> gws;
  std::vector<GatewayView> views;
  std::vector<std::string> whys(routes.size());
  for (size_t i = 0; i < routes.size(); ++i) {
    PeerNi* gw = table_->get(routes[i].gateway);
    gws.push_back(gw);
    views.push_back(gateway_view(routes[i], *gw, now, &whys[i]));
  }
  {
    MutexLock lk(routes_mu_);
    for (size_t i = 0; i < routes.size(); ++i)
      views[i].last_used = gateway_used_[routes[i].gateway];
  }
  std::optional<size_t> pick = choose_route(routes, views);
  Path* p = pick ? select(*gws[*pick]) : nullptr;
  if (!p) {
    std::string all;
    for (size_t i = 0; i < routes.size(); ++i)
      all += (all.empty() ? "" : "; ") + routes[i].gateway.to_string() + " " +
             (whys[i].empty() ? "has no local NI up" : whys[i]);
    *err = Status(Code::kUnreachable,
                  "no gateway to " + net_name + " for " + dst.to_string() + " is usable: " + all,
                  HealthKind::kPeerNiUnreachable);
    return nullptr;
  }
  MutexLock lk(routes_mu_);
  gateway_used_[routes[*pick].gateway] = ++gateway_turn_;
  return p;
}

std::vector<RouteInfo> Net::routes() {
  std::vector<RouteConfig> all;
  {
    MutexLock lk(routes_mu_);
    all = routes_.all();
  }
  TimePoint now = clock_.now();
  std::vector<RouteInfo> out;
  for (const RouteConfig& r : all) {
    RouteInfo info;
    info.route = r;
    PeerNi* gw = table_->get(r.gateway);
    std::string why;
    GatewayView v = gateway_view(r, *gw, now, &why);
    info.usable = v.usable;
    info.state = v.usable ? "up" : why;
    info.health = v.health;
    info.credits = v.credits;
    info.sent = gw->counters.send_count.load(std::memory_order_relaxed);
    {
      MutexLock lk(routes_mu_);
      if (auto it = gateway_status_.find(r.gateway); it != gateway_status_.end())
        info.since_unix_ms = it->second.since_unix_ms;
    }
    for (Path* p : table_->paths_of(*gw)) {
      MutexLock lk(p->ni->mu);
      info.connected |= p->tx_conn != nullptr;
      info.queued += static_cast<int64_t>(p->queue.size() + p->bulk_queue.size());
    }
    out.push_back(std::move(info));
  }
  return out;
}

RouterStats Net::router_stats() const {
  RouterStats s;
  s.received_routed = received_routed_.load(std::memory_order_relaxed);
  s.sent_routed = sent_routed_.load(std::memory_order_relaxed);
  s.dropped_not_router = dropped_not_router_.load(std::memory_order_relaxed);
  if (!router_) return s;
  RouterState& r = *router_;
  s.routing = true;
  s.forwarded = r.forwarded.load();
  s.forwarded_bytes = r.forwarded_bytes.load();
  s.dropped_no_route = r.no_route.load();
  s.dropped_failed = r.failed.load();
  s.dropped_loop = r.loop.load();
  s.dropped_no_window = r.no_window.load();
  s.corrupt = r.corrupt.load();
  s.held_bytes = r.held_bytes.load();
  s.held_bytes_max = r.held_bytes_max.load();
  MutexLock lk(r.mu);
  for (size_t i = 0; i < kRouterPools; ++i) s.pools[i] = r.buffers.pool(RouterPool(i));
  s.peer_buffer_credits = r.buffers.peer_credits();
  s.peer_queued = r.buffers.peer_queued();
  s.peer_waits = r.buffers.peer_waits();
  return s;
}

// ---- forwarding ----

void Net::forward(Connection& c, ConnState& cs, InFrame&& f, bool corrupt,
                  std::optional<std::array<uint8_t, kDataCrcSize>> seal) {
  RxCredit credit(cs.conn, (f.hdr.flags & kFlagWindowEmpty)
                               ? 1
                               : cs.high_water.load(std::memory_order_relaxed));
  // Named only in a log line (a drop, damage): not formatted for every frame forwarded.
  auto what = [&f] {
    return fmt::format("{} xid {} from {} for {}",
                       f.hdr.kind == FrameKind::kReply ? "reply" : "request", f.hdr.xid,
                       f.hdr.ext.route_src.to_string(), f.hdr.ext.route_dst.to_string());
  };
  if (!router_) {
    dropped_not_router_.fetch_add(1, std::memory_order_relaxed);
    cs.ni->counters.drops.fetch_add(1, std::memory_order_relaxed);
    PFS_LOG_WARN_LIMITED("not a router " + c.describe(),
                         "dropping routed {} that came on {}: this node does not route "
                         "(lnet.routing is off)",
                         what(), c.describe());
    return;
  }
  RouterState& r = *router_;
  if (!(c.wire().features & kFeatureWindow)) {
    r.no_window.fetch_add(1, std::memory_order_relaxed);
    cs.ni->counters.drops.fetch_add(1, std::memory_order_relaxed);
    PFS_LOG_WARN_LIMITED("no window " + c.describe(),
                         "dropping routed {} that came on {}: its peer grants no receive window, "
                         "so nothing would bound what it leaves in this router",
                         what(), c.describe());
    return;
  }
  if (f.hdr.ext.hops >= kMaxFrameHops) {
    r.loop.fetch_add(1, std::memory_order_relaxed);
    cs.ni->counters.drops.fetch_add(1, std::memory_order_relaxed);
    PFS_LOG_WARN_LIMITED("routing loop", "dropping {}: it has crossed {} routers (a routing loop?)",
                         what(), f.hdr.ext.hops);
    return;
  }
  if (corrupt) {
    r.corrupt.fetch_add(1, std::memory_order_relaxed);
    PeerNi& pni = *cs.path->pni;
    cs.ni->counters.count_error(HealthKind::kPeerNiCorrupt);
    pni.counters.count_error(HealthKind::kPeerNiCorrupt);
    lower(pni.health, &pni);
    PFS_LOG_WARN_LIMITED("corrupt " + c.describe(),
                         "routed {} on {} failed its data checksum: forwarded as it came, for "
                         "its destination to refuse",
                         what(), c.describe());
  }
  auto fw = std::make_unique<Forward>();
  fw->net = this;
  fw->from = cs.path->pni;
  fw->credit = std::move(credit);
  fw->bytes = kHeaderSize + f.payload.size() + f.bulk.size();
  fw->pool = router_pool_for(f.payload.size() + f.bulk.size());
  auto out = std::make_unique<OutFrame>();
  out->hdr = f.hdr;
  out->hdr.credits = 0;
  out->hdr.flags &= static_cast<uint8_t>(~kFlagWindowEmpty);
  out->hdr.ext.hops = static_cast<uint8_t>(f.hdr.ext.hops + 1);
  out->payload = Payload(std::move(f.payload));
  if (seal) {  // checked and taken off: it travels on beside the payload, as the sender's did
    std::copy(seal->begin(), seal->end(), out->seal);
    out->sealed = true;
  }
  if (!f.bulk.empty()) out->bulk = make_bulk(std::move(f.bulk));
  out->bulk_crc = f.bulk_crc;
  out->one_stream = false;
  fw->frame = std::move(out);
  const int64_t held = r.held_bytes.fetch_add(int64_t(fw->bytes)) + int64_t(fw->bytes);
  for (int64_t m = r.held_bytes_max.load();
       held > m && !r.held_bytes_max.compare_exchange_weak(m, held);) {
  }
  std::vector<std::unique_ptr<Forward>> go;
  {
    MutexLock lk(r.mu);
    PeerNi* from = fw->from;
    RouterPool pool = fw->pool;
    r.buffers.admit(from, pool, std::move(fw), &go);
  }
  send_forwards(go);
}

void Net::send_forwards(std::vector<std::unique_ptr<Forward>>& go) {
  // A frame that fails at once (its next hop is dead) lets its buffer go to the next
  // waiter, which is sent from here, not from inside this one's completion.
  thread_local std::deque<std::unique_ptr<Forward>>* pending = nullptr;
  if (pending) {
    for (auto& g : go) pending->push_back(std::move(g));
    go.clear();
    return;
  }
  std::deque<std::unique_ptr<Forward>> queue;
  for (auto& g : go) queue.push_back(std::move(g));
  go.clear();
  pending = &queue;
  while (!queue.empty()) {
    std::unique_ptr<Forward> fw = std::move(queue.front());
    queue.pop_front();
    Forward* raw = fw.release();  // owned by its completion from here
    std::unique_ptr<OutFrame> f = std::move(raw->frame);
    const Nid dst = f->hdr.ext.route_dst;
    submit(dst, nullptr, nullptr, false, std::move(f), clock_.now() + opts_.forward_timeout, raw);
  }
  pending = nullptr;
}

void Net::Forward::on_tx_done(const Status& s, const TxTimes& t) {
  (void)t;
  net->forward_done(this, s);
}

void Net::forward_done(Forward* fw, const Status& s) {
  RouterState& r = *router_;
  if (s.ok()) {
    r.forwarded.fetch_add(1, std::memory_order_relaxed);
    r.forwarded_bytes.fetch_add(fw->bytes, std::memory_order_relaxed);
  } else {
    (s.message().starts_with("no route") ? r.no_route : r.failed)
        .fetch_add(1, std::memory_order_relaxed);
    PFS_LOG_WARN_LIMITED("forward failed", "a frame forwarded from {} was not: {}",
                         fw->from->nid.to_string(), s.message());
  }
  std::vector<std::unique_ptr<Forward>> go;
  {
    MutexLock lk(r.mu);
    r.buffers.release(fw->from, fw->pool, &go);
  }
  fw->credit.release();  // the hop it came on may send another
  r.held_bytes.fetch_sub(int64_t(fw->bytes));
  delete fw;
  send_forwards(go);
}

}  // namespace pfsnet
