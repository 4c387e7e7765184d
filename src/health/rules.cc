#include "health/rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <tuple>

namespace pfsnet {
namespace {

using Key = std::tuple<std::string, std::string, std::string>;
Key key_of(const Problem& p) { return {p.kind, p.subject, p.cause}; }

// "tcp1" of "198.18.2.3@tcp1" ("" when it has no network).
std::string net_of(const std::string& nid) {
  size_t at = nid.find('@');
  return at == std::string::npos ? std::string() : nid.substr(at + 1);
}

// The words of a subject ("NID", "NID (node)", "a -> b (NID -> NID)"), parentheses off.
std::vector<std::string> subject_words(const std::string& subject) {
  std::vector<std::string> out;
  std::istringstream in(subject);
  std::string w;
  while (in >> w) {
    while (!w.empty() && w.front() == '(') w.erase(w.begin());
    while (!w.empty() && w.back() == ')') w.pop_back();
    out.push_back(w);
  }
  return out;
}

// The nodes of a seen_by list ("a, b" or "a,b").
std::vector<std::string> seers_of(const std::string& seen_by) {
  std::vector<std::string> out;
  std::istringstream in(seen_by);
  std::string who;
  while (std::getline(in, who, ',')) {
    while (!who.empty() && who.front() == ' ') who.erase(who.begin());
    if (!who.empty()) out.push_back(who);
  }
  return out;
}

// Whether every seer of `seen_by` (one at least) passes `pred`.
template <typename Pred>
bool all_seers(const std::string& seen_by, Pred pred) {
  std::vector<std::string> v = seers_of(seen_by);
  return !v.empty() && std::all_of(v.begin(), v.end(), pred);
}

}  // namespace

std::vector<Problem> judge(ClusterInputs in) {
  ProblemInputs& own = in.own;
  own.table = in.table;
  // The probe mesh's outliers, over the whole cluster: marked once, for every rule below.
  const std::vector<std::vector<MeshMark>> marks = mark_outliers(in.rows, in.rule);
  if (!in.rows.empty()) {
    own.mesh = &in.rows;
    own.mesh_marks = &marks;
  }
  std::vector<Problem> problems = find_problems(own);
  // The nodes the MGS calls dead or suspect: their NIDs are culprits named already.
  std::vector<std::string> down;
  if (in.table)
    for (const StatusNode& n : in.table->nodes)
      if (down_in_table(n))
        for (const Nid& x : n.nids) down.push_back(x.to_string());
  // The asking node's own findings, fresher than its list on the MGS's board.
  if (!in.found.empty()) {
    merge_cluster_problems(problems, {NodeProblems{own.node, 0, std::move(in.found)}}, "", down);
    sort_problems(problems);
  }
  // Every other node's own list, as the MGS gathered them.
  if (in.others) {
    merge_cluster_problems(problems, *in.others, own.node, down);
    sort_problems(problems);
  }
  drop_consequences(problems);
  // Nodes that cannot reach each other on a network: one partition, not a line per pair.
  std::set<std::string> culprits(down.begin(), down.end());
  for (const Problem& p : problems)
    if (p.kind == "ni" && p.cause == "DOWN")
      culprits.insert(p.subject.substr(0, p.subject.find(' ')));
  fold_partitions(problems, in.rows, culprits, in.rule.min_sent);
  // A link at capacity is busy, not faulty: what its load explains is left out.
  drop_saturated(problems, saturated_nis(in.rows));
  // A node starved of CPU, or a server whose process answers late, is late on every path:
  // what that explains is left out.
  std::map<std::string, std::vector<std::string>> nids_of;
  if (in.table)
    for (const StatusNode& n : in.table->nodes)
      for (const Nid& x : n.nids) nids_of[n.name].push_back(x.to_string());
  for (const NiInfo& i : own.nis) nids_of[own.node].push_back(i.nid.to_string());
  drop_slow_nodes(problems, nids_of);
  // One node alone finding fault with a peer others reach fine: the observer's problem.
  attribute_to_observers(problems, in.rows, marks, in.rule.min_sent);
  sort_problems(problems);
  if (!in.mgs_error.empty())
    problems.insert(
        problems.begin(),  // first: what follows may be partial
        Problem{"mgs", "MGS", "UNREACHABLE", own.node, 0,
                "its table could not be had, so dead nodes are not listed: " + in.mgs_error, ""});
  return problems;
}

void merge_cluster_problems(std::vector<Problem>& into, const std::vector<NodeProblems>& nodes,
                            const std::string& self, const std::vector<std::string>& down_nids) {
  std::map<Key, size_t> at;
  for (size_t i = 0; i < into.size(); ++i) at.emplace(key_of(into[i]), i);
  for (const NodeProblems& np : nodes) {
    if (np.node == self) continue;
    for (const Problem& p : np.problems) {
      if ((p.kind == "peer_ni" || p.kind == "server") &&
          std::find(down_nids.begin(), down_nids.end(), p.subject) != down_nids.end())
        continue;
      auto [it, fresh] = at.emplace(key_of(p), into.size());
      if (fresh) {
        into.push_back(p);
        if (into.back().seen_by.empty()) into.back().seen_by = np.node;
        continue;
      }
      Problem& have = into[it->second];
      if (have.seen_by.find(np.node) == std::string::npos)
        have.seen_by += (have.seen_by.empty() ? "" : ", ") + np.node;
      if (p.since_unix_ms && (!have.since_unix_ms || p.since_unix_ms < have.since_unix_ms))
        have.since_unix_ms = p.since_unix_ms;
    }
  }
}

void drop_consequences(std::vector<Problem>& v) {
  auto consequence = [](const std::string& cause) {
    return cause == "UNHEALTHY" || cause == "SLOW" || cause == "LOSSY" || cause == "THROTTLED";
  };
  std::set<std::string> down, shaped;
  std::set<std::pair<std::string, std::string>> faulty_ends;  // (node, network)
  for (const Problem& p : v) {
    if (p.kind == "ni" && p.cause == "THROTTLED" && p.subject.find(" (") != std::string::npos)
      shaped.insert(p.subject.substr(0, p.subject.find(' ')));
    bool faulty = p.cause == "DOWN" || p.cause == "SLOW" || p.cause == "LOSSY" ||
                  p.cause == "THROTTLED";  // an NI UNHEALTHY by errors may be its peers' victim
    if (p.kind != "ni" || !faulty) continue;
    // "NID" (the node's own view, seen by it) or "NID (node)" (the probe mesh's).
    size_t sp = p.subject.find(' ');
    std::string nid = p.subject.substr(0, sp);
    std::string node = sp == std::string::npos
                           ? p.seen_by
                           : p.subject.substr(sp + 2, p.subject.size() - sp - 3);  // "(node)"
    if (p.cause == "DOWN" && sp == std::string::npos) down.insert(nid);
    faulty_ends.insert({node, net_of(nid)});
  }
  // Whether a word of the subject ("NID", "NID (node)", "a -> b (NID -> NID)") is a down NI.
  auto names_down = [&](const std::string& subject) {
    for (const std::string& w : subject_words(subject))
      if (down.count(w)) return true;
    return false;
  };
  std::set<std::string> faulty_nodes;
  for (const auto& [node, net] : faulty_ends) faulty_nodes.insert(node);
  // A path ("a -> b (NID -> NID)") measured slow or throttled to or from a node with a
  // faulty NI: that node's traffic has moved to its other NIs, which the mesh's bulk
  // probes then share.
  auto path_of_faulty_node = [&](const Problem& p) {
    if (p.kind != "path" || (p.cause != "SLOW" && p.cause != "THROTTLED")) return false;
    std::istringstream in(p.subject);
    std::string a, arrow, b;
    in >> a >> arrow >> b;
    return faulty_nodes.count(a) != 0 || faulty_nodes.count(b) != 0;
  };
  std::erase_if(v, [&](const Problem& p) {
    if (!consequence(p.cause)) return false;
    if (names_down(p.subject) || path_of_faulty_node(p)) return true;
    if (p.kind == "peer_ni" && p.cause == "LOSSY" && shaped.count(p.subject) &&
        seers_of(p.seen_by).size() == 1)
      return true;
    return p.kind == "peer_ni" && faulty_ends.count({p.seen_by, net_of(p.subject)}) != 0;
  });
}

std::map<std::string, std::string> saturated_nis(const std::vector<MeshRow>& rows) {
  std::map<std::string, std::string> out;
  for (const MeshRow& r : rows)
    for (const MeshNi& n : r.nis) {
      if (n.speed_mbit == 0) continue;
      double capacity = double(n.speed_mbit) * 1e6 / 8 / double(1 << 20);  // MiB/s
      if (std::max(n.tx_mib_s, n.rx_mib_s) >= kSaturatedShare * capacity)
        out[n.nid.to_string()] = r.from;
    }
  return out;
}

namespace {

// Leaves out the problems with one of `causes` that the culprit NIs (NID -> node) explain:
// those naming one (as the subject, or one end of a path), and the peer NIs whose every
// seer is explained on that network (`seer_explained(node, network)`).
template <typename SeerExplained>
void drop_explained(std::vector<Problem>& v, const std::map<std::string, std::string>& culprits,
                    const std::set<std::string>& causes, SeerExplained seer_explained) {
  if (culprits.empty()) return;
  std::erase_if(v, [&](const Problem& p) {
    if (!causes.count(p.cause)) return false;
    for (const std::string& w : subject_words(p.subject))
      if (culprits.count(w)) return true;
    return p.kind == "peer_ni" && all_seers(p.seen_by, [&](const std::string& who) {
             return seer_explained(who, net_of(p.subject));
           });
  });
}

}  // namespace

void drop_saturated(std::vector<Problem>& v, const std::map<std::string, std::string>& saturated) {
  std::set<std::pair<std::string, std::string>> busy_ends;  // (node, network)
  for (const auto& [nid, node] : saturated) busy_ends.insert({node, net_of(nid)});
  // Seen so only from busy ends of its network: each seer's own link is full.
  drop_explained(v, saturated, {"SLOW", "LOSSY", "THROTTLED", "UNHEALTHY"},
                 [&](const std::string& who, const std::string& net) {
                   return busy_ends.count({who, net}) != 0;
                 });
}

void drop_slow_nodes(std::vector<Problem>& v,
                     const std::map<std::string, std::vector<std::string>>& nids_of) {
  // Starved nodes first: what they explain includes their SERVER lines.
  std::map<std::string, std::string> culprits;  // NID -> node
  std::set<std::string> starved;
  for (const Problem& p : v)
    if (p.kind == "node" && p.cause == "CPU") starved.insert(p.subject);
  for (const std::string& node : starved)
    if (auto it = nids_of.find(node); it != nids_of.end())
      for (const std::string& nid : it->second) culprits[nid] = node;
  drop_explained(v, culprits, {"SLOW", "LOSSY", "THROTTLED", "UNHEALTHY", "SERVER"},
                 [&](const std::string& who, const std::string&) { return starved.count(who); });
  // Then servers that answer late: every NID of the node a SERVER line names.
  culprits.clear();
  std::set<std::string> late;
  for (const Problem& p : v) {
    if (p.kind != "server" || p.cause != "SERVER") continue;
    for (const auto& [node, nids] : nids_of)
      if (std::find(nids.begin(), nids.end(), p.subject) != nids.end()) {
        late.insert(node);
        for (const std::string& nid : nids) culprits[nid] = node;
      }
  }
  drop_explained(v, culprits, {"SLOW", "LOSSY", "THROTTLED", "UNHEALTHY"},
                 [&](const std::string& who, const std::string&) { return late.count(who); });
}

void attribute_to_observers(std::vector<Problem>& v, const std::vector<MeshRow>& rows,
                            const std::vector<std::vector<MeshMark>>& marks,
                            uint32_t min_answered) {
  // Per probed NI: the nodes whose probes reach it fine, and those whose cells stand out.
  std::map<std::string, std::set<std::string>> fine, marked;
  // Per (node, network): the node's own NI there, from its cells.
  std::map<std::pair<std::string, std::string>, std::string> own_ni;
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < rows[i].cells.size(); ++j) {
      const MeshCell& c = rows[i].cells[j];
      std::string peer = c.peer.to_string();
      std::string local = c.local.to_string();
      own_ni.try_emplace({rows[i].from, net_of(local)}, local);
      bool bad = i < marks.size() && j < marks[i].size() && marks[i][j].any();
      if (bad)
        marked[peer].insert(rows[i].from);
      else if (c.rtt_count >= min_answered)
        fine[peer].insert(rows[i].from);
    }
  // Who else finds fault with an NI in the list itself.
  std::map<std::string, std::set<std::string>> blamed_by;
  for (const Problem& p : v)
    if (p.kind == "peer_ni")
      for (const std::string& who : seers_of(p.seen_by)) blamed_by[p.subject].insert(who);
  struct Mine {
    size_t at;  // index of the observer's entry in `out`
    std::vector<std::string> peers;
    std::set<std::string> fine_by;
  };
  std::vector<Problem> out;
  std::map<std::tuple<std::string, std::string, std::string>, Mine> mine;  // observer, net, cause
  for (Problem& p : v) {
    // A server's views (SERVER: it answered late) whose every seer's mesh probes now reach it
    // fine, as more than kFineViews nodes' do: older than the probes (a starved server given
    // its CPU back, still in its peers' windows). Left out.
    if (p.kind == "server" && p.cause == "SERVER" && fine[p.subject].size() > kFineViews &&
        all_seers(p.seen_by, [&](const std::string& who) { return fine[p.subject].count(who); }))
      continue;
    bool single = p.seen_by.find(',') == std::string::npos && !p.seen_by.empty();
    if (p.kind != "peer_ni" || (p.cause != "SLOW" && p.cause != "UNHEALTHY") || !single) {
      out.push_back(std::move(p));
      continue;
    }
    const std::string& x = p.seen_by;
    // The observer's own probes reach it fine too: its view is older than its probes (a
    // fault that has healed, still in its window). Left out.
    if (fine[p.subject].count(x) && fine[p.subject].size() > kFineViews) continue;
    std::set<std::string> ok;
    for (const std::string& n : fine[p.subject])
      if (n != x) ok.insert(n);
    bool others_blame = false;
    for (const std::string& n : marked[p.subject]) others_blame |= n != x;
    for (const std::string& n : blamed_by[p.subject]) others_blame |= n != x;
    auto ni = own_ni.find({x, net_of(p.subject)});
    if (ok.size() < kFineViews || others_blame || ni == own_ni.end()) {
      out.push_back(std::move(p));
      continue;
    }
    auto key = std::make_tuple(x, net_of(p.subject), p.cause);
    auto it = mine.find(key);
    if (it == mine.end()) {
      it = mine.emplace(key, Mine{out.size(), {}, {}}).first;
      out.push_back(
          Problem{"ni", ni->second + " (" + x + ")", p.cause, x, p.since_unix_ms, "", ""});
    }
    Problem& q = out[it->second.at];
    if (p.since_unix_ms && (!q.since_unix_ms || p.since_unix_ms < q.since_unix_ms))
      q.since_unix_ms = p.since_unix_ms;
    it->second.peers.push_back(p.subject + " (" + p.evidence + ")");
    it->second.fine_by.insert(ok.begin(), ok.end());
  }
  for (const auto& [key, m] : mine) {
    std::string peers, by;
    for (const std::string& s : m.peers) peers += (peers.empty() ? "" : "; ") + s;
    for (const std::string& s : m.fine_by) by += (by.empty() ? "" : ",") + s;
    out[m.at].evidence = std::get<0>(key) + " alone sees " + std::to_string(m.peers.size()) +
                         " peer NI(s) " + std::get<2>(key) + ", which " + by +
                         " reach fine: the trouble is at its end -- " + peers;
  }
  v = std::move(out);
}

