#include "membership/leader_lease.h"

#include <algorithm>

namespace pfsnet {

const char* role_name(LeaderLease::Role r) {
  switch (r) {
    case LeaderLease::Role::kLeader:
      return "leader";
    case LeaderLease::Role::kFollower:
      return "follower";
    case LeaderLease::Role::kNone:
      break;
  }
  return "none";
}

LeaderLease::LeaderLease(LeaseOptions o, std::string self) : o_(o), self_(std::move(self)) {
  o_.margin = std::clamp<Duration>(o_.margin, Duration::zero(), o_.ttl / 2);
}

LeaderLease::Call LeaderLease::next(TimePoint now) {
  if (outstanding_ != Call::kNone || now < next_at_) return Call::kNone;
  if (lease_ != 0 && now >= lease_until_) lose_lease();  // it may have expired in etcd
  Call c;
  if (lease_ == 0) {
    c = Call::kGrant;
  } else if (leader_) {
    c = Call::kKeepAlive;
  } else {
    // A follower keeps its own lease alive too (a campaign that wins puts the key on it),
    // once half of it is used; then campaigns at once.
    c = lease_until_ - now < o_.ttl / 2 ? Call::kKeepAlive : Call::kCampaign;
  }
  outstanding_ = c;
  return c;
}

void LeaderLease::granted(int64_t lease, Duration ttl, TimePoint sent) {
  outstanding_ = Call::kNone;
  ++n_.grants;
  lease_ = lease;
  leader_ = false;
  lease_until_ = sent + std::min(ttl, o_.ttl) - o_.margin;
  next_at_ = TimePoint::min();  // campaign at once
}

void LeaderLease::campaigned(const Campaign& c, TimePoint sent) {
  outstanding_ = Call::kNone;
  ++n_.campaigns;
  next_at_ = sent + o_.campaign;
  // Lost, but the key is on this MGS's lease: an earlier campaign of its own won and its
  // answer was lost on the way. It leads.
  bool mine = c.won || (lease_ != 0 && c.leader_lease == lease_);
  if (mine) {
    if (!leader_) ++n_.won;
    leader_ = true;
    leader_name_ = self_;
    epoch_ = c.epoch;
    return;
  }
  leader_ = false;
  leader_name_ = c.leader;
  epoch_ = c.epoch;
  // What it heard holds until the leader's lease could have run out; then it knows less.
  follower_until_ = c.leader.empty() ? TimePoint::min() : sent + o_.ttl;
}

void LeaderLease::kept_alive(Duration ttl_left, TimePoint sent) {
  outstanding_ = Call::kNone;
  ++n_.keepalives;
  if (ttl_left <= Duration::zero()) {
    lose_lease();
    next_at_ = TimePoint::min();  // a new lease at once
    return;
  }
  lease_until_ = std::max(lease_until_, sent + std::min(ttl_left, o_.ttl) - o_.margin);
  next_at_ = leader_ ? sent + o_.keepalive : TimePoint::min();  // a follower campaigns now
}

void LeaderLease::failed(Call c, TimePoint now) {
  (void)c;
  outstanding_ = Call::kNone;
  ++n_.failures;
  next_at_ = now + o_.retry;
}

void LeaderLease::resigned() {
  lease_ = 0;
  leader_ = false;
  lease_until_ = TimePoint::min();
  outstanding_ = Call::kNone;
}

void LeaderLease::lose_lease() {
  ++n_.lease_lost;
  lease_ = 0;
  leader_ = false;
  lease_until_ = TimePoint::min();
}

LeaderLease::View LeaderLease::view(TimePoint now) const {
  View v;
  v.epoch = epoch_;
  if (leader_ && lease_ != 0 && now < lease_until_) {
    v.role = Role::kLeader;
    v.leader = self_;
    v.serve_until = lease_until_;
  } else if (!leader_ && !leader_name_.empty() && now < follower_until_) {
    v.role = Role::kFollower;
    v.leader = leader_name_;
  }
  return v;
}

}  // namespace pfsnet
