// Test helpers shared by the transport tests: patterned buffers and request frames, a
// recorder of transport events and a connect result to wait for.
// Thread safety: the functions are pure; Recorder and ConnectResult lock their state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/transport.h"

namespace pfsnet::test {

// n bytes of a pattern that differs per seed and per position (a shifted or swapped
// byte shows).
inline Buffer pattern(size_t n, uint8_t seed) {
  Buffer b(n);
  for (size_t i = 0; i < n; ++i) b.data()[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 8));
  return b;
}

// A request of `type` whose payload and bulk are patterns seeded from `xid`.
inline std::unique_ptr<OutFrame> frame(uint64_t xid, size_t payload, size_t bulk,
                                       TxCompletion* done, uint32_t type = 3) {
  auto f = std::make_unique<OutFrame>();
  f->hdr.kind = FrameKind::kRequest;
  f->hdr.xid = xid;
  f->hdr.msg_type = type;
  f->payload = pattern(payload, static_cast<uint8_t>(xid));
  if (bulk) f->bulk = make_bulk(pattern(bulk, static_cast<uint8_t>(xid + 1)));
  f->done = done;
  return f;
}

// Records transport events; waits are bounded.
class Recorder : public TransportEvents {
 public:
  void on_connected(const ConnectionPtr& c) override {
    std::lock_guard lk(mu_);
    conns.push_back(c);
    cv_.notify_all();
  }
  void on_frame(Connection&, InFrame&& f) override {
    std::lock_guard lk(mu_);
    frames.push_back(std::move(f));
    cv_.notify_all();
  }
  void on_closed(Connection&, const Status& why) override {
    std::lock_guard lk(mu_);
    closed.push_back(why);
    cv_.notify_all();
  }
  template <class Pred>
  bool wait(Pred p, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, limit, p);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ConnectionPtr> conns;
  std::vector<InFrame> frames;
  std::vector<Status> closed;
};

// The outcome of one Transport::connect; wait() is bounded.
struct ConnectResult {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  ConnectionPtr conn;
  ConnectCallback cb() {
    return [this](Result<ConnectionPtr> r) {
      std::lock_guard lk(mu);
      done = true;
      if (r.ok())
        conn = *r;
      else
        status = r.status();
      cv.notify_all();
    };
  }
  bool wait() {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(10), [&] { return done; });
  }
};

inline bool same(const Buffer& b, const Buffer& expect) {
  return b.size() == expect.size() &&
         (b.empty() || std::memcmp(b.data(), expect.data(), b.size()) == 0);
}

}  // namespace pfsnet::test
