// Config: the pfsnetd TOML configuration (docs/interfaces.md "Configuration"). Every key has
// a default; an unknown key, a wrong type or an out-of-range value is an error naming
// the file, the line and the key.
// Thread safety: a plain value; the daemon swaps whole Configs.
#pragma once

#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace pfsnet {

struct NodeConfig {
  std::string name;                // default: host name
  std::vector<std::string> roles;  // "client", "server", "mgs"
  std::vector<Nid> mgs;
  std::string cluster_key_file = "/etc/pfsnet/cluster.key";
  std::string admin_socket = "/run/pfsnet/pfsnetd.sock";
  // The HTTP endpoint (/metrics, /api/v1): "HOST:PORT", or ":PORT" / "PORT" for
  // 127.0.0.1:PORT (it binds to localhost unless a host is given); empty: none.
  std::string http;
  // When set, every HTTP request must carry "Authorization: Bearer TOKEN", TOKEN being
  // this file's contents without its trailing newline (mode at most 0600, >= 16 bytes).
  std::string http_token_file;
  std::string log_level = "info";  // trace, debug, info, warn, error, off
  // "text" (TIME LEVEL message) or "json" (one object a line: ts, level, node, component,
  // msg, and an RPC's xid, job and trace_id where the line is about one).
  std::string log_format = "text";
};

// Bounds of net.rx_depth and net.msg_size: what the fabric LND's wire accepts of a peer
// (wire/fabric_wire.h).
inline constexpr uint32_t kMinRxDepth = 2, kMaxRxDepth = 4096;
inline constexpr uint32_t kMinMsgSize = 256, kMaxMsgSize = 1 << 20;

struct NetConfig {
  Nid nid;
  uint16_t port = 7988;
  // The libfabric (RDMA) LND's settings; @o2ib nets only.
  std::string provider = "verbs";  // libfabric provider: "verbs" (InfiniBand/RoCE), "tcp"
  std::string domain;              // libfabric domain (device, e.g. "mlx5_0"); "" = any
  int64_t rx_depth = 64;           // receive buffers posted per connection: its credits
  int64_t msg_size = 4096;         // bytes per message; larger frames go by RMA
  // The link's speed, Mbit/s: the class the probe mesh compares this NI's paths within
  // (a path is judged against paths of its own speed). 0: the kernel's figure for the
  // interface (ethtool's), where it has one.
  int64_t speed_mbit = 0;
};

// Link emulation ([[emulation]] tables; none by default): what this node sends from
// local NI `ni` to peer NID `peer` (empty: any) leaves at `rate_mbit` (0: unlimited) and
// arrives `delay_ms` later -- a long fat pipe, emulated inside the transport.
struct EmulationConfig {
  std::string ni, peer;
  double delay_ms = 0;
  double rate_mbit = 0;
  // The NI's own link, shared: one pipe for everything it sends and one for everything it
  // receives, whatever the peer (a server's link that all its clients share).
  bool shared = false;
};

// A route ([[route]] tables; LNet's `lnetctl route add`): frames for NIDs on network `net`
// (e.g. "tcp2", held as Nid::net()) go through the router `gateway`, a NID on one of this
// node's networks; `hops` is how many routers the path crosses and `priority` ranks the
// gateways of one network (lower is preferred). Among a network's gateways a node takes
// the lowest priority, then the fewest hops, then the healthiest, then the one with the
// most credits, round-robin among equals.
struct RouteConfig {
  uint32_t net = 0;
  Nid gateway;
  int64_t hops = 1;
  int64_t priority = 0;
  friend bool operator==(const RouteConfig&, const RouteConfig&) = default;
};
inline constexpr int64_t kMaxRouteHops = 255;
inline constexpr int64_t kMaxRoutePriority = 2147483647;
// A route a node with NIs `nets` can use: not to one of its own networks, through a
// gateway on one of them (the same address family); an error says which is wrong.
Status check_route(const RouteConfig& r, const std::vector<NetConfig>& nets);
// Each of `routes` checked so, and none twice (the same network and gateway).
Status check_routes(const std::vector<RouteConfig>& routes, const std::vector<NetConfig>& nets);

