#include "rpc/call_batch.h"

namespace pfsnet {

CallBatch::CallBatch(RpcEngine& rpc) : rpc_(rpc) {}

size_t CallBatch::add(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                      const CallOptions& co) {
  size_t i;
  {
    MutexLock lk(st_->mu);
    i = st_->replies.size();
    st_->replies.emplace_back();
    st_->ended.push_back(false);
    ++st_->left;
  }
  rpc_.call_async(
      dst, type, std::move(payload), std::move(bulk),
      [st = st_, i](RpcReply&& r) {
        MutexLock lk(st->mu);
        st->replies[i] = std::move(r);
        st->ended[i] = true;
        if (--st->left == 0) st->cv.notify_all();
      },
      co);
  return i;
}

bool CallBatch::wait(Duration d) {
  MutexLock lk(st_->mu);
  return rpc_.waiter().wait_until(lk, st_->cv, rpc_.clock().now() + d,
                                  [&]() REQUIRES(st_->mu) { return st_->left == 0; });
}

std::vector<RpcReply> CallBatch::take() {
  MutexLock lk(st_->mu);
  std::vector<RpcReply> out(st_->replies.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (st_->ended[i])
      out[i] = std::move(st_->replies[i]);
    else
      out[i].status = Status(Code::kTimeout, "no reply within the timeout");
  }
  return out;
}

}  // namespace pfsnet
