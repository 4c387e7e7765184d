// pfsnet_delay_line: a real round trip for kernel TCP, where the kernel has no netem.
//
// Two TUN devices are created here, one moved into each of two network namespaces (their
// descriptors stay valid across the move) and given an address, an MTU and a long
// transmit queue. What one namespace routes out of its device is read here, held by a
// DelaySchedule (loss, serialisation at a rate behind a tail-drop queue, the one-way
// delay) and written into the other device, where the other namespace's kernel receives
// it. TCP at both ends thus sees the round trip, the rate and the loss as it would on a
// long link: its congestion window, autotuned buffers and retransmissions are its own.
//
//   pfsnet_delay_line --a NS:DEV:ADDR/PREFIX --b NS:DEV:ADDR/PREFIX --delay-ms 25
//                     [--rate-mbit R] [--queue-kib Q] [--loss F] [--mtu 9000] [--gso]
//
// --delay-ms is one way (the RTT is twice it); --queue-kib defaults to the bandwidth-
// delay product of the round trip; --gso lets the kernels hand over TCP segments of up to
// 64 KiB at once (virtio-net headers) -- fewer packets to move, but a loss then drops a
// whole burst, so it is refused with --loss. The line prints "delay line ready" once both
// ends are up, a JSON line of its counters on SIGUSR1 and when it ends (SIGTERM, SIGINT),
// and closes the devices (the kernel removes them) as it exits.
//
// Threads: one per direction; the main thread waits for signals.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "delay_schedule.h"

extern char** environ;

namespace pfsnet::delay_line {
namespace {

std::atomic<bool> g_stop{false};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "pfsnet_delay_line: %s\n", what.c_str());
  std::exit(2);
}

Nanos now() {
  return std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch());
}

// Runs `ip ARGS...` (iproute2; PATH searched when not in a usual place) and waits for it;
// dies when it fails.
void ip(std::vector<std::string> args) {
  std::string bin = "ip";
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (access(p, X_OK) == 0) {
      bin = p;
      break;
    }
  args.insert(args.begin(), bin);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0)
    die("cannot run ip: " + std::string(std::strerror(errno)));
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::string line;
    for (auto& a : args) line += a + " ";
    die("failed: " + line);
  }
}

struct End {
  std::string ns, dev, addr;  // addr with its prefix, e.g. 198.18.50.1/24
  int fd = -1;
};

End parse_end(const std::string& s) {
  End e;
  size_t a = s.find(':'), b = s.find(':', a == std::string::npos ? a : a + 1);
  if (a == std::string::npos || b == std::string::npos)
    die("an end is NS:DEV:ADDR/PREFIX, not '" + s + "'");
  e.ns = s.substr(0, a);
  e.dev = s.substr(a + 1, b - a - 1);
  e.addr = s.substr(b + 1);
  if (e.ns.empty() || e.dev.empty() || e.dev.size() >= IFNAMSIZ ||
      e.addr.find('/') == std::string::npos)
    die("an end is NS:DEV:ADDR/PREFIX (DEV at most 15 characters), not '" + s + "'");
  return e;
}

// Creates the TUN device, moves it into its namespace and brings it up there.
void open_end(End& e, int mtu, bool gso) {
  e.fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (e.fd < 0) die("open /dev/net/tun: " + std::string(std::strerror(errno)));
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI | (gso ? IFF_VNET_HDR : 0);
  std::strncpy(ifr.ifr_name, e.dev.c_str(), IFNAMSIZ - 1);
  if (ioctl(e.fd, TUNSETIFF, &ifr) != 0)
    die("TUNSETIFF " + e.dev + ": " + std::string(std::strerror(errno)));
  if (gso) {
    unsigned off = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
    if (ioctl(e.fd, TUNSETOFFLOAD, off) != 0)
      die("TUNSETOFFLOAD " + e.dev + ": " + std::string(std::strerror(errno)));
  }
  fcntl(e.fd, F_SETFL, fcntl(e.fd, F_GETFL) | O_NONBLOCK);
  ip({"link", "set", "dev", e.dev, "netns", e.ns});
  ip({"-n", e.ns, "addr", "add", e.addr, "dev", e.dev});
  ip({"-n", e.ns, "link", "set", "dev", e.dev, "mtu", std::to_string(mtu), "txqueuelen", "10000",
      "up"});
}

