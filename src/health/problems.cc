#include "health/problems.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace pfsnet {

const std::vector<std::string>& problem_causes() {
  static const std::vector<std::string> causes = {
      "UNREACHABLE", "DEAD", "DOWN",      "PARTITION", "SUSPECT", "ROUTER",   "CPU",     "LOSSY",
      "SLOW",        "MTU",  "THROTTLED", "UNHEALTHY", "SERVER",  "SLOW_OPS", "SETTINGS"};
  return causes;
}

namespace {

int severity(const std::string& cause) {
  const std::vector<std::string>& order = problem_causes();
  return static_cast<int>(std::find(order.begin(), order.end(), cause) - order.begin());
}

// "health 800; errors PEER_NI_UNREACHABLE 2, ...; 3 recovery pings unanswered".
std::string health_evidence(const NiInfo& i) {
  std::string s = fmt::format("health {}", i.health);
  std::string errs;
  for (int k = 1; k < kNumHealthKinds; ++k)
    if (i.errors[k])
      errs += fmt::format("{}{} {}", errs.empty() ? "" : ", ",
                          health_kind_name(static_cast<HealthKind>(k)), i.errors[k]);
  if (!errs.empty()) s += "; errors " + errs;
  if (i.recovery_pings) s += fmt::format("; {} recovery ping(s) unanswered", i.recovery_pings);
  return s;
}

const char* mark_cause(const MeshMark& m) {
  return m.lossy ? "LOSSY" : m.slow ? "SLOW" : "THROTTLED";
}

}  // namespace

