// PeerTable: the peers Net knows, their NIs and the paths (local NI, peer NI) to them, and
// discovery: the NIDs a peer announces in its handshake all belong to one peer (LNet's
// multi-rail discovery), merged as they are learnt. A path exists from the moment its
// peer NI does, for every local NI on the same network, so selection walks pni->paths
// and never looks one up.
// Threads: every function from any thread. Lookups take the table's lock shared (the
// send path); creation and discovery take it exclusively. Entries are never freed before
// the table: their pointers stay valid without the lock.
// The links between entries (LocalNi::paths, PeerNi::peer and ::paths, Peer::nis and
// ::announced) are under the table's lock, which the entries have no pointer to name in
// a GUARDED_BY: they are private to this class instead, whose every function takes it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "net/net_internal.h"

namespace pfsnet {

class Net::PeerTable {
 public:
  // `nis` are the node's local NIs (they outlive the table); `clock` stamps new health.
  PeerTable(const std::vector<LocalNi*>& nis, Clock& clock) : nis_(nis), clock_(clock) {}

  // The peer NI `nid`; null when unknown.
  PeerNi* find(const Nid& nid) const;
  // The peer NI `nid`, created (with its peer and paths) when unknown.
  PeerNi* get(const Nid& nid);
  // The path `ni` -> `pni` (created if missing). REQUIRES: same network.
  Path* path(LocalNi& ni, PeerNi& pni);
  // The path between two packed NIDs; null when unknown.
  Path* find_path(const Nid& local, const Nid& peer) const;
  // `pni`'s peer announced `nids` (its every NID, in its order): those on our networks
  // become NIs of that peer, merging peers that were thought apart.
  void discover(PeerNi& pni, const std::vector<Nid>& nids);

  // The paths to every NI of `pni`'s peer, copied into `out` (cleared first) under the
  // lock.
  void peer_paths(const PeerNi& pni, std::vector<Path*>* out) const;
  std::vector<PeerNi*> peer_nis(const PeerNi& pni) const;
  // The paths to `pni` itself, copied under the lock.
  std::vector<Path*> paths_of(const PeerNi& pni) const;
  // Whether any NI of `pni`'s peer shares a network with a local NI.
  bool peer_reachable(const PeerNi& pni) const;
  // A peer node's name: its lowest NID.
  Nid peer_name(const PeerNi& pni) const;
  std::vector<Nid> announced(const PeerNi& pni) const;
  // One peer node: its name (lowest NID), its NIs and the paths to them.
  struct PeerView {
    Nid name;
    std::vector<PeerNi*> nis;
    std::vector<Path*> paths;
  };
  std::vector<PeerView> peer_views() const;
  // f(PeerNi&) for each, under the lock held shared: f must not take it.
  void for_each_peer_ni(const std::function<void(PeerNi&)>& f) const;
  // The paths of local NI `ni`, copied under the lock.
  std::vector<Path*> ni_paths(const LocalNi& ni) const;
  std::vector<Path*> all_paths() const;

 private:
  PeerNi* create_locked(const Nid& nid) REQUIRES(mu_);
  Path* path_locked(LocalNi& ni, PeerNi& pni) REQUIRES(mu_);
  // A peer's name, its lowest NID. REQUIRES: it has an NI; the lock held.
  static Nid lowest_nid(const Peer& p);

  const std::vector<LocalNi*> nis_;
  Clock& clock_;
  mutable SharedMutex mu_;
  std::unordered_map<Nid, std::unique_ptr<PeerNi>> peer_nis_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Peer>> peers_ GUARDED_BY(mu_);
  std::map<std::pair<Nid, Nid>, std::unique_ptr<Path>> paths_ GUARDED_BY(mu_);
};

}  // namespace pfsnet