// struct virtio_net_hdr of <linux/virtio_net.h> (that header does not compile as C++):
// what the kernel puts before each packet of a device opened with IFF_VNET_HDR.
struct VnetHdr {
  uint8_t flags, gso_type;  // gso_type 0: VIRTIO_NET_HDR_GSO_NONE
  uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
static_assert(sizeof(VnetHdr) == 10);

struct Packet {
  Nanos due;
  size_t len;
  std::unique_ptr<uint8_t[]> data;
};

// One direction: reads `in`, holds, writes `out`.
class Direction {
 public:
  Direction(const DirectionOptions& o, int in, int out, size_t buf_size, bool gso)
      : sched_(o), in_(in), out_(out), buf_size_(buf_size), gso_(gso) {}

  void run() {
    while (!g_stop.load(std::memory_order_relaxed)) {
      deliver_due();
      Nanos wait = std::chrono::milliseconds(100);
      if (!held_.empty()) wait = std::max(Nanos(0), std::min(wait, held_.front().due - now()));
      pollfd p{in_, POLLIN, 0};
      timespec ts{static_cast<time_t>(wait.count() / 1'000'000'000),
                  static_cast<long>(wait.count() % 1'000'000'000)};
      if (ppoll(&p, 1, &ts, nullptr) > 0) read_all();
    }
  }

  uint64_t write_errors() const { return write_errors_.load(); }
  // Copies of the counters for the main thread's reports (taken after each batch).
  DirectionCounters snapshot() const {
    DirectionCounters c;
    c.packets = packets_.load();
    c.bytes = bytes_.load();
    c.lost = lost_.load();
    c.queue_drops = drops_.load() + pool_drops_.load();
    c.max_queue_bytes = max_queue_.load();
    return c;
  }

 private:
  static constexpr size_t kMaxHeld = 1 << 17;  // packets held at once (memory bound)

  std::unique_ptr<uint8_t[]> take() {
    if (free_.empty()) return std::make_unique<uint8_t[]>(buf_size_);
    auto b = std::move(free_.back());
    free_.pop_back();
    return b;
  }

  // The bytes a packet takes on the wire: a GSO burst is several segments, each with the
  // headers.
  size_t wire_bytes(const uint8_t* p, size_t n) const {
    if (!gso_) return n;
    VnetHdr h;
    std::memcpy(&h, p, sizeof(h));
    size_t body = n - sizeof(h);
    if (h.gso_type == 0 || h.gso_size == 0 || h.hdr_len >= body) return body;
    size_t segs = (body - h.hdr_len + h.gso_size - 1) / h.gso_size;
    return body + (segs - 1) * h.hdr_len;
  }

  void read_all() {
    for (int i = 0; i < 256; ++i) {
      auto b = take();
      ssize_t n = read(in_, b.get(), buf_size_);
      if (n <= 0) {
        free_.push_back(std::move(b));
        break;
      }
      Nanos t = now();
      auto due = sched_.admit(t, wire_bytes(b.get(), size_t(n)));
      if (!due || held_.size() >= kMaxHeld) {
        if (due) pool_drops_.fetch_add(1);
        free_.push_back(std::move(b));
        continue;
      }
      held_.push_back(Packet{*due, size_t(n), std::move(b)});
    }
    publish();
  }

  void deliver_due() {
    Nanos t = now();
    while (!held_.empty() && held_.front().due <= t) {
      Packet& p = held_.front();
      if (write(out_, p.data.get(), p.len) < 0) write_errors_.fetch_add(1);
      free_.push_back(std::move(p.data));
      held_.pop_front();
    }
  }

  void publish() {
    const DirectionCounters& c = sched_.counters();
    packets_.store(c.packets);
    bytes_.store(c.bytes);
    lost_.store(c.lost);
    drops_.store(c.queue_drops);
    max_queue_.store(c.max_queue_bytes);
  }

  DelaySchedule sched_;
  int in_, out_;
  size_t buf_size_;
  bool gso_;
  std::deque<Packet> held_;
  std::vector<std::unique_ptr<uint8_t[]>> free_;
  std::atomic<uint64_t> pool_drops_{0}, write_errors_{0};
  std::atomic<uint64_t> packets_{0}, bytes_{0}, lost_{0}, drops_{0}, max_queue_{0};
};

std::string fmt_mbit(double r) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", r);
  return s;
}

void report(const Direction& ab, const Direction& ba) {
  auto one = [](const Direction& d) {
    DirectionCounters c = d.snapshot();
    char s[256];
    std::snprintf(s, sizeof s,
                  "{\"packets\": %llu, \"bytes\": %llu, \"lost\": %llu, \"queue_drops\": %llu, "
                  "\"max_queue_bytes\": %llu, \"write_errors\": %llu}",
                  (unsigned long long)c.packets, (unsigned long long)c.bytes,
                  (unsigned long long)c.lost, (unsigned long long)c.queue_drops,
                  (unsigned long long)c.max_queue_bytes, (unsigned long long)d.write_errors());
    return std::string(s);
  };
  std::printf("{\"a_to_b\": %s, \"b_to_a\": %s}\n", one(ab).c_str(), one(ba).c_str());
  std::fflush(stdout);
}

int main_(int argc, char** argv) {
  std::string a_spec, b_spec;
  double delay_ms = -1, rate_mbit = 0, loss = 0, queue_kib = -1;
  int mtu = 9000;
  bool gso = false;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(k + " needs a value");
      return argv[++i];
    };
    auto num = [&]() {
      std::string v = val();
      char* end = nullptr;
      double d = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || d < 0) die(k + ": not a number >= 0: '" + v + "'");
      return d;
    };
    if (k == "--a")
      a_spec = val();
    else if (k == "--b")
      b_spec = val();
    else if (k == "--delay-ms")
      delay_ms = num();
    else if (k == "--rate-mbit")
      rate_mbit = num();
    else if (k == "--queue-kib")
      queue_kib = num();
    else if (k == "--loss")
      loss = num();
    else if (k == "--mtu")
      mtu = static_cast<int>(num());
    else if (k == "--seed")
      seed = static_cast<uint64_t>(num());
    else if (k == "--gso")
      gso = true;
    else
      die("unknown argument '" + k + "' (see the head of tools/delay_line/delay_line.cc)");
  }
  if (a_spec.empty() || b_spec.empty() || delay_ms < 0)
    die("usage: --a NS:DEV:ADDR/PREFIX --b NS:DEV:ADDR/PREFIX --delay-ms D [--rate-mbit R] "
        "[--queue-kib Q] [--loss F] [--mtu M] [--seed S] [--gso]");
  if (loss >= 1) die("--loss is a fraction below 1");
  if (gso && loss > 0) die("--gso drops whole bursts: use it without --loss");
  if (mtu < 576 || mtu > 65000) die("--mtu: 576..65000");
  End a = parse_end(a_spec), b = parse_end(b_spec);

