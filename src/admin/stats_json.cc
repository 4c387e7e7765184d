#include "admin/stats_json.h"

#include <cmath>

namespace pfsnet {

using nlohmann::json;

namespace {

double ms3(double v) { return std::round(v * 1000.0) / 1000.0; }

json intervals(const std::vector<IntervalView>& v) {
  json a = json::array();
  for (const IntervalView& i : v) {
    a.push_back({{"start", i.start},
                 {"count", i.count},
                 {"avg_ms", ms3(i.avg_ms)},
                 {"min_ms", ms3(i.min_ms)},
                 {"max_ms", ms3(i.max_ms)}});
    if (i.count) {
      a.back()["p50_ms"] = ms3(i.p50_ms);
      a.back()["p99_ms"] = ms3(i.p99_ms);
    }
  }
  return a;
}

json stat(const StatView& s, const StatsQuery& q) {
  json j = json::object();
  auto want = [&](Granularity g) { return !q.granularity || *q.granularity == g; };
  if (want(Granularity::kSecond)) j["second"] = intervals(s.seconds);
  if (want(Granularity::kMinute)) j["minute"] = intervals(s.minutes);
  if (want(Granularity::kHour)) j["hour"] = intervals(s.hours);
  if (want(Granularity::kDay)) j["day"] = intervals(s.days);
  return j;
}

}  // namespace

json stats_report_json(const StatsReport& rep, const StatsQuery& q, const NodeNamer& node_name,
                       const NodeNamer& node_nid, const TypeNamer& type_name) {
  using W = StatsQuery::What;
  json j = {{"dropped", {{"stat", rep.dropped_stat}, {"exec", rep.dropped_exec}}}};
  if (q.what == W::kNode || q.what == W::kAll) {
    json nodes = json::array();
    for (const NodeReport& n : rep.nodes) {
      json stats = json::object();
      for (const auto& [k, v] : n.stats) stats[std::string(node_stat_name(k))] = stat(v, q);
      nodes.push_back({{"node", node_name(n.node)}, {"nid", node_nid(n.node)}, {"stats", stats}});
    }
    j["nodes"] = nodes;
  }
  if (q.what == W::kSize || q.what == W::kAll) {
    json sizes = json::array();
    for (const SizeReport& s : rep.sizes)
      sizes.push_back({{"low", s.low}, {"high", s.high}, {"latency", stat(s.latency, q)}});
    j["sizes"] = sizes;
  }
  if (q.what == W::kMessage || q.what == W::kAll) {
    json msgs = json::array();
    for (const MessageReport& m : rep.messages)
      msgs.push_back({{"type", type_name(m.type)}, {"execution", stat(m.execution, q)}});
    j["messages"] = msgs;
  }
  if (q.what == W::kProbe) {
    json probes = json::array();
    for (const ProbeReport& p : rep.probes) {
      json stats = json::object();
      for (const auto& [k, v] : p.stats) stats[std::string(probe_stat_name(k))] = stat(v, q);
      probes.push_back({{"local", node_nid(p.local)},
                        {"peer", node_nid(p.peer)},
                        {"node", node_name(p.peer)},
                        {"stats", stats}});
    }
    j["probes"] = probes;
  }
  return j;
}

Result<StatsQuery> parse_stats_query(
    const json& req, const std::function<Result<Nid>(const std::string&)>& resolve) {
  StatsQuery q;
  std::string what = req.value("what", std::string("node"));
  if (what == "node") {
    q.what = StatsQuery::What::kNode;
  } else if (what == "size") {
    q.what = StatsQuery::What::kSize;
  } else if (what == "message") {
    q.what = StatsQuery::What::kMessage;
  } else if (what == "all") {
    q.what = StatsQuery::What::kAll;
  } else if (what == "mesh") {
    q.what = StatsQuery::What::kProbe;
  } else {
    return Status(
        Code::kInvalidArgument,
        "unknown statistics '" + what + "' (expected node[=NAME], size, message, mesh or all)");
  }
  std::string node = req.value("node", std::string());
  if (!node.empty()) {
    if (q.what != StatsQuery::What::kNode)
      return Status(Code::kInvalidArgument, "a node name goes only with 'node'");
    auto key = resolve(node);
    if (!key.ok()) return key.status();
    q.node = *key;
  }
  std::string iv = req.value("interval", std::string());
  if (!iv.empty()) {
    char unit = iv.back();
    std::string num = iv.substr(0, iv.size() - 1);
    size_t used = 0;
    long long n = 0;
    try {
      n = std::stoll(num, &used);
    } catch (...) {
      used = 0;
    }
    if (num.empty() || used != num.size() || n < 1)
      return Status(Code::kInvalidArgument,
                    "bad interval '" + iv + "' (expected N followed by s, m, h or d, e.g. 60s)");
    switch (unit) {
      case 's':
      case 'S':
        q.granularity = Granularity::kSecond;
        break;
      case 'm':
      case 'M':
        q.granularity = Granularity::kMinute;
        break;
      case 'h':
      case 'H':
        q.granularity = Granularity::kHour;
        break;
      case 'd':
      case 'D':
        q.granularity = Granularity::kDay;
        break;
      default:
        return Status(Code::kInvalidArgument,
                      "bad interval '" + iv + "' (expected N followed by s, m, h or d, e.g. 60s)");
    }
    q.last = static_cast<size_t>(n);
  }
  return q;
}

}  // namespace pfsnet
