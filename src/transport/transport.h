// The transport interface (an LND, in LNet's words): authenticated connections that carry
// frames between a local NI and a peer NI. TcpTransport (real sockets, asio),
// FabricTransport (libfabric: RDMA, `@o2ib`) and MemTransport (in-memory, for unit tests
// and simulation).
//
// Threads: each Connection belongs to one I/O thread; TransportEvents callbacks for it run
// there. Connection::send and Connection::close may be called from any thread.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/clock.h>
#include <pfsnet/config.h>
#include <pfsnet/ni_info.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/free_list.h"
#include "base/mutex.h"
#include "transport/link_pipe.h"
#include "wire/frame.h"
#include "wire/handshake.h"
#include "wire/payload.h"

namespace pfsnet {

// Per-frame timing hooks, consumed by the RPC statistics.
struct TxTimes {
  TimePoint write_start;  // first byte handed to the socket
  TimePoint write_done;   // last byte handed to the socket
  // Filled by the net layer: the path the frame took (Nid() = none) and the connection it
  // was handed to (0 = it never reached one).
  Nid local_nid, peer_nid;
  uint64_t conn_id = 0;
  // The frame went to a router for a NID on another network (peer_nid is the gateway's,
  // route_dst the far end's: the one whose health a silence is held against).
  bool routed = false;
  Nid route_dst;
};
struct RxTimes {
  TimePoint first_byte;  // read that brought the frame's first byte completed
  TimePoint complete;    // frame completely received
};

// Told once when a frame has been written (ok) or cannot be (the connection closed).
class TxCompletion {
 public:
  virtual ~TxCompletion() = default;
  // Runs on the sending thread or the connection's I/O thread; must not block.
  virtual void on_tx_done(const Status& s, const TxTimes& t) = 0;
};

struct OutFrame {
  PFSNET_THREAD_FREE_LIST(OutFrame)
  FrameHeader hdr;  // hdr.credits is filled by the transport when the frame is encoded
  Payload payload;
  // The data checksum (wire/data_crc.h, flag kFlagDataCrc) when `sealed`: the transport
  // writes it right after the payload, counted in the payload's length on the wire --
  // which is then the sealed payload a receiver checks -- so the payload is never copied
  // to be sealed.
  uint8_t seal[kDataCrcSize] = {};
  bool sealed = false;
  BulkData bulk;                 // may be null; kept alive until the frame is written
  size_t bulk_limit = SIZE_MAX;  // send only the first bulk_limit bytes of `bulk`
  // The CRC-32C of the bulk sent (its first bulk_size() bytes) when whoever supplied it
  // knows it: sealing then joins it to the payload's (wire/data_crc.h), no pass over it.
  std::optional<uint32_t> bulk_crc;
  TxCompletion* done = nullptr;  // optional; must outlive the frame's completion
  // hdr.credits is set already (by a decorator that holds frames, with the credits owed
  // when the frame entered the hold): the transport writes it as it is.
  bool credits_set = false;
  // A request: the most bulk its reply may carry (0: none expected). An RDMA transport
  // may offer registered memory of that size with the request, for the server to write
  // the reply's bulk into (o2iblnd's GET); others ignore it.
  size_t reply_sink = 0;
  // Not on a bulk connection of the path (Net; CallOptions::one_stream).
  bool one_stream = false;

  size_t bulk_size() const { return bulk ? std::min(bulk->size(), bulk_limit) : 0; }
  // The payload's length on the wire: with the seal when sealed.
  size_t payload_len() const { return payload.size() + (sealed ? kDataCrcSize : 0); }
  // The payload as the wire carries it (sealed: a copy with the seal appended), for a
  // transport that needs it in one piece.
  Buffer wire_payload() const;
};

struct InFrame {
  FrameHeader hdr;
  Buffer payload;
  Buffer bulk;
  // The CRC-32C of `bulk` as received: taken by a transport that reads the bulk in pieces
  // as each came in (still in the CPU's cache; TCP, for frames that arrived sealed), or by
  // the Net checking the seal. Once the seal checked, the sender's.
  std::optional<uint32_t> bulk_crc;
  RxTimes times;
};

class Connection {
 public:
  virtual ~Connection() = default;