  DirectionOptions o;
  o.delay = Nanos(static_cast<int64_t>(delay_ms * 1e6));
  o.rate_bps = rate_mbit * 1e6;
  o.loss = loss;
  if (queue_kib >= 0) {
    o.queue_bytes = static_cast<size_t>(queue_kib * 1024);
  } else if (rate_mbit > 0) {
    // One round trip's worth of the rate: the classic router buffer rule.
    o.queue_bytes =
        std::max<size_t>(64 * 1024, static_cast<size_t>(o.rate_bps / 8 * 2 * delay_ms / 1e3));
  }

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // the threads inherit it; main waits for them
  prctl(PR_SET_TIMERSLACK, 1000UL);           // wake within a microsecond of a packet's time

  open_end(a, mtu, gso);
  open_end(b, mtu, gso);
  size_t buf = gso ? 65536 + sizeof(VnetHdr) : size_t(mtu) + 64;
  DirectionOptions ob = o;
  ob.seed = seed + 1;
  o.seed = seed;
  Direction ab(o, a.fd, b.fd, buf, gso), ba(ob, b.fd, a.fd, buf, gso);
  std::thread t1([&] { ab.run(); }), t2([&] { ba.run(); });
  std::printf(
      "delay line ready: %s (%s) <-> %s (%s), %.3f ms each way, %s, loss %g, queue %zu "
      "KiB, MTU %d%s\n",
      a.addr.c_str(), a.ns.c_str(), b.addr.c_str(), b.ns.c_str(), delay_ms,
      rate_mbit > 0 ? (fmt_mbit(rate_mbit) + " Mbit/s").c_str() : "no rate limit", loss,
      o.queue_bytes / 1024, mtu, gso ? ", GSO" : "");
  std::fflush(stdout);
  for (;;) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGUSR1) {
      report(ab, ba);
      continue;
    }
    break;
  }
  g_stop.store(true);
  t1.join();
  t2.join();
  report(ab, ba);
  close(a.fd);
  close(b.fd);
  return 0;
}

}  // namespace
}  // namespace pfsnet::delay_line

int main(int argc, char** argv) { return pfsnet::delay_line::main_(argc, argv); }
