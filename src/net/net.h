// Net: LNet's middle layer. Local NIs (one per [[net]]), peer NIs, credit-based flow
// control and transmit deadlines over a Transport.
//
// Credits (seed 003, and LNet's o2iblnd): every connection has a window of
// `peer_credits` messages (requests and replies; control frames are free). The receiver
// returns a credit when the layer above has consumed the message (RxCredit is released),
// piggybacked on its next frame or, when `credit_high_water` are owed and nothing is going
// back, in an explicit credit frame. Each local NI has `credits` for all its peers
// together; an NI credit is held from send until the peer returns the message's credit.
// So a sender never has more than peer_credits unconsumed messages at one receiver.
//
// Deadlines: every send carries a deadline; expire(now) fails sends still queued (waiting
// for a connection or credits) past it with LOCAL_NI_SEND_TIMEOUT.
//
// Threads: send() and expire() may be called from any thread; NetRx callbacks run on the
// I/O thread of the connection; TxCompletion callbacks on the sending or the I/O thread.
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/config.h"
#include "base/nid.h"
#include "base/status.h"
#include "transport/transport.h"

namespace pfsnet {

// Holds one receive credit of a connection; returns it when destroyed or released.
// Move-only. Release it as soon as the message's buffers are no longer needed.
class RxCredit {
 public:
  RxCredit() = default;
  RxCredit(std::weak_ptr<Connection> c, uint32_t high_water)
      : conn_(std::move(c)), high_water_(high_water) {}
  RxCredit(RxCredit&& o) noexcept { *this = std::move(o); }
  RxCredit& operator=(RxCredit&& o) noexcept {
    release();
    conn_ = std::move(o.conn_);
    high_water_ = o.high_water_;
    o.conn_.reset();
    return *this;
  }
  ~RxCredit() { release(); }
  void release();

 private:
  std::weak_ptr<Connection> conn_;
  uint32_t high_water_ = 1;
};

// The upper layer (rpc) implements this.
class NetRx {
 public:
  virtual ~NetRx() = default;
  // A request or reply arrived from `from` (the sending peer NI). I/O thread.
  virtual void on_message(const Nid& from, InFrame&& f, RxCredit credit) = 0;
  // The connection to these peer NIDs closed; messages written on it will get no reply.
  virtual void on_peer_disconnected(const std::vector<Nid>& peer_nids, const Status& why) = 0;
};

// Counters of an NI or a peer NI. Atomic: updated from several threads.
struct NetCounters {
  std::atomic<uint64_t> send_count{0}, send_bytes{0}, recv_count{0}, recv_bytes{0};
  std::atomic<uint64_t> timeouts{0}, drops{0};
  std::array<std::atomic<uint64_t>, kNumHealthKinds> errors{};
  void count_error(HealthKind k) {
    if (k != HealthKind::kNone) errors[static_cast<size_t>(k)].fetch_add(1);
  }
};

// Health values (LNet health, as current LNet does it): 1000 is healthy; a failure lowers
// the value of the NI it is blamed on (local kinds: the local NI; peer kinds: the peer NI)
// by health_sensitivity, a success raises it by as much, up to 1000. A local NI is
// credited for every message it sends or receives, a peer NI for every message received
// from it. (Recovery pings and health-based selection come with multi-rail.)
inline constexpr int kMaxHealth = 1000;

struct NetOptions {
  int64_t credits = 64;
  int64_t peer_credits = 8;
  int64_t health_sensitivity = 100;
  Duration transaction_timeout = std::chrono::seconds(50);
  std::map<uint64_t, uint16_t> ports;  // packed local NID -> port; peers use the same port

  static NetOptions from(const Config& cfg);
  // Credits owed before an explicit credit frame is sent: half the window, at least 1,
  // at most peer_credits - 1 (so a sender always has a credit while none is sent).
  uint32_t credit_high_water() const;
};

// A snapshot of one NI or peer NI, for the admin surface and tests.
struct NiInfo {
  Nid nid;
  bool up = false;
  int health = kMaxHealth;
  int64_t credits = 0, credits_max = 0, credits_min = 0;  // now, configured, low-water mark
  int64_t queued = 0;                                     // sends waiting
  uint64_t send_count = 0, send_bytes = 0, recv_count = 0, recv_bytes = 0;
  uint64_t timeouts = 0, drops = 0;
  std::array<uint64_t, kNumHealthKinds> errors{};
  int connections = 0;
  std::vector<Nid> peer_nids;  // peers: every NID the peer announced
};

using TransportFactory = std::function<std::unique_ptr<Transport>(TransportEvents&)>;

class Net final : public TransportEvents {
 public:
  // `local_nids` in [[net]] order. `rx` and `clock` must outlive the Net.
  Net(NetOptions opts, std::vector<Nid> local_nids, Clock& clock, TransportFactory make_transport);
  ~Net() override;

  void set_rx(NetRx* rx) { rx_ = rx; }
  // Starts listening on every local NI.
  Status start();
  // Closes every connection, fails every queued send with kCancelled, stops the transport.
  void shutdown();

  // Sends `f` to `dst` (a peer NID) through the local NI on the same network. `done`
  // (may be null) is told exactly once: written, or failed (no local NI for that network,
  // connect error, connection closed, deadline passed while queued). f->hdr's src and dst
  // are set here.
  void send(const Nid& dst, std::unique_ptr<OutFrame> f, TimePoint deadline, TxCompletion* done);

  // Fails queued sends whose deadline is at or before `now`. Returns how many.
  size_t expire(TimePoint now);

  std::vector<NiInfo> nis() const;
  std::vector<NiInfo> peers() const;
  const std::vector<Nid>& local_nids() const { return local_nids_; }
  const NetOptions& options() const { return opts_; }
  Clock& clock() { return clock_; }

  // TransportEvents.
  void on_connected(const ConnectionPtr& c) override;
  void on_frame(Connection& c, InFrame&& f) override;
  void on_closed(Connection& c, const Status& why) override;

  struct LocalNi;
  struct PeerNi;
  struct ConnState;
  struct TxMsg;

 private:
  LocalNi* ni_for(const Nid& dst);
  PeerNi* peer_ni_locked(LocalNi& ni, const Nid& nid);
  // REQUIRES: ni.mu held. Sends what credits allow; returns the messages to hand to the
  // transport after unlocking.
  void drain_locked(LocalNi& ni, PeerNi& p, std::vector<std::pair<ConnectionPtr, TxMsg*>>* out);
  void drain_ni_locked(LocalNi& ni, std::vector<std::pair<ConnectionPtr, TxMsg*>>* out);
  void transmit(std::vector<std::pair<ConnectionPtr, TxMsg*>>& out);
  void start_connect_locked(LocalNi& ni, PeerNi& p);
  void on_connect_result(LocalNi* ni, Nid peer, Result<ConnectionPtr> r);
  void fail(TxMsg* m, const Status& s);

  NetOptions opts_;
  std::vector<Nid> local_nids_;
  Clock& clock_;
  NetRx* rx_ = nullptr;
  std::vector<std::unique_ptr<LocalNi>> nis_;
  std::unique_ptr<Transport> transport_;
  std::atomic<bool> shut_{false};
};

}  // namespace pfsnet