  // Queues `f` for writing; writes it at once on the calling thread when the socket is
  // free. f->done is called exactly once. On a closed connection it fails with kClosed.
  virtual void send(std::unique_ptr<OutFrame> f) = 0;
  // Closes the connection; idempotent. Queued frames fail; on_closed follows once.
  virtual void close(const Status& why) = 0;
  // Runs `fn` on this connection's I/O thread.
  virtual void post(std::function<void()> fn) = 0;
  virtual bool is_open() const = 0;
  // The kernel's figures of the connection's TCP socket (TCP_INFO); nullopt when it has
  // none (not TCP, or closed). `with_buffers`: also the socket buffers in force (two more
  // system calls: for views, not for once-a-second sampling). Any thread; a system call,
  // so not for the send path.
  virtual std::optional<TcpKernelInfo> kernel_tcp_info(bool with_buffers) const {
    (void)with_buffers;
    return std::nullopt;
  }
  // Receive by the waiter: a thread that blocks for a reply coming on this connection
  // waits on the socket itself and reads and delivers what comes (on_frame on this thread,
  // in order with the I/O thread's), so its reply costs one thread wake-up -- its own --
  // not two (the I/O thread's, then the caller's). Returns kDone once `done` holds (a
  // frame this thread delivered set it), kWoken when `wake_fd` (an eventfd) became
  // readable (the reply came another way), kTimedOut after `max_wait`, kNo at once or
  // later when it cannot or can no longer (another thread reads the connection, a large
  // frame or a failure is the I/O thread's to handle, TLS, closed, a transport without
  // such a path): then the caller waits as usual. Any thread but an I/O thread.
  enum class Here { kNo, kDone, kWoken, kTimedOut };
  virtual Here receive_here(const std::atomic<bool>& done, Duration max_wait, int wake_fd) {
    (void)done;
    (void)max_wait;
    (void)wake_fd;
    return Here::kNo;
  }

  const Nid& local_nid() const { return local_; }
  // The NIDs the peer announced in the handshake; [0] is the NI at the other end.
  const std::vector<Nid>& peer_nids() const { return peer_nids_; }
  const Nid& peer_nid() const { return peer_nids_.front(); }
  bool outgoing() const { return outgoing_; }
  // One of its path's bulk connections (Transport::connect_bulk; the handshake says so to
  // the other end): it carries large messages only.
  bool bulk() const { return bulk_; }
  uint64_t id() const { return id_; }
  // What the connection speaks, from its handshake: the wire version, the features both
  // ends announced, and the peer's own versions, features, release and instance. A frame's
  // extension fields (FrameHeader::ext) travel only where these features allow.
  const WireSession& wire() const { return wire_; }
  std::string describe() const {
    return local_.to_string() + (outgoing_ ? " -> " : " <- ") +
           (peer_nids_.empty() ? std::string("?") : peer_nids_[0].to_string());
  }

  // The upper layer's state of this connection (LNet's `private`): set once, in
  // TransportEvents::on_connected, before the connection is used anywhere else; read with
  // every frame, so the upper layer looks nothing up per frame. It lives as long as the
  // connection (so it must not own the connection).
  void set_upper(std::shared_ptr<void> s) { upper_ = std::move(s); }
  const std::shared_ptr<void>& upper() const { return upper_; }

