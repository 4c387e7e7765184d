#include "net/peer_table.h"

#include <algorithm>

namespace pfsnet {

Net::PeerNi* Net::PeerTable::find(const Nid& nid) const {
  ReaderLock lk(mu_);
  auto it = peer_nis_.find(nid);
  return it == peer_nis_.end() ? nullptr : it->second.get();
}

Net::PeerNi* Net::PeerTable::get(const Nid& nid) {
  if (PeerNi* p = find(nid)) return p;
  WriterLock lk(mu_);
  return create_locked(nid);
}

Net::PeerNi* Net::PeerTable::create_locked(const Nid& nid) {
  auto& slot = peer_nis_[nid];
  if (slot) return slot.get();
  slot = std::make_unique<PeerNi>(nid, clock_.now(), unix_ms(clock_.wall_now()));
  peers_.push_back(std::make_unique<Peer>());
  slot->peer = peers_.back().get();
  slot->peer->nis.push_back(slot.get());
  slot->peer->announced = {nid};
  for (LocalNi* ni : nis_)
    if (same_net(ni->nid, nid)) path_locked(*ni, *slot);
  return slot.get();
}

Net::Path* Net::PeerTable::path(LocalNi& ni, PeerNi& pni) {
  if (Path* p = find_path(ni.nid, pni.nid)) return p;
  WriterLock lk(mu_);
  return path_locked(ni, pni);
}

Net::Path* Net::PeerTable::path_locked(LocalNi& ni, PeerNi& pni) {
  auto& slot = paths_[{ni.nid, pni.nid}];
  if (!slot) {
    slot = std::make_unique<Path>(&ni, &pni);
    ni.paths.push_back(slot.get());
    pni.paths.push_back(slot.get());
  }
  return slot.get();
}

Net::Path* Net::PeerTable::find_path(const Nid& local, const Nid& peer) const {
  ReaderLock lk(mu_);
  auto it = paths_.find({local, peer});
  return it == paths_.end() ? nullptr : it->second.get();
}

void Net::PeerTable::discover(PeerNi& pni, const std::vector<Nid>& nids) {
  WriterLock lk(mu_);
  Peer* peer = pni.peer;
  peer->announced = nids;
  for (const Nid& n : nids) {
    bool reachable = std::any_of(nis_.begin(), nis_.end(),
                                 [&](const LocalNi* l) { return same_net(l->nid, n); });
    if (!reachable) continue;  // on a network we have no NI on
    PeerNi* o = create_locked(n);
    if (o->peer == peer) continue;
    Peer* old = o->peer;
    for (PeerNi* x : old->nis) {
      x->peer = peer;
      peer->nis.push_back(x);
    }
    old->nis.clear();
  }
}

void Net::PeerTable::peer_paths(const PeerNi& pni, std::vector<Path*>* out) const {
  out->clear();
  ReaderLock lk(mu_);
  for (PeerNi* x : pni.peer->nis) out->insert(out->end(), x->paths.begin(), x->paths.end());
}

std::vector<Net::PeerNi*> Net::PeerTable::peer_nis(const PeerNi& pni) const {
  ReaderLock lk(mu_);
  return pni.peer->nis;
}

std::vector<Net::Path*> Net::PeerTable::paths_of(const PeerNi& pni) const {
  ReaderLock lk(mu_);
  return pni.paths;
}

bool Net::PeerTable::peer_reachable(const PeerNi& pni) const {
  ReaderLock lk(mu_);
  return std::any_of(pni.peer->nis.begin(), pni.peer->nis.end(),
                     [](const PeerNi* x) { return !x->paths.empty(); });
}

Nid Net::PeerTable::lowest_nid(const Peer& p) {
  Nid n = p.nis.front()->nid;
  for (const PeerNi* o : p.nis) n = std::min(n, o->nid);
  return n;
}

Nid Net::PeerTable::peer_name(const PeerNi& pni) const {
  ReaderLock lk(mu_);
  return lowest_nid(*pni.peer);
}

std::vector<Nid> Net::PeerTable::announced(const PeerNi& pni) const {
  ReaderLock lk(mu_);
  return pni.peer->announced;
}

std::vector<Net::PeerTable::PeerView> Net::PeerTable::peer_views() const {
  ReaderLock lk(mu_);
  std::vector<PeerView> v;
  v.reserve(peers_.size());
  for (const auto& p : peers_) {
    if (p->nis.empty()) continue;  // merged into another
    PeerView& pv = v.emplace_back();
    pv.name = lowest_nid(*p);
    pv.nis = p->nis;
    for (PeerNi* x : p->nis) pv.paths.insert(pv.paths.end(), x->paths.begin(), x->paths.end());
  }
  return v;
}

void Net::PeerTable::for_each_peer_ni(const std::function<void(PeerNi&)>& f) const {
  ReaderLock lk(mu_);
  for (const auto& [k, p] : peer_nis_) f(*p);
}

std::vector<Net::Path*> Net::PeerTable::ni_paths(const LocalNi& ni) const {
  ReaderLock lk(mu_);
  return ni.paths;
}

std::vector<Net::Path*> Net::PeerTable::all_paths() const {
  ReaderLock lk(mu_);
  std::vector<Path*> v;
  v.reserve(paths_.size());
  for (const auto& [k, p] : paths_) v.push_back(p.get());
  return v;
}

}  // namespace pfsnet
