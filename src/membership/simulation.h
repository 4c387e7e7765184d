// MembershipSim: the scalable pinger at cluster scale on one machine. The real MGS code
// (MgsCore) and the real node code (one AgentCore per node) exchange the real encoded
// messages through an in-memory event queue with a one-way latency, on a manual clock:
// tens of simulated minutes of 100,000 clients run in seconds. It measures what the
// MGS receives, how long it computes (wall time inside the MGS's handlers: decoding,
// the core, encoding), how fast a dead server is detected and every client told.
// Thread safety: none; one thread runs it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "membership/agent.h"
#include "membership/mgs.h"

namespace pfsnet {

struct SimOptions {
  int clients = 10000;
  int servers = 200;
  Duration client_interval = std::chrono::seconds(50);
  Duration server_interval = std::chrono::seconds(10);
  int64_t miss_limit = 3;
  bool heard_reports = false;
  // Each client exchanges an RPC with a random server every `activity` (0: idle cluster).
  Duration activity{0};
  Duration latency = std::chrono::microseconds(100);  // one way, every message
  int64_t notify_rate = 100000;
  size_t notify_window = 4096;
  size_t relay_fanout = 256;  // MgsOptions::relay_fanout (0: the MGS tells every client)
  // A notification's deadline (MembershipService: the MGS's 5 s; a relay's deliveries half);
  // a relaying server sends one every relay_gap (100,000 a second).
  Duration notify_timeout = std::chrono::seconds(5);
  Duration relay_gap = std::chrono::microseconds(10);
  // The leader keeps its table where the next finds it (issue 36: etcd): the changed chunks
  // taken every MGS round, as MembershipService does; fail_over() restores from them.
  bool keep_table = false;
  uint64_t seed = 1;
};

class MembershipSim {
 public:
  explicit MembershipSim(SimOptions o);

  // Runs every event up to `t` (simulated time since the start).
  void run_for(Duration d);
  // Stops server `i`'s agent: it pings no more (a crash).
  void kill_server(int i);
  // The leader MGS replaced at this instant by a new one (a new instance) that restores the
  // table from the chunks kept (keep_table); notifications in flight are lost with the old.
  struct Failover {
    double restore_s = 0;  // wall time of the new leader's restore
    size_t chunks = 0, bytes = 0, nodes = 0;
  };
  Failover fail_over();
  // Nodes alive whose state in the MGS's table is not up, or that it does not hold.
  size_t table_errors() const;
  // What the leader has written of its table so far (keep_table).
  uint64_t table_chunks_written() const { return chunks_written_; }
  uint64_t table_bytes_written() const { return bytes_written_; }

  Duration now() const { return clock_.now() - start_; }
  const MgsCore& mgs() const { return *mgs_; }
  // MGS messages received (registrations, pings) and acknowledgements processed.
  uint64_t mgs_messages() const { return mgs_messages_; }
  uint64_t mgs_pings() const { return mgs_->counters().pings; }
  // Wall time spent in MGS code so far.
  double mgs_cpu_seconds() const { return mgs_cpu_; }
  uint64_t client_pings_skipped() const;
  // After kill_server(i): when the MGS declared it dead, and when the last client that
  // had to hear of it was told (negative until then); how many clients were told.
  double declared_dead_s() const { return declared_s_; }
  double last_client_told_s() const { return told_last_s_; }
  size_t clients_told() const { return told_.size(); }

 private:
  enum class Ev : uint8_t {
    kWake,
    kMgsRx,
    kAgentRx,
    kMgsTick,
    kNotify,     // to `node`; `via` >= 0: from that relaying server, `index` in its targets
    kNotifyAck,  // to the MGS: `ok`, and a relay's answer in `payload`
    kRelay,      // an MGS_RELAY to server `node`
    kRelayAck,   // to relaying server `node`: its target `index` answered (`ok`)
    kActivity
  };
  struct Event {
    TimePoint t;
    uint64_t seq;
    Ev type;
    int node;  // agent index
    uint64_t token;
    AgentCore::Kind kind;
    std::shared_ptr<Buffer> payload;
    int via = -1;
    uint32_t index = 0;
    bool ok = true;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  void push(Duration after, Ev type, int node, std::shared_ptr<Buffer> payload = nullptr,
            uint64_t token = 0, AgentCore::Kind kind = AgentCore::Kind::kPing);
  void push(Duration after, Event e);
  int agent_of_nid(const Nid& n) const;
  // An MGS_RELAY a server is passing on: the MGS's token, targets still to answer.
  struct RelayRound {
    uint64_t token = 0;
    size_t left = 0;
    std::vector<uint32_t> failed;
  };
  std::unordered_map<uint64_t, RelayRound> rounds_;  // by round id (the acks' token)
  uint64_t next_round_ = 1;
  void handle(Event& e);
  void wake(int i);
  void send_notifications();
  static Nid nid_of(int i, bool server);

  SimOptions opts_;
  MgsOptions mgs_opts_;
  ManualClock clock_;
  TimePoint start_;
  std::unique_ptr<MgsCore> mgs_;
  std::vector<std::unique_ptr<AgentCore>> agents_;  // servers first, then clients
  std::vector<bool> alive_;
  std::vector<bool> wake_pending_;
  std::vector<std::vector<Nid>> heard_;  // per server: clients heard since its ping
  std::vector<TimePoint> contact_;       // per client: last exchange with a server
  std::vector<int> agent_of_id_;         // MGS id -> agent index
  std::priority_queue<Event, std::vector<Event>, std::greater<>> q_;
  uint64_t seq_ = 0;
  std::mt19937_64 rng_;
  uint64_t mgs_messages_ = 0;
  double mgs_cpu_ = 0;
  int killed_ = -1;
  double declared_s_ = -1, told_last_s_ = -1;
  std::unordered_set<int> told_;
  std::map<uint32_t, std::string> table_;  // chunk -> its encoding: what etcd holds
  uint64_t chunks_written_ = 0, bytes_written_ = 0;
  uint64_t mgs_instance_ = 1;
};

}  // namespace pfsnet