  // Credits: the receiver returns credits for frames it has consumed. They ride on the
  // next frame written in the other direction (hdr.credits), or on a kCredit frame.
  void add_credits_to_return(uint32_t n) { credits_to_return_.fetch_add(n); }
  uint32_t credits_to_return() const { return credits_to_return_.load(); }
  uint32_t take_credits_to_return() {
    uint32_t n = credits_to_return_.exchange(0);
    if (n && rx_window()) rx_unreturned_.fetch_sub(n, std::memory_order_relaxed);
    return n;
  }
  // The receive window (kFeatureWindow): where one was granted, a receiver counts each
  // request and reply that arrives until its credit is written back, and closes the
  // connection when its peer has more out than the largest window it granted. Elsewhere
  // nothing is counted (a window is granted before the first frame, and never taken back).
  // Returns the count with this frame (I/O thread).
  uint32_t count_received() { return rx_unreturned_.fetch_add(1, std::memory_order_relaxed) + 1; }
  // The largest window granted on this connection (0: none, nothing is enforced).
  uint32_t rx_window() const { return rx_window_.load(std::memory_order_relaxed); }
  void grant_rx_window(uint32_t w) {
    uint32_t cur = rx_window_.load(std::memory_order_relaxed);
    while (w > cur && !rx_window_.compare_exchange_weak(cur, w, std::memory_order_relaxed)) {
    }
  }
  // Returns one credit for a consumed frame. When `high_water` or more are owed, an
  // explicit kCredit frame carries them at once (one at a time: it is posted to the I/O
  // thread, and whatever is owed when it runs goes on it); otherwise they wait for the
  // next frame in the other direction. Any thread.
  static void return_credit(const std::shared_ptr<Connection>& c, uint32_t high_water);
  // Sends whatever credits are owed now on an explicit credit frame (nothing when none
  // are, or one is on its way). For credits nothing else carries back: a reply that left
  // on another connection of the same path, an idle connection.
  static void flush_credits(const std::shared_ptr<Connection>& c);

 protected:
  Nid local_;
  std::vector<Nid> peer_nids_;
  bool outgoing_ = false;
  bool bulk_ = false;  // set before the connection is reported, fixed after
  uint64_t id_ = 0;
  WireSession wire_;  // set before the connection is reported, fixed after

 private:
  std::shared_ptr<void> upper_;
  std::atomic<uint32_t> credits_to_return_{0};
  std::atomic<bool> credit_flush_pending_{false};
  std::atomic<uint32_t> rx_unreturned_{0}, rx_window_{0};
};

using ConnectionPtr = std::shared_ptr<Connection>;

// A new Connection::id, unique in the process: the connections of a node's transports
// (one per net type) never share one. Any thread.
uint64_t new_connection_id();

class TransportEvents {
 public:
  virtual ~TransportEvents() = default;
  // A connection finished its handshake (either direction); before any on_frame of it.
  virtual void on_connected(const ConnectionPtr& c) = 0;
  // A complete frame arrived. I/O thread of `c`.
  virtual void on_frame(Connection& c, InFrame&& f) = 0;
  // `c` closed; called once, after its last on_frame.
  virtual void on_closed(Connection& c, const Status& why) = 0;
  // Memory of h.bulk_len bytes to receive the bulk of the frame whose header `h` just
  // came on `c` into, instead of a buffer of the transport's own: a reply whose caller
  // lent its own memory (CallOptions::reply_memory), which then takes one copy fewer.
  // The transport writes it until it delivers the frame in it or lets it go (the
  // connection closed); whoever lent it learns that when the Buffer is freed. I/O thread
  // (or a caller reading the connection); default: none. A transport that places bulk by
  // RDMA or holds frames (emulation) does not ask.
  virtual std::optional<Buffer> bulk_sink(Connection& c, const FrameHeader& h) {
    (void)c;
    (void)h;
    return std::nullopt;
  }
  // The transport found local NI `local` unusable (its device was removed): LOCAL_NI_DOWN
  // until its link is reported up again. I/O thread; default: ignored.
  virtual void on_local_ni_down(const Nid& local, const Status& why) {
    (void)local;
    (void)why;
  }
  // The cluster's minimum release level as the node knows it (wire/handshake.h,
  // kReleaseLevel): a handshake from now on refuses a peer below it. Any thread, cheap (read
  // at every handshake); default 1: every peer is taken.
  virtual uint16_t min_peer_level() const { return 1; }
  // The receive window a handshake from now on grants its peer (WireSpeaks::window): the
  // requests and replies in flight this end takes on one connection. Any thread, cheap;
  // default 0: none granted (the window feature is not announced).
  virtual uint32_t rx_window() const { return 0; }
};

// What a handshake of a transport with options `wire` and owner `ev` speaks: the options'
// versions and features under the owner's release level now.
inline WireSpeaks speaks_now(const WireSpeaks& wire, const TransportEvents& ev) {
  WireSpeaks w = wire;
  w.min_peer_level = ev.min_peer_level();
  w.window = ev.rx_window();
  return w;
}

class TlsContext;

// A node's cluster keys (wire/handshake.h's ClusterKeys), shared: every copy of a ring sees
// the keys set() on any (a node's transports copy their options; the daemon changes the
// keys when it re-reads their files, on SIGHUP). A ring made of a string holds that key.
class ClusterKeyRing {
 public:
  ClusterKeyRing(ClusterKeys keys = {});  // NOLINT: a string or ClusterKeys converts
  ClusterKeyRing(std::string key) : ClusterKeyRing(ClusterKeys(std::move(key))) {}  // NOLINT
  ClusterKeyRing(const char* key) : ClusterKeyRing(ClusterKeys(key)) {}             // NOLINT
  ClusterKeys get() const;
  void set(ClusterKeys keys);

