// CallBatch: RPCs sent at once and waited for together -- the shape of an IOBENCH phase to
// every client, a train of probes, a direct write's blocks. Each call's reply lands in its
// slot; wait() returns once every call has ended (each ends within its own timeout, with a
// reply or an error), or false past its deadline. A call not ended by then reads as
// kTimeout in take(). The batch's state outlives it: calls that end later change nothing.
//
// Threads: add() and wait() from one thread; the calls end on the engine's threads.
#pragma once

#include <memory>
#include <vector>

#include "base/mutex.h"
#include "rpc/rpc_engine.h"

namespace pfsnet {

class CallBatch {
 public:
  explicit CallBatch(RpcEngine& rpc);

  // Sends one call; its reply is take()[the index returned].
  size_t add(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk, const CallOptions& co);
  // Until every call added has ended, at most `d` on the engine's clock, waiting as the
  // engine's blocking callers do (RpcEngine::waiter). False: some had not.
  bool wait(Duration d);
  // Every reply in the order added, moved out (once, after wait()); a call that had not
  // ended: kTimeout.
  std::vector<RpcReply> take();

 private:
  struct State {
    Mutex mu;
    CondVar cv;
    std::vector<RpcReply> replies GUARDED_BY(mu);
    std::vector<bool> ended GUARDED_BY(mu);
    size_t left GUARDED_BY(mu) = 0;
  };
  RpcEngine& rpc_;
  std::shared_ptr<State> st_ = std::make_shared<State>();
};

}  // namespace pfsnet