struct LnetConfig {
  int64_t credits = 64;
  int64_t peer_credits = 8;
  int64_t transaction_timeout = 50;  // seconds
  int64_t retry_count = 2;
  int64_t health_sensitivity = 100;
  int64_t recovery_interval = 1;  // seconds
  // Reconnect backoff (socklnd's min_reconnectms and max_reconnectms): after a failed
  // connect to a peer NI the next waits min_reconnect_ms, doubling with each failure up to
  // max_reconnect_ms, each wait jittered to 50-100% of it; a connection resets it. Sends
  // queued meanwhile wait for that attempt when it comes within their deadline, else
  // fail at once. At restart.
  int64_t min_reconnect_ms = 1000;
  int64_t max_reconnect_ms = 60000;
  // Microseconds an I/O thread polls for more traffic before it sleeps (like Linux's
  // net.core.busy_poll): a request arriving within it needs no wake-up. 0 = never poll.
  int64_t busy_poll_us = 20;
  // Every request and reply carries the CRC-32C of its payload and bulk (wire/data_crc.h),
  // checked by the receiver; a mismatch is resent, never delivered. Off: this node sends
  // no checksum (it still checks those it gets). At run time.
  bool checksum = true;
  // SO_SNDBUF and SO_RCVBUF of TCP connections, in bytes (socklnd's tx_buffer_size and
  // rx_buffer_size). 0 (the default): not set, so the kernel's autotuning grows each
  // connection's buffers up to net.ipv4.tcp_wmem/tcp_rmem's maximum as its path needs; a
  // size set fixes the buffer (and the window: at most size / RTT per connection). At run
  // time, for connections made from then on.
  int64_t tx_buffer_size = 0;
  int64_t rx_buffer_size = 0;
  // Bulk connections per TCP path (socklnd's conns_per_peer): with more than 1, messages
  // of 64 KiB or more are spread over that many connections of their path, each with its
  // own window of peer_credits, and the rest keep the path's first connection (so small
  // RPCs never wait behind bulk in one TCP stream, and one lost segment holds back one
  // stream of several). 1: one connection carries everything. At run time, for paths'
  // connections opened from then on.
  int64_t conns_per_peer = 1;
  // TCP I/O threads (socklnd's nscheds). Each connection is served by one of them, the one
  // with the fewest connections when it opens, so a server receives from several clients
  // at once. 0 (the default): socklnd's size, half the CPUs this process may run on but at
  // least 3, and never more than those CPUs. At restart.
  int64_t io_threads = 0;
  // TCP: bulk of this many bytes or more is sent zero-copy (socklnd's zc_min_payload, its
  // default 16 KiB): MSG_ZEROCOPY, the kernel sending from the sender's memory instead of
  // a copy, the memory kept until the kernel says it is done with it. A connection whose
  // sends the kernel copies anyway (a peer on the same host: loopback, veth) goes back to
  // copying after its first few. 0: always copied. Plaintext only (TLS seals a copy). At
  // restart.
  int64_t zc_min_payload = 16384;
  // This node forwards frames between its networks for others (an LNet router): a frame
  // whose destination is on another network goes on to it, or to the next router. At
  // restart.
  bool routing = false;
  // A router's buffers (LNet's tiny/small/large_router_buffers): how many forwarded frames
  // of each size class it holds at once -- tiny: at most 512 bytes of payload and bulk;
  // small: at most 64 KiB; large: up to the bulk limit. A frame waits for a buffer of its
  // class, holding its sender's credit, so a router's memory for forwarding is bounded by
  // these. At restart.
  int64_t tiny_router_buffers = 2048;
  int64_t small_router_buffers = 512;
  int64_t large_router_buffers = 64;
  // The router's buffers one peer NI may hold at once (LNet's peer_buffer_credits); past
  // them its frames wait, and its connections are not read until one is let go, so one
  // peer cannot take a router's every buffer. 0: lnet.peer_credits. At restart.
  int64_t peer_buffer_credits = 0;
  // Router pings (LNet's router checker): every router_ping_interval seconds a node asks
  // each of its gateways whether it routes and which of its NIs are up; one that has not
  // answered within router_ping_timeout seconds is not used until it answers again. So a
  // router that dies silently is out of use within interval + timeout (15 s), before an
  // RPC's attempt on it times out (transaction_timeout / (retry_count + 1), 16.7 s). LNet's
  // alive_router_check_interval and router_ping_timeout (60 and 50 s there). At restart.
  int64_t router_ping_interval = 10;
  int64_t router_ping_timeout = 5;
  // A gateway whose NI on a route's network is down (it lost its far side) is not used for
  // that route (LNet's avoid_asym_router_failure). At restart.
  bool avoid_asym_router_failure = true;
};