 private:
  struct Shared {
    mutable Mutex mu;
    ClusterKeys keys GUARDED_BY(mu);
  };
  std::shared_ptr<Shared> s_;
};

struct TransportOptions {
  // The shared secret and, during a rotation, the next or previous one; both ends must
  // hold the same bytes.
  ClusterKeyRing cluster_key;
  // TLS 1.3 on every TCP connection (tls.h); null: plaintext (tls.enabled = false).
  std::shared_ptr<const TlsContext> tls;
  FrameLimits limits;
  int io_threads = 1;  // each connection is served by one (TcpTransport)
  // SO_SNDBUF and SO_RCVBUF of TCP connections (lnet.tx_buffer_size, rx_buffer_size);
  // 0: not set, the kernel's autotuning sizes them (up to net.ipv4.tcp_wmem/tcp_rmem).
  int tx_buffer_bytes = 0, rx_buffer_bytes = 0;
  // How long an I/O thread polls for more work before it sleeps (lnet.busy_poll_us);
  // 0: it sleeps at once.
  std::chrono::microseconds busy_poll{0};
  // The versions and features this node speaks, its release and its instance, for every
  // handshake (a transport that cannot carry version 2 lowers max_version for its own).
  WireSpeaks wire;
  Duration handshake_timeout = std::chrono::seconds(5);
  Duration connect_timeout = std::chrono::seconds(5);
  // TCP: a frame's bulk of this many bytes or more is sent zero-copy (MSG_ZEROCOPY; the
  // kernel pins it and the connection keeps it until the kernel is done: tcp_zerocopy.h)
  // on plaintext connections (lnet.zc_min_payload, socklnd's); 0: always copied.
  size_t zc_min_payload = 0;
  // Tests: go on sending zero-copy where the kernel copies every such send (loopback), so
  // the path runs there; a connection otherwise stops after its first few.
  bool zc_keep_when_copied = false;
};

// A TCP transport's zero-copy sends, over its connections, open and closed.
struct ZeroCopyStats {
  uint64_t sends = 0;            // zero-copy send calls made
  uint64_t completed = 0;        // of them, completed by the kernel (their bulk let go)
  uint64_t copied = 0;           // of those, copied by the kernel after all
  uint64_t fallback_copies = 0;  // bulk copied instead (ENOBUFS: net.core.optmem_max)
  uint64_t turned_off = 0;       // connections that stopped: their sends were all copied
  void add(const ZeroCopyStats& o) {
    sends += o.sends;
    completed += o.completed;
    copied += o.copied;
    fallback_copies += o.fallback_copies;
    turned_off += o.turned_off;
  }
};

// The options a node's config gives its transport: the key, the frame limits (2 x
// maxBlockSize of bulk) and TLS (tls.*: an error names a bad certificate file, or an
// @o2ib NI, which TLS does not cover).
Result<TransportOptions> transport_options(const Config& cfg, ClusterKeys cluster_key);

// A node's cluster keys from `path` (node.cluster_key_file) and, during a rotation, the
// files beside it: `path`.next (the next key, taken in before the commit) and `path`.prev
// (the previous one, kept after it). Each is load_cluster_key's (at least 16 bytes, mode
// 0600 or stricter); a missing .next or .prev is no key, a bad one an error naming it, as
// are both at once (a commit not retired before the next rotation began).
Result<ClusterKeys> load_cluster_keys(const std::string& path);

// lnet.io_threads = 0's count on a process that may run on `cpus` CPUs: socklnd's, half of
// them (it leaves the rest to the layers above) but at least 3, and at most `cpus`.
int default_io_threads(int cpus);
// The TCP I/O threads `cfg` gives this process: lnet.io_threads, or for 0 the count above
// over the CPUs it may run on (sched_getaffinity).
int io_threads_in_force(const Config& cfg);

// The [[emulation]] rules of a node's config (for EmulatingTransport), each logged as a
// warning: such a node does not run at the speed of its network.
std::vector<EmulationRule> emulation_rules(const Config& cfg);

using ConnectCallback = std::function<void(Result<ConnectionPtr>)>;

class Transport {
 public:
  virtual ~Transport() = default;
  // Accepts connections to `local` on `port`. Incoming connections are authenticated, then
  // reported through on_connected.
  virtual Status listen(const Nid& local, uint16_t port) = 0;
  // Connects from `local` to `remote`:`port` and authenticates. `cb` runs once on an I/O
  // thread with the connection (after on_connected) or an error carrying its health kind.
  virtual void connect(const Nid& local, const Nid& remote, uint16_t port, ConnectCallback cb) = 0;
  // As connect(), for one of the path's bulk connections (lnet.conns_per_peer): both ends'
  // Connection::bulk() says so. A transport without them makes an ordinary connection.
  virtual void connect_bulk(const Nid& local, const Nid& remote, uint16_t port,
                            ConnectCallback cb) {
    connect(local, remote, port, std::move(cb));
  }
  // Whether connect_bulk makes bulk connections from `local`.
  virtual bool has_bulk_connections(const Nid& local) const {
    (void)local;
    return false;
  }
  // Runs `fn` on an I/O thread.
  virtual void post(std::function<void()> fn) = 0;
  // Progress by the waiter (Mercury's HG_Progress, UCX's worker progress): a thread that
  // waits for a reply runs the transport's ready completions itself instead of waiting for
  // an I/O thread to wake and hand them over. Callbacks then run on the calling thread,
  // still one at a time with the I/O thread's. Returns whether it did any work: false at
  // once when another thread is at it, from inside a callback, after stop(), or when the
  // transport has no such path (sockets: their waiter reads the socket itself,
  // Connection::receive_here). Any thread.
  virtual bool progress() { return false; }
  // TCP connections made or accepted from now on get these SO_SNDBUF and SO_RCVBUF (0:
  // not set, kernel autotuning); open connections keep theirs. Transports without TCP
  // sockets ignore it. Any thread.
  virtual void set_socket_buffers(int tx_bytes, int rx_bytes) {
    (void)tx_bytes;
    (void)rx_bytes;
  }
  // Closes every connection and listener and stops the I/O threads. No callbacks after.
  virtual void stop() = 0;
};

}  // namespace pfsnet
