// A fabric connection's RMA: reading the data of the peer's large frames, the reply sinks
// its requests offer, and writing a reply's bulk into the peer's (fabric_internal.h).
#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "transport/fabric_health.h"
#include "transport/fabric_internal.h"

namespace pfsnet::fabric_detail {

Status FabConn::read_frame_data(const FrameMsg& m, uint64_t cookie, InFrame&& f) {
  PendingRx p;
  p.cookie = cookie;
  p.frame = std::move(f);
  if (!m.payload_rma) p.frame.payload = Buffer::copy_of(m.payload);
  uint64_t seq = rx_front_seq_ + rxq_.size();
  struct Read {
    RmaDesc d;
    uint8_t* dst;
    fid_mr* sink_mr;  // the sink's own registration (from the pool), or null
  };
  std::vector<Read> reads;
  for (int k = 0; k < 2; ++k) {
    const std::optional<RmaDesc>& d = k == 0 ? m.payload_rma : m.bulk_rma;
    if (!d) continue;
    // The sink: registered memory from the NI's pool; a plain buffer (registered for
    // this read alone) when it is larger than the pool's chunks.
    Buffer& into = k == 0 ? p.frame.payload : p.frame.bulk;
    fid_mr* sink_mr = nullptr;
    if (auto sink = ni_.sinks->take(d->len)) {
      into = std::move(sink->buf);
      sink_mr = static_cast<fid_mr*>(sink->handle);
    } else {
      into = Buffer(d->len);
    }
    reads.push_back(Read{*d, into.data(), sink_mr});
  }
  p.waits = static_cast<int>(reads.size());
  rxq_.push_back(std::move(p));
  for (auto& [d, dst, sink_mr] : reads) {
    auto* op = new Op;
    op->kind = OpKind::kRead;
    op->conn = this;
    op->seq = seq;
    void* desc = nullptr;
    if (sink_mr) {
      desc = fi_mr_desc(sink_mr);
    } else if (ni_.mr_mode & FI_MR_LOCAL) {
      op->reg = ni_.regs->register_once(dst, d.len);
      if (!op->reg) {
        delete op;
        return Status(Code::kInternal, "registering a receive buffer failed");
      }
      desc = fi_mr_desc(static_cast<fid_mr*>(op->reg->handle));
    }
    reads_.push_back(op);
    t_.counters_.rma_reads.fetch_add(1, std::memory_order_relaxed);
    ssize_t rc = fi_read(ep_, dst, d.len, desc, 0, d.addr, d.key, &op->ctx);
    if (rc != 0) {
      reads_.pop_back();
      delete op;
      return Status(Code::kClosed, "fabric read on " + describe() + ": " + fi_error(rc));
    }
  }
  return Status::Ok();
}

void FabConn::on_read_done(Op* op, bool ok) {
  reads_.erase(std::find(reads_.begin(), reads_.end(), op));
  uint64_t seq = op->seq;
  delete op;
  if (state_.load() == kClosed) return;
  PendingRx& p = rxq_[seq - rx_front_seq_];
  p.failed |= !ok;
  if (--p.waits > 0) return;
  p.frame.times.complete = t_.clock_.now();
  queue_control(FabricMsg::kRmaDone, p.cookie, p.failed ? kRmaFailed : 0);
  if (p.failed) {
    do_close(Status(Code::kClosed, "reading a frame's data from " + describe() + " failed",
                    HealthKind::kPeerNiConnectError));
    return;
  }
  deliver_ready();
}

void FabConn::on_write_done(Op* op, bool ok) {
  std::vector<Done> done;
  {
    MutexLock lk(tx_mu_);
    writes_.erase(std::find(writes_.begin(), writes_.end(), op));
    for (auto& it : txq_)
      if (it.write == TxItem::Write::kPosted && it.write_id == op->seq) {
        it.write = ok ? TxItem::Write::kDone : TxItem::Write::kNone;
        break;
      }
    if (ok) pump_locked(&done);
  }
  delete op;
  finish(done);
}

void FabConn::plan_sink_write_locked(TxItem& it) {
  const OutFrame& f = *it.frame;
  if (f.hdr.kind != FrameKind::kReply || peer_sinks_.empty()) return;
  auto ps = peer_sinks_.find(f.hdr.xid);
  if (ps == peer_sinks_.end()) return;
  RmaDesc d = ps->second;
  peer_sinks_.erase(ps);
  size_t n = f.bulk_size();
  if (n == 0 || n > d.len || kFabricHeaderSize + kHeaderSize + f.payload.size() + n <= send_limit_)
    return;
  it.write = TxItem::Write::kToPost;
  it.sink = d;
  it.write_id = next_write_++;
  ++writes_to_post_;
}

bool FabConn::post_write_locked(TxItem& it) {
  const OutFrame& f = *it.frame;
  auto* op = new Op;
  op->kind = OpKind::kWrite;
  op->conn = this;
  op->seq = it.write_id;
  op->keep = f.bulk;
  void* desc = nullptr;
  ssize_t rc = 0;
  if (ni_.mr_mode & FI_MR_LOCAL) {
    op->reg = ni_.regs->get(f.bulk);
    if (op->reg)
      desc = fi_mr_desc(static_cast<fid_mr*>(op->reg->handle));
    else
      rc = -FI_ENOMEM;
  }
  if (rc == 0)
    rc = fi_write(ep_, f.bulk->data(), f.bulk_size(), desc, 0, it.sink.addr, it.sink.key, &op->ctx);
  if (rc != 0) {
    delete op;
    if (rc == -FI_EAGAIN) return false;
    PFS_LOG_WARN("RMA write on {}: {}; the peer reads the bulk instead", describe(), fi_error(rc));
    it.write = TxItem::Write::kNone;
    --writes_to_post_;
    return true;
  }
  writes_.push_back(op);
  it.write = TxItem::Write::kPosted;
  --writes_to_post_;
  t_.counters_.sink_writes.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::optional<RmaDesc> FabConn::offer_sink_locked(const OutFrame& f) {
  if (f.hdr.kind != FrameKind::kRequest || f.reply_sink == 0) return std::nullopt;
  size_t n = std::min<size_t>(f.reply_sink, t_.opts_.limits.max_bulk);
  if (kFabricHeaderSize + kHeaderSize + n <= send_limit_) return std::nullopt;
  auto o = offered_.find(f.hdr.xid);
  if (o == offered_.end()) {
    if (offered_bytes_ + n > kMaxOfferBytes) return std::nullopt;
    auto sink = ni_.sinks->take(n);
    if (!sink || !sink->handle) return std::nullopt;
    o = offered_
            .emplace(f.hdr.xid, Offer{std::move(sink->buf), static_cast<fid_mr*>(sink->handle), n,
                                      t_.clock_.now()})
            .first;
    offered_bytes_ += n;
    t_.counters_.sinks_offered.fetch_add(1, std::memory_order_relaxed);
  }
  RmaDesc d;
  d.addr = (ni_.mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(o->second.sink.data()) : 0;
  d.key = fi_mr_key(o->second.mr);
  d.len = o->second.sink.size();
  return d;
}

Status FabConn::take_sinks(const FrameMsg& m, Buffer* bulk) {
  MutexLock lk(tx_mu_);
  if (m.sink) {
    peer_sinks_[m.hdr.xid] = *m.sink;
    if (peer_sinks_.size() > kMaxPeerSinks) peer_sinks_.erase(peer_sinks_.begin());
    return Status::Ok();
  }
  auto o = offered_.find(m.hdr.xid);
  if (m.bulk_in_sink && (o == offered_.end() || o->second.sink.size() < m.hdr.bulk_len))
    return Status(Code::kProtocol, "reply bulk in a sink that was not offered");
  if (o == offered_.end()) return Status::Ok();
  if (m.bulk_in_sink) {
    *bulk = std::move(o->second.sink);
    bulk->shrink_to(m.hdr.bulk_len);
  }
  offered_bytes_ -= o->second.bytes;
  offered_.erase(o);
  return Status::Ok();
}

void FabConn::expire_offers(TimePoint now) {
  MutexLock lk(tx_mu_);
  for (auto o = offered_.begin(); o != offered_.end();) {
    if (now - o->second.at < kOfferTime) {
      ++o;
      continue;
    }
    ni_.sinks->retire(o->second.sink.data());
    offered_bytes_ -= o->second.bytes;
    o = offered_.erase(o);
  }
}

}  // namespace pfsnet::fabric_detail