std::vector<Problem> find_problems(const ProblemInputs& in) {
  std::vector<Problem> out;
  auto add = [&](std::string kind, std::string subject, std::string cause, int64_t since,
                 std::string evidence) {
    out.push_back({std::move(kind), std::move(subject), std::move(cause), in.node, since,
                   std::move(evidence), ""});
  };
  // Nodes the MGS calls dead or suspect (down_in_table: not one on a report it is still
  // checking -- during a split network every report across the split made a node SUSPECT
  // for a moment); their NIDs, whose own troubles follow from it.
  std::set<Nid> culprit_nids;
  if (in.table)
    for (const StatusNode& n : in.table->nodes) {
      if (!down_in_table(n)) continue;
      for (const Nid& x : n.nids) culprit_nids.insert(x);
      add("node", n.name, n.state == NodeState::kDead ? "DEAD" : "SUSPECT", n.last_change_unix_ms,
          fmt::format("last heard {:.1f} s ago (by {}), as the MGS {} says",
                      double(n.last_heard_ago_ms) / 1000.0,
                      n.heard_by_report ? "a server's report" : "its ping",
                      in.table->mgs.to_string()));
    }
  // Gateways this node does not use, one line each, with what that cuts off: a network
  // none of whose gateways is usable. Not one whose local NI is down (that NI's DOWN says
  // it), nor one the MGS calls dead (its DEAD does).
  {
    std::map<uint32_t, bool> reachable;  // network -> some gateway to it is usable
    for (const RouteInfo& r : in.routes) reachable[r.route.net] |= r.usable;
    std::map<Nid, std::vector<const RouteInfo*>> by_gw;
    for (const RouteInfo& r : in.routes)
      if (!r.usable && !r.state.starts_with("no local NI up") &&
          !culprit_nids.count(r.route.gateway))
        by_gw[r.route.gateway].push_back(&r);
    for (const auto& [gw, rs] : by_gw) {
      std::string cut, still;
      for (const RouteInfo* r : rs)
        (reachable[r->route.net] ? still : cut) += (reachable[r->route.net] ? still : cut).empty()
                                                       ? lnet_net_name(r->route.net)
                                                       : ", " + lnet_net_name(r->route.net);
      std::string ev = "not used: " + rs.front()->state;
      if (!cut.empty()) ev += "; cut off from " + cut + " (no other gateway is usable)";
      if (!still.empty()) ev += "; " + still + " still reached through other gateways";
      add("router", gw.to_string(), "ROUTER", rs.front()->since_unix_ms, ev);
    }
  }
  if (in.cpu_starved) add("node", in.node, "CPU", in.cpu_since_unix_ms, in.cpu_evidence);
  if (in.slow_ops) add("node", in.node, "SLOW_OPS", in.slow_ops->first, in.slow_ops->second);
  for (const NiInfo& i : in.nis) {
    std::string nid = i.nid.to_string();
    if (!i.up)
      add("ni", nid, "DOWN", i.last_change_unix_ms, "its link is down; " + health_evidence(i));
    else if (i.health < kMaxHealth)
      add("ni", nid, "UNHEALTHY", i.last_change_unix_ms, health_evidence(i));
    if (!i.degraded.empty())
      add("ni", nid, i.degraded, i.degraded_since_unix_ms, i.degraded_evidence);
  }
  for (const NiInfo& i : in.peers) {
    if (culprit_nids.count(i.nid) || culprit_nids.count(i.peer)) continue;
    std::string nid = i.nid.to_string();
    if (i.health < kMaxHealth)
      add("peer_ni", nid, "UNHEALTHY", i.last_change_unix_ms, health_evidence(i));
    if (i.degraded == "SERVER")
      add("server", i.peer.to_string(), i.degraded, i.degraded_since_unix_ms,
          "seen on " + nid + ": " + i.degraded_evidence);
    else if (!i.degraded.empty())
      add("peer_ni", nid, i.degraded, i.degraded_since_unix_ms, i.degraded_evidence);
  }
  if (in.mesh && in.mesh_marks) {
    // Per NI: the mesh cells it is in (as the prober's NI or the probed one) and those that
    // stand out, by cause. Cells to or from a dead or suspect node are the node's problem.
    struct Tally {
      int cells = 0, marked = 0, lossy = 0, slow = 0, throttled = 0;
      std::string node;
      std::set<std::string> seen_by;
    };
    std::map<Nid, Tally> nis;
    auto skip = [&](const MeshCell& c) {
      return culprit_nids.count(c.peer) != 0 || culprit_nids.count(c.local) != 0;
    };
    const std::vector<MeshRow>& rows = *in.mesh;
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t j = 0; j < rows[i].cells.size(); ++j) {
        const MeshCell& c = rows[i].cells[j];
        const MeshMark& m = (*in.mesh_marks)[i][j];
        if (skip(c)) continue;
        for (const auto& [nid, node] :
             {std::pair{c.local, rows[i].from}, std::pair{c.peer, c.to}}) {
          Tally& t = nis[nid];
          t.node = node;
          ++t.cells;
          if (!m.any()) continue;
          ++t.marked;
          t.lossy += m.lossy;
          t.slow += m.slow;
          t.throttled += m.throttled;
          t.seen_by.insert(rows[i].from);
        }
      }
    std::set<Nid> named;
    for (const auto& [nid, t] : nis) {
      if (t.marked < 2 || 2 * t.marked < t.cells) continue;
      named.insert(nid);
      const char* cause = t.lossy >= t.slow && t.lossy >= t.throttled ? "LOSSY"
                          : t.slow >= t.throttled                     ? "SLOW"
                                                                      : "THROTTLED";
      std::string seen;
      for (const std::string& n : t.seen_by) seen += (seen.empty() ? "" : ",") + n;
      add("ni", nid.to_string() + " (" + t.node + ")", cause, 0,
          fmt::format("probe mesh: {} of the {} probed paths through it stand out ({} SLOW, "
                      "{} LOSSY, {} THROTTLED)",
                      t.marked, t.cells, t.slow, t.lossy, t.throttled));
      out.back().seen_by = seen;
    }
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t j = 0; j < rows[i].cells.size(); ++j) {
        const MeshCell& c = rows[i].cells[j];
        const MeshMark& m = (*in.mesh_marks)[i][j];
        if (!m.any() || skip(c) || named.count(c.local) || named.count(c.peer)) continue;
        add("path",
            rows[i].from + " -> " + c.to + " (" + c.local.to_string() + " -> " +
                c.peer.to_string() + ")",
            mark_cause(m), 0, "probe mesh: " + m.reason);
        out.back().seen_by = rows[i].from;
      }
  }
  if (in.mesh) {
    // MTUs that differ on one link (TCP's MSS hides them from every other figure).
    for (const MtuOutlier& o : mtu_outliers(*in.mesh)) {
      if (culprit_nids.count(o.nid)) continue;
      std::string seen;
      for (const std::string& n : o.seen_by) seen += (seen.empty() ? "" : ",") + n;
      add("ni", o.nid.to_string() + " (" + o.node + ")", "MTU", 0,
          o.usual ? fmt::format("probe mesh: MTU {} on a link where {} of its {} NIs have {}",
                                o.mtu, o.with_usual, o.on_link, o.usual)
                  : fmt::format("probe mesh: MTU {} on a link whose {} NIs do not agree on one "
                                "(which end is wrong cannot be told)",
                                o.mtu, o.on_link));
      out.back().seen_by = seen;
    }
  }
  for (const TuneProblem& p : in.settings) {
    add("settings", p.peer.empty() ? in.node : p.peer, "SETTINGS", 0, p.text);
    out.back().code = p.code;
  }
  // Certificates about to expire, or expired: the node's own stops being accepted by its
  // peers, the CA's stops every node's.
  constexpr int64_t kDayMs = 86'400'000;
  for (const CertificateInForce& c : in.certificates) {
    const int64_t left = c.not_after_unix_ms - in.now_unix_ms;
    if (c.not_after_unix_ms == 0 || left > kCertificateWarningDays * kDayMs) continue;
    const std::string what =
        c.setting + " " + c.file + (c.subject.empty() ? "" : " (CN " + c.subject + ")");
    const std::string then = format_unix_ms(c.not_after_unix_ms);
    const std::string whose = c.setting == "tls.ca_file"
                                  ? "every certificate it signed stops being accepted"
                                  : "peers stop accepting this node";
    add("settings", in.node, "SETTINGS", c.not_after_unix_ms - kCertificateWarningDays * kDayMs,
        left > 0
            ? fmt::format("{} expires in {} day(s), at {}: then {}; renew it and restart "
                          "pfsnetd",
                          what, (left + kDayMs - 1) / kDayMs, then, whose)
            : fmt::format("{} expired at {}: {}; renew it and restart pfsnetd", what, then, whose));
    out.back().code = left > 0 ? "certificate_expires" : "certificate_expired";
  }
  sort_problems(out);
  return out;
}

void sort_problems(std::vector<Problem>& v) {
  std::stable_sort(v.begin(), v.end(), [](const Problem& a, const Problem& b) {
    int sa = severity(a.cause), sb = severity(b.cause);
    if (sa != sb) return sa < sb;
    return a.since_unix_ms < b.since_unix_ms;
  });
}

}  // namespace pfsnet
