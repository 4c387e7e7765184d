// What the fair request scheduling policy (rpc/nrs.h, issue 72) costs a server per request:
// one request through RequestScheduler -- submitted, started, its slot given back -- with
// 1, 16 and 1,000 clients sending, beside the same request through a mutex-guarded
// first-come-first-served queue (what any queue in front of a handler costs) measured in the
// same run, and beside the server's time per 64 B RPC at this machine's rate (1 / the
// rpc_rate_64b of docs/performance.md is about 5 us). Under fifo the server does none of
// this: one atomic load per request. One JSON line per figure.
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <vector>

#include "base/mutex.h"
#include "figure.h"
#include "rpc/request_scheduler.h"

using namespace pfsnet;

namespace {

constexpr int kRequests = 2'000'000;

double ns_per(std::chrono::steady_clock::time_point t0, int n) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         n;
}

// The fair policy: `flows` clients round-robin, 16 slots, each request started at once (its
// slot kept) and given back when 16 are in service -- the steady state of a busy server.
double fair_ns(int flows) {
  MonotonicClock clock;
  RequestScheduler s(clock, FairShareOptions{.slots = 16});
  std::vector<NrsFlowKey> keys;
  for (int i = 0; i < flows; ++i) {
    Nid n = *Nid::parse("198.18.0.1@tcp");
    n.set_ipv4(0xC6120000u + 2 + static_cast<uint32_t>(i));
    keys.push_back(NrsFlowKey{n, ""});
  }
  std::deque<RequestScheduler::Slot> in_service;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRequests; ++i) {
    s.submit(keys[i % flows], 64,
             [&](RequestScheduler::Slot slot) { in_service.push_back(std::move(slot)); });
    while (in_service.size() >= 16) in_service.pop_front();  // gives its slot back
  }
  in_service.clear();
  return ns_per(t0, kRequests);
}

// The baseline: the same request through a mutex-guarded FIFO of closures.
double fifo_queue_ns() {
  Mutex mu;
  std::deque<std::function<void()>> q;
  uint64_t ran = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRequests; ++i) {
    {
      MutexLock lk(mu);
      q.push_back([&ran] { ++ran; });
    }
    std::function<void()> f;
    {
      MutexLock lk(mu);
      f = std::move(q.front());
      q.pop_front();
    }
    f();
  }
  const double ns = ns_per(t0, kRequests);
  if (ran != uint64_t(kRequests)) std::fprintf(stderr, "fifo baseline lost requests\n");
  return ns;
}

}  // namespace

int main() {
  const double base = fifo_queue_ns();
  for (int flows : {1, 16, 1000}) {
    char name[64];
    std::snprintf(name, sizeof name, "nrs_fair_ns_per_request_%d_clients", flows);
    print_figure(name, fair_ns(flows), base, "ns");
  }
  return 0;
}