struct RpcConfig {
  int64_t max_rpcs_in_flight = 8;
  // Peers with a max_rpcs_in_flight of their own (Lustre's per-OSC max_rpcs_in_flight),
  // by the NID RPCs are addressed to (the peer's first NID, as `pfsnet peers` lists it):
  // a peer across a WAN needs more RPCs in flight than one in the next rack. An inline
  // table, peer_rpcs_in_flight = { "198.18.0.2@tcp" = 64 }; pfsnet tune --apply and
  // auto-tune write it. At run time.
  std::map<std::string, int64_t> peer_rpcs_in_flight;
  // Threads that run the handlers which may block (kWorker); their queue and wait are
  // exported (/metrics pfsnet_rpc_worker_*), so a busy server is told from a slow network.
  int64_t workers = 2;
  // Exactly-once execution (rpc/reply_cache.h), per client incarnation: the window --
  // the most requests a server keeps records (and replies) of that the client has not
  // acknowledged; a client keeps at most half of it unacknowledged to one server, and
  // one that goes past it is refused (PROTOCOL) -- and seconds after which a silent
  // incarnation is forgotten. At restart.
  int64_t reply_cache_entries = 1024;
  int64_t reply_cache_idle = 600;
  // The op tracker's history (`pfsnet diag ops --history`): the slowest ops_history RPCs of
  // this node, as client and server, that ended within ops_history_window seconds and
  // took at least ops_history_min_ms. At restart.
  int64_t ops_history = 20;
  int64_t ops_history_window = 600;
  int64_t ops_history_min_ms = 1;
  // The job id of this process's RPCs whose caller names none (base/job_id.h; Lustre's
  // jobid_var and jobid_name): "disable", "procname_uid", "nodelocal" (jobid_name) or an
  // environment variable's name (SLURM_JOB_ID, ...). At restart.
  std::string jobid_var = "disable";
  std::string jobid_name = "%e.%u";
  // The request scheduling policy of this node as a server (Lustre's NRS; rpc/nrs.h):
  // "fifo" -- each request to its handler as it arrives -- or "fair" -- round-robin across
  // clients and their jobs, a slot kept free for each client lately heard from. Under
  // fair, at most nrs_slots requests of the asynchronous handlers (the block service's
  // reads and writes) and rpc.workers of the worker handlers are in service at once; a
  // flow's turn takes its weight in requests (nrs_client_weights by NID, nrs_job_weights
  // by job id; 1 otherwise); a flow counts as present nrs_idle_ms after its last request,
  // and up to nrs_reserve slots stay free for present flows with none in service. At run
  // time.
  std::string nrs_policy = "fifo";
  int64_t nrs_slots = 16;
  int64_t nrs_idle_ms = 1000;
  int64_t nrs_reserve = 1;
  std::map<std::string, int64_t> nrs_client_weights;
  std::map<std::string, int64_t> nrs_job_weights;
};

struct StatsConfig {
  int64_t rpcPerfRawStatBufferSize = 65536;
  int64_t rpcPerfRawExecBufferSize = 65536;
  int64_t rpcPerfNumberSecondIntervals = 60;
  int64_t rpcPerfNumberMinuteIntervals = 60;
  int64_t rpcPerfNumberHourIntervals = 24;
  int64_t rpcPerfNumberDayIntervals = 30;
  int64_t maxBlockSize = 1048576;
  // Job statistics (`pfsnet diag jobs`, Lustre's job_stats): jobs -- and clients -- counted
  // one by one, at most job_stats_max of each (more go into one `other`); an entry without
  // an RPC for job_cleanup_interval seconds goes; /metrics has the top metrics_top_jobs of
  // each by bytes, and `other`.
  bool job_stats = true;  // false: servers count no job or client statistics
  int64_t job_stats_max = 1024;
  int64_t job_cleanup_interval = 600;
  int64_t metrics_top_jobs = 10;
};

struct MembershipConfig {
  int64_t client_ping_interval = 50;
  int64_t server_ping_interval = 10;
  int64_t ping_miss_limit = 3;
  // Servers report the clients they heard from; a client that talked to a server within
  // its period skips its MGS ping (beyond the design note; on by default).
  bool heard_from_reports = true;
  // Most state-change notifications the MGS sends per second (its fan-out bound).
  int64_t notify_rate = 100000;
  // While more than notify_relay_above nodes wait for news (a server's death, told to every
  // client), the MGS sends it through servers: one MGS_RELAY carries it for up to this many
  // clients (0 or 1: every client told by the MGS itself).
  int64_t notify_relay_fanout = 256;
  int64_t notify_relay_above = 1024;  // relays only while more nodes than this wait
  // Nodes tell the MGS of peers they cannot reach (refused connects, remote timeouts);
  // the MGS pings such a node itself and declares it dead when it does not answer within
  // verify_timeout seconds (beyond the design note; on by default).
  bool unreachable_reports = true;
  int64_t verify_timeout = 5;
  // MGS leadership through etcd (issue 36): with endpoints ("http://HOST:PORT"), the MGS
  // daemons campaign for a lease of etcd_lease seconds on etcd_key; the leader serves with
  // an epoch, the others answer with the leader's NID and epoch. Empty: one MGS, no etcd.
  std::vector<std::string> etcd;
  int64_t etcd_lease = 5;
  std::string etcd_key = "pfsnet/mgs/leader";
  // Where an MGS without etcd keeps what outlives it: the cluster's minimum release level
  // (the file `release_level`; with etcd, the level is kept there).
  std::string state_dir = "/var/lib/pfsnet";
};