void fold_partitions(std::vector<Problem>& v, const std::vector<MeshRow>& rows,
                     const std::set<std::string>& culprits, uint32_t min_sent) {
  struct Net {
    std::map<std::string, std::string> parent;  // union-find over node names
    std::vector<std::pair<std::string, std::string>> cut;
    std::map<std::string, std::string> node_of;  // NID -> node
  };
  std::map<std::string, Net> nets;
  auto find = [](Net& n, std::string x) {
    while (n.parent[x] != x) x = n.parent[x] = n.parent[n.parent[x]];
    return x;
  };
  for (const MeshRow& r : rows)
    for (const MeshCell& c : r.cells) {
      std::string local = c.local.to_string(), peer = c.peer.to_string();
      if (culprits.count(local) || culprits.count(peer)) continue;
      Net& n = nets[net_of(local)];
      n.node_of[local] = r.from;
      n.node_of[peer] = c.to;
      for (const std::string& x : {r.from, c.to}) n.parent.try_emplace(x, x);
      if (c.rtt_count > 0)
        n.parent[find(n, r.from)] = find(n, c.to);
      else if (c.sent >= min_sent)
        n.cut.push_back({r.from, c.to});
    }
  for (auto& entry : nets) {  // (not a structured binding: the lambdas below capture them)
    const std::string& name = entry.first;
    Net& n = entry.second;
    std::set<std::pair<std::string, std::string>> crossing;
    std::set<std::string> seers;
    for (const auto& [a, b] : n.cut)
      if (find(n, a) != find(n, b)) {
        crossing.insert({std::min(a, b), std::max(a, b)});
        seers.insert(a);
      }
    if (crossing.empty()) continue;
    std::map<std::string, std::vector<std::string>> sides;
    for (const auto& [node, _] : n.parent) sides[find(n, node)].push_back(node);
    std::vector<std::vector<std::string>> ordered;
    for (auto& [_, members] : sides) ordered.push_back(members);
    std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
      return a.size() != b.size() ? a.size() > b.size() : a < b;
    });
    std::string text, by;
    for (const auto& side : ordered) {
      std::string s;
      for (const std::string& m : side) s += (s.empty() ? "" : ",") + m;
      text += (text.empty() ? "" : " | ") + s;
    }
    for (const std::string& w : seers) by += (by.empty() ? "" : ",") + w;
    // What it explains: problems across it, and the mesh's culprits on this network.
    auto side_of = [&](const std::string& node) {
      return n.parent.count(node) ? find(n, node) : std::string();
    };
    auto across = [&](const std::string& a, const std::string& b) {
      std::string sa = side_of(a), sb = side_of(b);
      return !sa.empty() && !sb.empty() && sa != sb;
    };
    std::erase_if(v, [&](const Problem& p) {
      if (p.cause != "UNHEALTHY" && p.cause != "LOSSY" && p.cause != "SLOW" &&
          p.cause != "THROTTLED")
        return false;
      std::istringstream in(p.subject);
      std::string first;
      in >> first;
      if (p.kind == "peer_ni") {
        if (net_of(p.subject) != name || !n.node_of.count(p.subject)) return false;
        const std::string& of = n.node_of[p.subject];
        return all_seers(p.seen_by, [&](const std::string& who) { return across(who, of); });
      }
      if (p.kind == "path") {  // "a -> b (NID -> NID)"
        std::string arrow, b, nid;
        in >> arrow >> b >> nid;
        if (!nid.empty() && nid.front() == '(') nid.erase(nid.begin());
        return net_of(nid) == name && across(first, b);
      }
      if (p.kind == "ni" && p.subject.find(" (") != std::string::npos)  // the mesh's culprit
        return net_of(first) == name && n.node_of.count(first) &&
               !side_of(n.node_of[first]).empty() && p.cause != "THROTTLED";
      return false;
    });
    v.push_back(Problem{"network", name, "PARTITION", by, 0,
                        fmt::format("{} is split in {}: {} -- {} probed path(s) between the "
                                    "sides answered none of their probes",
                                    name, ordered.size(), text, crossing.size()),
                        ""});
  }
}

}  // namespace pfsnet
