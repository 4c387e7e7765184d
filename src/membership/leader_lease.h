// LeaderLease: one MGS's side of MGS leadership held through a lease in etcd (issue 36), as
// pure logic on an injected clock: what to ask etcd next, what its answers mean, and
// whether this MGS may serve now. The etcd calls themselves are EtcdLeadership's.
//
// The recipe (etcd's own lock and election recipes, on the v3 API):
//   grant      a lease of `ttl`;
//   campaign   a transaction: if the leader key does not exist, create it with this MGS's
//              value (its NID) on the lease, else read it. Whoever creates the key leads;
//              its epoch is the key's create revision, which etcd never hands out twice, so
//              every later leader has a higher one;
//   keep alive the lease every `keepalive` while leading (followers campaign as often: a
//              key whose lease expired is gone, and the next campaign takes it);
//   resign     revoke the lease on a clean stop (the key goes with it: no wait for a TTL).
//
// Never two leaders: etcd counts a lease's TTL from when it received the grant or the last
// keep-alive, which is after this MGS sent it. So the lease cannot expire before
// `sent + ttl` on this MGS's monotonic clock -- less `margin` for the two clocks' rates --
// and until then no other MGS can create the key. A leader whose keep-alives are not
// answered serves until that instant and not a moment longer (fenced), then campaigns like
// a follower.
//
// Thread safety: none; the owner serialises calls.
#pragma once

#include <pfsnet/clock.h>

#include <cstdint>
#include <optional>
#include <string>

namespace pfsnet {

struct LeaseOptions {
  Duration ttl = std::chrono::seconds(5);
  Duration keepalive = std::chrono::milliseconds(1500);
  // A follower's campaign period: how soon after the leader's key goes it is taken (a
  // campaign is one small transaction).
  Duration campaign = std::chrono::milliseconds(1500);
  Duration margin = std::chrono::milliseconds(500);  // clock rates; less than ttl
  Duration retry = std::chrono::milliseconds(500);   // after a failed call
};

class LeaderLease {
 public:
  enum class Role { kNone, kFollower, kLeader };
  enum class Call { kNone, kGrant, kCampaign, kKeepAlive };
  // What this MGS knows of the leadership now.
  struct View {
    Role role = Role::kNone;  // kNone: no leader known (etcd unreachable, or between leaders)
    uint64_t epoch = 0;       // the leader's; 0 when none is known
    std::string leader;       // the leader's value (its NID); this MGS's own when leading
    // A leader's last instant to serve without another keep-alive answered.
    TimePoint serve_until = TimePoint::min();
  };
  // A campaign's answer: the leader key's value and create revision, and whether this
  // MGS's transaction created it.
  struct Campaign {
    bool won = false;
    std::string leader;
    uint64_t epoch = 0;
    int64_t leader_lease = 0;  // the lease the key is on (this MGS's own after a restart?)
  };

  LeaderLease(LeaseOptions o, std::string self);

  // The call to make at `now`, if any (none while one is outstanding); the caller makes it
  // and reports its outcome with the matching method below, passing when it was sent.
  Call next(TimePoint now);
  // Outcomes. `sent`: when the call went out (the lease's time counts from then).
  void granted(int64_t lease, Duration ttl, TimePoint sent);
  void campaigned(const Campaign& c, TimePoint sent);
  // `ttl_left` as etcd answered; zero: the lease is gone (expired or revoked).
  void kept_alive(Duration ttl_left, TimePoint sent);
  // The call failed (etcd unreachable, an error answer): retried after `retry`.
  void failed(Call c, TimePoint now);
  // The lease was revoked on purpose (resign): this MGS leads no more.
  void resigned();

  // The leadership as of `now`: a leader past serve_until is no leader (fenced).
  View view(TimePoint now) const;
  bool leading(TimePoint now) const { return view(now).role == Role::kLeader; }
  int64_t lease() const { return lease_; }
  const LeaseOptions& options() const { return o_; }

  struct Counters {
    uint64_t grants = 0, campaigns = 0, won = 0, keepalives = 0, failures = 0;
    uint64_t lease_lost = 0;  // keep-alive answered "no such lease", or fenced by time
  };
  const Counters& counters() const { return n_; }

 private:
  void lose_lease();

  LeaseOptions o_;
  std::string self_;
  Call outstanding_ = Call::kNone;
  TimePoint next_at_ = TimePoint::min();
  int64_t lease_ = 0;                         // 0: none granted
  TimePoint lease_until_ = TimePoint::min();  // sent + ttl - margin of the last answer
  bool leader_ = false;                       // this MGS created the key on lease_
  uint64_t epoch_ = 0;                        // the newest leader's epoch seen
  std::string leader_name_;
  TimePoint follower_until_ = TimePoint::min();  // a follower's view is this fresh
  Counters n_;
};

const char* role_name(LeaderLease::Role r);

}  // namespace pfsnet