// Health that sees slowness ([health]): a peer NI (or local NI) whose latency stays well
// above its own baseline or its peers', or whose TCP retransmits more than loss_ratio of
// its segments, is degraded (SLOW, LOSSY; SERVER when the server's execution time is what
// rose) and selection takes degraded_penalty off its health. The rule: src/net/slowness.h
// and slowness_board.h. Every key takes effect at restart.
struct HealthConfig {
  bool slowness = true;      // judge slowness at all
  double slow_factor = 3.0;  // x its own baseline or its peers' median
  // and at least this much above it: eight busy daemons on two cores answered 1.3 ms above
  // a 0.18 ms idle baseline, which at 1 ms listed every peer SLOW (issue 34's yardstick).
  double slow_min_excess_ms = 5;
  double loss_ratio = 0.01;        // segments retransmitted / sent, over 10 s
  int64_t degraded_penalty = 500;  // health points selection takes off a degraded NI
  int64_t quiet_bytes = 1 << 20;   // latency is judged in seconds with less traffic than this
  // Every report_interval seconds a node with an MGS looks at its own problems (its NIs,
  // its peers, its settings) and sends them to the MGS when they changed -- and every 6
  // intervals while there are any -- so `pfsnet health` on any node lists every node's
  // (restart).
  double report_interval = 5;
  // A node starved of CPU (base/cpu_wait.h): its threads waited this long on average each
  // time they were woken, and 100 ms a second in all, for three seconds in a row; 0: never
  // judged. An idle host waits 0.05 ms, eight busy daemons on two cores 0.11 ms, a cgroup
  // quota of 1% 2-4 ms (restart).
  double cpu_starved_ms = 1.0;
  // SLOW_OPS (Ceph's osd_op_complaint_time): RPCs this node called or serves that have been
  // in flight this many seconds; the oldest's verdict (`pfsnet diag ops`) is the evidence.
  // 0: never listed. Takes effect at once.
  double slow_ops_s = 30;
  // And RPCs in flight over slow_ops_p99_factor x their type's p99 on this node (of the last
  // 5-10 minutes, once 100 of the type ran: RpcStats::type_p99), and at least
  // slow_ops_p99_min_s: a 20 ms write taking 3 s is listed long before 30 s. 0: that trigger
  // off. Take effect at once.
  double slow_ops_p99_factor = 10;
  double slow_ops_p99_min_s = 1;
};

// The probe mesh ([mesh], src/probe/mesh.h): every node probes `peers` others (the MGS
// assigns them, rotating every rotate_interval) on every path to them: a small probe each
// `interval` seconds, a bulk probe of `bulk_bytes` each way every `bulk_interval`; it sends
// its row of figures (its last `window` seconds) to the MGS every report_interval, or less
// often when the MGS says so: it keeps its syncs under mgs_sync_rate per second (at 100,000
// nodes and 500/s, every 200 s). A cell is an outlier when its p50
// is outlier_factor x the median and outlier_min_excess_ms above it, it lost more than
// loss_ratio of its probes, or its bulk throughput is below the median / outlier_factor of
// the paths of its speed class, its probe took throttled_min_excess_ms longer than one at
// that median, and its NIs carried no more than that either (a busy link is not a slow
// one). Every key takes effect at restart.
struct MeshConfig {
  bool enabled = true;
  int64_t peers = 8;
  double interval = 5;
  double bulk_interval = 30;
  int64_t bulk_bytes = 128 << 10;
  int64_t rotate_interval = 600;
  double report_interval = 15;
  int64_t mgs_sync_rate = 500;
  double outlier_factor = 3.0;
  double outlier_min_excess_ms = 5.0;
  double throttled_min_excess_ms = 10.0;
  double loss_ratio = 0.01;
  int64_t window = 90;
};

