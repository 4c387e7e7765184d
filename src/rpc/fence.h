// Fence: what the MGS's verdicts mean for a node's services (issue 36, "dead means freed").
// On a server, the clients the MGS declared dead are evicted: token managers drop their
// tokens at once, and the block service refuses their I/O, until the MGS says they are back
// -- which it does only once they registered again, having dropped what they held. On a
// client, the MGS telling it that it was declared dead: its tokens are gone, so it drops
// them (and its cached blocks) before it registers again. So a node cut off long enough to
// be declared dead never writes under a token another node holds since.
//
// MembershipService writes it (from MGS_NOTIFY and its ping answers); services read it
// (evicted(), cheap while nobody is evicted) and subscribe to its changes. A token manager
// gives an evicted client's tokens to others only once it is fenced (every live server
// refuses it), so no data server that has not heard takes a write under them.
// Thread safety: any thread. Subscribers are called without the fence's lock held, on the
// thread that made the change, in the order of subscription; they may read the fence.
#pragma once

#include <pfsnet/nid.h>

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"

namespace pfsnet {

struct FenceEvent {
  enum Kind {
    kEvicted,      // peers `nids` were declared dead by the MGS (`why`)
    kReadmitted,   // peers `nids` registered again: the MGS says they are up
    kSelfEvicted,  // this node was declared dead (`why`); nids: none
    // Evicted peers `nids` are fenced: every live server knows they are dead (refuses their
    // I/O), so what they held (their tokens) may go to others. Still evicted.
    kFenced
  } kind = kEvicted;
  std::vector<Nid> nids;
  std::string why;
};

class Fence {
 public:
  using Listener = std::function<void(const FenceEvent&)>;

  void evict(const std::vector<Nid>& nids, const std::string& why) EXCLUDES(mu_);
  void readmit(const std::vector<Nid>& nids) EXCLUDES(mu_);
  void self_evicted(const std::string& why) EXCLUDES(mu_);
  void fenced(const std::vector<Nid>& nids) EXCLUDES(mu_);

  // Why `peer` is evicted; nullopt when it is not.
  std::optional<std::string> evicted(const Nid& peer) const EXCLUDES(mu_);
  size_t evicted_count() const { return count_.load(std::memory_order_relaxed); }

  // Returns an id for unsubscribe(); a subscriber unsubscribes before it goes.
  int subscribe(Listener l) EXCLUDES(mu_);
  void unsubscribe(int id) EXCLUDES(mu_);

 private:
  void tell(const FenceEvent& e) EXCLUDES(mu_);

  mutable Mutex mu_;
  std::unordered_map<Nid, std::string> evicted_ GUARDED_BY(mu_);  // NID -> why
  std::atomic<size_t> count_{0};                                  // evicted_.size()
  std::vector<std::pair<int, Listener>> listeners_ GUARDED_BY(mu_);
  int next_id_ GUARDED_BY(mu_) = 0;
};

}  // namespace pfsnet
