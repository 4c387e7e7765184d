// A fabric connection's set-up (endpoint, buffers), handshake (wire/handshake.h, one frame
// at a time) and close (fabric_internal.h).
#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "transport/fabric_health.h"
#include "transport/fabric_internal.h"

namespace pfsnet::fabric_detail {

FabConn::FabConn(FabricTransport::Impl& t, FabNi& ni, bool outgoing, uint64_t id) : t_(t), ni_(ni) {
  local_ = ni.nid;
  outgoing_ = outgoing;
  id_ = id;
  msg_size_ = t.fopts_.msg_size;
  rx_depth_ = t.fopts_.rx_depth;
  tx_bufs_ = rx_depth_ + 4;
}

FabConn::~FabConn() {
  close_fid(rx_mr_ ? &rx_mr_->fid : nullptr);
  close_fid(tx_mr_ ? &tx_mr_->fid : nullptr);
  for (Op* op : reads_) delete op;
  for (Op* op : writes_) delete op;
}

Status FabConn::open_endpoint(fi_info* info) {
  int rc = fi_endpoint(ni_.domain, info, &ep_, this);
  if (rc == 0) rc = fi_ep_bind(ep_, &ni_.eq->fid, 0);
  if (rc == 0) rc = fi_ep_bind(ep_, &ni_.cq->fid, FI_TRANSMIT | FI_RECV);
  if (rc == 0) rc = fi_enable(ep_);
  if (rc != 0) return Status(Code::kInternal, "fabric endpoint: " + fi_error(rc));
  sends_follow_writes_ = t_.fopts_.ordered_replies && (info->tx_attr->msg_order & FI_ORDER_SAW) &&
                         (info->rx_attr->msg_order & FI_ORDER_SAW);
  rx_mem_ = std::make_unique<uint8_t[]>(size_t(rx_depth_) * msg_size_);
  tx_mem_ = std::make_unique<uint8_t[]>(size_t(tx_bufs_) * msg_size_);
  if (ni_.mr_mode & FI_MR_LOCAL) {
    rc = fi_mr_reg(ni_.domain, rx_mem_.get(), size_t(rx_depth_) * msg_size_, FI_RECV, 0,
                   ni_.dom->next_key(), 0, &rx_mr_, nullptr);
    if (rc == 0)
      rc = fi_mr_reg(ni_.domain, tx_mem_.get(), size_t(tx_bufs_) * msg_size_, FI_SEND, 0,
                     ni_.dom->next_key(), 0, &tx_mr_, nullptr);
    if (rc != 0) return Status(Code::kInternal, "registering message buffers: " + fi_error(rc));
  }
  rx_ops_.resize(rx_depth_);
  tx_ops_.resize(tx_bufs_);
  MutexLock lk(tx_mu_);
  tx_inflight_.resize(tx_bufs_);
  for (uint32_t i = 0; i < tx_bufs_; ++i) {
    tx_ops_[i].kind = OpKind::kSend;
    tx_ops_[i].conn = this;
    tx_ops_[i].index = i;
    tx_free_.push_back(tx_bufs_ - 1 - i);
  }
  for (uint32_t i = 0; i < rx_depth_; ++i) {
    rx_ops_[i].kind = OpKind::kRecv;
    rx_ops_[i].conn = this;
    rx_ops_[i].index = i;
    rc = static_cast<int>(post_recv(i));
    if (rc != 0) return Status(Code::kInternal, "posting receives: " + fi_error(rc));
  }
  return Status::Ok();
}

void FabConn::set_peer_params(const ConnParams& p) {
  MutexLock lk(tx_mu_);
  credits_ = p.rx_depth;
  send_limit_ = std::min(msg_size_, p.msg_size);
}

void FabConn::on_connected_event() {
  state_.store(kHandshake);
  std::vector<Nid> mine = announced_nids(local_, t_.node_nids());
  // The handshake every transport runs: a fabric connection negotiates its version and
  // features as TCP's does, and its messages then carry that version's frame head.
  ClusterKeys keys = t_.opts_.cluster_key.get();
  WireSpeaks speaks = speaks_now(t_.opts_.wire, t_.events_);
  hs_ = outgoing_ ? HandshakeMachine::client(std::move(keys), std::move(mine), 0, speaks)
                  : HandshakeMachine::server(std::move(keys), std::move(mine), speaks);
  if (auto out = hs_->start().send) send_hs(std::move(*out));
}

void FabConn::fail(FabricSite site, int err, const std::string& what) {
  HealthKind kind = fabric_health_kind(site, err);
  Status why(site == FabricSite::kConnect ? Code::kUnreachable : Code::kClosed, what, kind);
  if (kind == HealthKind::kLocalNiDown) t_.events_.on_local_ni_down(local_, why);
  do_close(why);
}

void FabConn::begin_close(const Status& why) {
  int expect = kOpen;
  if (!state_.compare_exchange_strong(expect, kClosing)) {
    if (expect != kClosing) do_close(why);
    return;
  }
  closing_why_ = why;
  deadline_ = t_.clock_.now() + kCloseWait;
  std::vector<Done> done;
  {
    MutexLock lk(tx_mu_);
    stop_sending_locked(why, &done);
  }
  finish(done);
  maybe_closed();
}

void FabConn::stop_sending_locked(const Status& why, std::vector<Done>* done) {
  if (!tx_closed_) {
    tx_closed_ = true;
    close_reason_ = why.message();
    close_kind_ = why.health_kind();
  }
  Status s = closed_status_locked();
  for (auto& it : txq_)
    if (it.frame) done->push_back({std::move(it.frame), s, {}});
  txq_.clear();
}

void FabConn::maybe_closed() {
  if (state_.load() != kClosing) return;
  {
    MutexLock lk(tx_mu_);
    for (auto& in : tx_inflight_)
      if (in.frame) return;
    if (!rma_sends_.empty()) return;
  }
  do_close(closing_why_);
}

void FabConn::do_close(const Status& why) {
  int prev = state_.exchange(kClosed);
  if (prev == kClosed) return;
  std::vector<Done> done;
  {
    MutexLock lk(tx_mu_);
    ep_gone_ = true;
    stop_sending_locked(why, &done);
    Status s = closed_status_locked();
    for (auto& in : tx_inflight_)
      if (in.frame) done.push_back({std::move(in.frame), s, {}});
    for (auto& [cookie, r] : rma_sends_) {
      done.push_back({std::move(r.frame), s, {}});
    }
    rma_sends_.clear();
  }
  if (ep_) {
    fi_shutdown(ep_, 0);
    fi_close(&ep_->fid);
    ep_ = nullptr;
  }
  {
    // The endpoint is gone: no write can reach the offered sinks any more.
    MutexLock lk(tx_mu_);
    offered_.clear();
    offered_bytes_ = 0;
    peer_sinks_.clear();
  }
  finish(done);
  if (prev == kOpen || prev == kClosing) {
    PFS_LOG_INFO("connection {} closed: {}", describe(), why.message());
    t_.events_.on_closed(*this, why);
  } else if (outgoing_ && cb_) {
    std::string target = peer_nids_.empty() ? "?" : peer_nids_[0].to_string();
    PFS_LOG_WARN_LIMITED("connect " + local_.to_string() + " -> " + target + " failed",
                         "connect {} -> {} failed: {}", local_.to_string(), target,
                         why.to_string());
    auto cb = std::move(cb_);
    cb_ = nullptr;
    cb(why);
  }
  t_.forget(this);
}

void FabConn::send_hs(HandshakeMachine::Out out, bool close_after) {
  auto f = std::make_unique<OutFrame>();
  f->hdr.kind = out.kind;
  f->hdr.version = out.version;
  f->hdr.xid = out.xid;
  Buffer payload = std::move(out.payload);
  f->hdr.src_nid = local_;
  f->hdr.dst_nid = peer_nids_.empty() ? Nid() : peer_nids_[0];
  f->payload = std::move(payload);
  f->credits_set = true;
  std::vector<Done> done;
  {
    MutexLock lk(tx_mu_);
    TxItem it{std::move(f)};
    it.close_after = close_after;
    txq_.push_back(std::move(it));
    pump_locked(&done);
  }
  finish(done);
}

Status FabConn::handshake_step(InFrame&& f) {
  if (!hs_) return Status(Code::kProtocol, "a frame before the connection");
  HandshakeMachine::Step st = hs_->on_frame(f.hdr, f.payload.span());
  // A server knows its peer from the client's HELLO on: its frames go there.
  if (!outgoing_ && peer_nids_.empty() && !hs_->peer_nids().empty())
    set_peer_nids({hs_->peer_nids().front()});
  using State = HandshakeMachine::State;
  switch (st.state) {
    case State::kRunning:
      if (st.send) send_hs(std::move(*st.send));
      return Status::Ok();
    case State::kEstablished:
      if (st.send) send_hs(std::move(*st.send));
      established(hs_->peer_nids());
      return Status::Ok();
    case State::kRefusedByPeer:
      PFS_LOG_ERROR("connection {} refused by the peer: {}", describe(), hs_->why());
      do_close(Status(Code::kRejected, "refused by " + describe() + ": " + hs_->why(),
                      HealthKind::kPeerNiConnectionRejected));
      return Status::Ok();
    case State::kRefused:
      // The peer's proof failed: REJECT, then close once it is sent.
      if (outgoing_) {
        PFS_LOG_ERROR("refusing connection to {}: it does not hold our cluster key", describe());
        fail_connect_ = Status(Code::kRejected,
                               describe() + " does not hold the cluster key (wrong cluster key)",
                               HealthKind::kPeerNiConnectionRejected);
      } else {
        std::string from = hs_->peer_nids().front().to_string();
        PFS_LOG_ERROR_LIMITED("refusing connection from " + from + ": wrong cluster key",
                              "refusing connection from {}: wrong cluster key", from);
        fail_connect_ = Status(Code::kRejected, "wrong cluster key");
      }
      if (st.send) send_hs(std::move(*st.send), true);
      return Status::Ok();
    case State::kFailed:
      break;
  }
  return Status(Code::kProtocol, hs_->why());
}

void FabConn::established(std::vector<Nid> peer_nids) {
  set_peer_nids(std::move(peer_nids));
  wire_ = hs_->session();
  state_.store(kOpen);
  auto self = shared_from_this();
  t_.events_.on_connected(self);
  if (cb_) {
    auto cb = std::move(cb_);
    cb_ = nullptr;
    cb(ConnectionPtr(self));
  }
}

}  // namespace pfsnet::fabric_detail