// The tuning advisor and auto-tune ([tune]; every key changes at run time).
struct TuneConfig {
  // Auto-tune: every `interval` seconds, raise or lower rpc.max_rpcs_in_flight and
  // lnet.peer_credits (and lnet.credits with them) within the bounds below, from the
  // measured throughput and latency.
  bool auto_tune = false;  // key "auto"
  double interval = 1.0;
  // Seconds between checks that the settings still fit the measured RTT, bandwidth and
  // number of peers (a warning event when they stop fitting).
  int64_t check_interval = 10;
  int64_t min_rpcs_in_flight = 8;
  int64_t max_rpcs_in_flight = 256;
  int64_t min_peer_credits = 8;
  int64_t max_peer_credits = 256;
  int64_t max_credits = 8192;
  // The links' rate when known (Mbit/s); 0: measured (traffic, pfsnet tune --probe).
  double link_mbit = 0;
};

// Encryption of pfsnet's connections ([tls]; off by default; every key takes effect at
// restart): TLS 1.3 on every TCP connection, before the cluster-key handshake, so all of
// a connection's bytes are encrypted and authenticated (src/transport/tls.h). Keyed from
// the cluster key (an external PSK derived from it) unless cert_file, key_file and ca_file
// are all set: then each end proves a certificate signed by ca_file. Both ends of a
// connection must agree; a node with TLS on refuses a plaintext peer by name. Kernel TLS
// carries the records when the kernel and OpenSSL have it.
struct TlsConfig {
  bool enabled = false;
  std::string cert_file, key_file, ca_file;
  // Who seals and opens the records after the handshake: "ipsec-mb" (pfsnet, with Intel's
  // multi-buffer AES-GCM: src/transport/tls_records.h) or "openssl" (OpenSSL's own record
  // layer). Either way they are TLS 1.3 records; the two ends may differ.
  std::string records = "ipsec-mb";
};

// The block service ([storage]; every key takes effect at restart): a node with targets
// is a block server (src/storage/block_service.h); the striped-file client's cache is
// sized here too (src/storage/striped_file.h).
struct StorageConfig {
  // "mem" (in memory), an absolute directory or a block device (/dev/...) per target;
  // none: not a block server.
  std::vector<std::string> targets;
  int64_t block_size = 256 << 10;       // the stripe unit; a power of two, <= stats.maxBlockSize
  int64_t buffers = 64;                 // block buffers (the paper's buddy buffers)
  int64_t threads = 4;                  // threads doing the targets' I/O
  double disk_mbyte = 0;                // emulated disk rate per target, MB/s (1024^2 B); 0: none
  int64_t capacity = int64_t{1} << 30;  // bytes per file per target ("mem": per target)
  // Client: the pagepool (bytes of cached and write-behind blocks) and how many blocks a
  // sequential reader has fetched ahead of it.
  int64_t pagepool = 100 << 20;
  int64_t prefetch_depth = 4;
  bool tokens = true;  // client: byte-range write tokens from the file's first server
};

struct Config {
  NodeConfig node;
  TlsConfig tls;
  std::vector<NetConfig> nets;
  LnetConfig lnet;
  RpcConfig rpc;
  StatsConfig stats;
  MembershipConfig membership;
  HealthConfig health;
  MeshConfig mesh;
  TuneConfig tune;
  StorageConfig storage;
  std::vector<EmulationConfig> emulation;
  std::vector<RouteConfig> routes;

  // Largest bulk an RPC may carry: 2 x maxBlockSize.
  int64_t max_bulk() const { return 2 * stats.maxBlockSize; }
};

// Parses TOML text; `origin` names the file in error messages.
Result<Config> parse_config(std::string_view toml_text, std::string_view origin);
// Reads and parses a file. Errors: "FILE:LINE: key 'section.key': reason".
Result<Config> load_config(const std::string& path);

// The whole effective configuration as TOML-like "section.key" -> value text, in file
// order, for `pfsnet config show`.
std::vector<std::pair<std::string, std::string>> config_entries(const Config& cfg);

// Applies "section.key=value" assignments (values in TOML syntax) to `cfg`, validating
// each exactly as the file parser does; on any error nothing is changed.
Status apply_config_assignments(Config* cfg, const std::vector<std::string>& assignments);

// Reads the cluster key: the file's bytes, at least 16, mode at most 0600.
Result<std::string> load_cluster_key(const std::string& path);
// Reads node.http_token_file: its contents without trailing whitespace, at least 16
// bytes, mode at most 0600.
Result<std::string> load_http_token(const std::string& path);

}  // namespace pfsnet
