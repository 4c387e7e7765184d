// A fabric connection's messages: the send queue and its credits (o2iblnd's rules), what
// a message carries, receiving and delivering in order (fabric_internal.h).
#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "transport/fabric_health.h"
#include "transport/fabric_internal.h"

namespace pfsnet::fabric_detail {

void FabConn::send(std::unique_ptr<OutFrame> f) {
  std::vector<Done> done;
  {
    MutexLock lk(tx_mu_);
    if (tx_closed_) {
      done.push_back({std::move(f), closed_status_locked(), {}});
    } else {
      txq_.push_back(TxItem{std::move(f)});
      plan_sink_write_locked(txq_.back());
      pump_locked(&done);
    }
  }
  finish(done);
}

void FabConn::on_recv(uint32_t i, size_t len) {
  if (state_.load() == kClosed) return;
  uint16_t returned = 0;
  Status s = handle_message(std::span<const uint8_t>(rx_buf(i), len), &returned);
  if (state_.load() == kClosed) return;
  if (ssize_t rc = post_recv(i); rc != 0) {
    do_close(Status(Code::kClosed, "reposting a receive: " + fi_error(rc)));
    return;
  }
  if (!s.ok()) {
    PFS_LOG_WARN("closing fabric connection {}: {}", describe(), s.message());
    do_close(s);
    return;
  }
  std::vector<Done> done;
  {
    MutexLock lk(tx_mu_);
    credits_ += returned;
    ++owed_;  // the buffer is posted again: told on the next message (or a NOOP)
    pump_locked(&done);
  }
  finish(done);
  deliver_ready();
}

void FabConn::on_send_done(uint32_t i) {
  std::vector<Done> done;
  bool close_now = false;
  {
    MutexLock lk(tx_mu_);
    Inflight& in = tx_inflight_[i];
    if (in.frame) done.push_back({std::move(in.frame), Status::Ok(), {in.start, t_.clock_.now()}});
    close_now = in.close_after;
    in.close_after = false;
    tx_free_.push_back(i);
    pump_locked(&done);
  }
  finish(done);
  if (close_now) do_close(fail_connect_);
  maybe_closed();
}

void FabConn::on_op_error(Op* op, int err, const std::string& what) {
  OpKind kind = op->kind;
  if (kind == OpKind::kRead) {
    on_read_done(op, false);
    return;
  }
  if (kind == OpKind::kWrite) on_write_done(op, false);  // deletes op
  if (state_.load() == kClosed || err == FI_ECANCELED) return;
  fail(FabricSite::kCompletion, err,
       "fabric " +
           std::string(kind == OpKind::kSend    ? "send"
                       : kind == OpKind::kWrite ? "RMA write"
                                                : "receive") +
           " on " + describe() + " failed: " + what);
}

void FabConn::queue_control(FabricMsg type, uint64_t cookie, uint8_t flags) {
  std::vector<Done> done;
  {
    MutexLock lk(tx_mu_);
    if (ep_gone_) return;
    txq_.push_back(TxItem{nullptr, type, cookie, flags});
    pump_locked(&done);
  }
  finish(done);
}

void FabConn::pump_locked(std::vector<Done>* done) {
  while (!txq_.empty() && !tx_free_.empty() && !ep_gone_ && credits_ >= 2) {
    TxItem& it = txq_.front();
    if (sends_follow_writes_ && it.write == TxItem::Write::kToPost) {
      if (writes_.size() >= kMaxWritesPosted || !post_write_locked(it)) break;
    }
    if (it.write == TxItem::Write::kToPost ||
        (it.write == TxItem::Write::kPosted && !sends_follow_writes_))
      break;
    std::optional<Status> r = post_item(it, tx_free_.back());
    if (!r) break;  // the provider's queue is full: on the next completion
    if (r->ok())
      tx_free_.pop_back();  // a frame that failed before its send leaves its buffer free
    else if (it.frame)
      done->push_back({std::move(it.frame), *r, {}});
    txq_.pop_front();
  }
  // Then writes into the peer's sinks, in queue order (kMaxWritesPosted at once); they
  // take no credit, and the messages just posted do not wait behind them.
  for (auto k = txq_.begin(); !sends_follow_writes_ && writes_to_post_ > 0 &&
                              writes_.size() < kMaxWritesPosted && !ep_gone_ && k != txq_.end();
       ++k)
    if (k->write == TxItem::Write::kToPost && !post_write_locked(*k)) return;
  if (owed_ >= std::max<uint32_t>(1, rx_depth_ / 2) && credits_ >= 1 && !tx_free_.empty() &&
      !ep_gone_) {
    TxItem noop{nullptr, FabricMsg::kNoop};
    if (post_item(noop, tx_free_.back())) tx_free_.pop_back();
  }
}

std::optional<Status> FabConn::post_item(TxItem& it, uint32_t i) {
  uint8_t* b = tx_buf(i);
  FabricHeader fh;
  fh.type = it.type;
  fh.flags = it.flags;
  fh.cookie = it.cookie;
  size_t len = kFabricHeaderSize;
  RmaSend rma;
  uint32_t net_credits = 0;
  bool took_net_credits = false;
  if (it.frame) {
    OutFrame& f = *it.frame;
    FrameHeader hdr = f.hdr;
    // A handshake frame goes in the version its machine chose; the rest in the connection's,
    // with the extension fields it carries.
    const bool handshake = is_handshake_kind(hdr.kind);
    const uint16_t version = handshake ? hdr.version : wire_.version;
    if (!handshake) fit_extensions(wire_, &hdr.ext);
    hdr.payload_len = static_cast<uint32_t>(f.payload_len());
    hdr.bulk_len = static_cast<uint32_t>(f.bulk_size());
    if (!f.credits_set) {
      net_credits = take_credits_to_return();
      took_net_credits = true;
      hdr.credits = net_credits;
    }
    // The bulk here, unless it went into the peer's sink already.
    // Written into the peer's sink: done, or posted just ahead of this (in order).
    bool in_sink = it.write == TxItem::Write::kDone || it.write == TxItem::Write::kPosted;
    if (it.write == TxItem::Write::kPosted)
      t_.counters_.sink_replies_ordered.fetch_add(1, std::memory_order_relaxed);
    size_t bulk = in_sink ? 0 : f.bulk_size();
    std::optional<RmaDesc> offer = offer_sink_locked(f);
    size_t tail = offer ? kRmaDescSize : 0;
    if (in_sink) fh.flags |= kBulkInSink;
    if (offer) fh.flags |= kSinkOffered;
    EncodedHead head;
    encode_frame_head(hdr, version, &head);
    // Its head and the most descriptors an RMA form takes must fit one message.
    if (kFabricHeaderSize + head.size + 3 * kRmaDescSize > send_limit_) {
      if (took_net_credits) add_credits_to_return(net_credits);
      return Status(
          Code::kInvalidArgument,
          fmt::format("a frame head of {} bytes does not fit a message of {} (net.msg_size)",
                      head.size, send_limit_));
    }
    size_t whole = kFabricHeaderSize + head.size + f.payload_len() + bulk + tail;
    std::memcpy(b + len, head.bytes.data(), head.size);
    len += head.size;
    if (whole <= send_limit_) {
      fh.type = FabricMsg::kFrame;
      if (!f.payload.empty()) std::memcpy(b + len, f.payload.data(), f.payload.size());
      len += f.payload.size();
      if (f.sealed) std::memcpy(b + len, f.seal, kDataCrcSize);
      len += f.sealed ? kDataCrcSize : 0;
      if (bulk) std::memcpy(b + len, f.bulk->data(), bulk);
      len += bulk;
    } else {
      fh.type = FabricMsg::kFrameRma;
      fh.cookie = next_cookie_++;
      if (f.sealed) {  // the payload goes in one piece, seal included (one copy, rare)
        f.payload = f.wire_payload();
        f.sealed = false;
      }
      bool payload_rma =
          len + f.payload.size() + 2 * kRmaDescSize + tail > send_limit_ && !f.payload.empty();
      const void* part[2] = {payload_rma ? f.payload.data() : nullptr,
                             bulk ? f.bulk->data() : nullptr};
      size_t part_len[2] = {payload_rma ? f.payload.size() : 0, bulk};
      if (!payload_rma) {
        if (!f.payload.empty()) std::memcpy(b + len, f.payload.data(), f.payload.size());
        len += f.payload.size();
      }
      for (int k = 0; k < 2; ++k) {
        if (!part[k]) continue;
        // The bulk (shared, immutable) through the NI's cache; the payload (this frame's
        // own) on its own.
        rma.reg[k] = k == 1 ? ni_.regs->get(f.bulk)
                            : ni_.regs->register_once(f.payload.data(), f.payload.size());
        if (!rma.reg[k]) {
          if (took_net_credits) add_credits_to_return(net_credits);
          return Status(Code::kInternal, "registering a frame for RMA failed");
        }
        RmaDesc d;
        d.addr = (ni_.mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(part[k]) : 0;
        d.key = fi_mr_key(static_cast<fid_mr*>(rma.reg[k]->handle));
        d.len = part_len[k];
        encode_rma_desc(d, b + len);
        len += kRmaDescSize;
        fh.flags |= k == 0 ? kRmaPayload : kRmaBulk;
      }
    }
    if (offer) {
      encode_rma_desc(*offer, b + len);
      len += kRmaDescSize;
    }
  }
  fh.credits = static_cast<uint16_t>(std::min<uint32_t>(owed_, 0xffff));
  fh.body_len = static_cast<uint32_t>(len - kFabricHeaderSize);
  encode_fabric_header(fh, b);
  TimePoint start = t_.clock_.now();
  // An injected completion error (inject_fault) takes the place of this send.
  int injected = it.frame && state_.load() == kOpen ? t_.take_injected(FabricSite::kCompletion) : 0;
  ssize_t rc = injected ? 0 : fi_send(ep_, b, len, tx_desc(), 0, &tx_ops_[i].ctx);
  if (rc != 0) {
    if (took_net_credits) add_credits_to_return(net_credits);
    if (rc == -FI_EAGAIN) return std::nullopt;
    return Status(Code::kClosed, "fabric send on " + describe() + ": " + fi_error(rc));
  }
  owed_ -= fh.credits;
  --credits_;
  Inflight& in = tx_inflight_[i];
  in.start = start;
  in.close_after = it.close_after;
  if (fh.type == FabricMsg::kFrameRma) {
    rma.frame = std::move(it.frame);
    rma.start = start;
    rma_sends_.emplace(fh.cookie, std::move(rma));
  } else {
    in.frame = std::move(it.frame);
  }
  if (injected)
    t_.post([self = shared_from_this(), i, injected] {
      self->on_op_error(&self->tx_ops_[i], injected, "injected " + fi_error(injected));
    });
  return Status::Ok();
}

Status FabConn::handle_message(std::span<const uint8_t> msg, uint16_t* returned) {
  auto fh = decode_fabric_header(msg);
  if (!fh.ok()) return fh.status();
  *returned = fh->credits;
  std::span<const uint8_t> body = msg.subspan(kFabricHeaderSize);
  switch (fh->type) {
    case FabricMsg::kNoop:
      return Status::Ok();
    case FabricMsg::kRmaDone: {
      std::vector<Done> done;
      {
        MutexLock lk(tx_mu_);
        auto it = rma_sends_.find(fh->cookie);
        if (it == rma_sends_.end()) return Status(Code::kProtocol, "RMA done for an unknown frame");
        Status s = (fh->flags & kRmaFailed)
                       ? Status(Code::kClosed, "the peer could not read the frame's data",
                                HealthKind::kPeerNiConnectError)
                       : Status::Ok();
        done.push_back({std::move(it->second.frame), s, {it->second.start, t_.clock_.now()}});
        rma_sends_.erase(it);
      }
      finish(done);
      maybe_closed();
      return Status::Ok();
    }
    case FabricMsg::kFrame:
    case FabricMsg::kFrameRma:
      break;
  }
  auto m = decode_frame_msg(*fh, body, t_.opts_.limits);
  if (!m.ok()) return m.status();
  if (state_.load() == kOpen && !is_handshake_kind(m->hdr.kind) && m->hdr.version != wire_.version)
    return Status(Code::kProtocol, fmt::format("a version-{} frame on a version-{} connection",
                                               m->hdr.version, wire_.version));
  if (m->hdr.version >= 2) {  // its NIDs are the connection's
    m->hdr.src_nid = peer_nid();
    m->hdr.dst_nid = local_;
  }
  InFrame f;
  f.hdr = m->hdr;
  f.times.first_byte = t_.clock_.now();
  if (m->sink || m->hdr.kind == FrameKind::kReply) {
    if (state_.load() < kOpen) return Status(Code::kProtocol, "RPC frames before the handshake");
    Status s = take_sinks(*m, &f.bulk);
    if (!s.ok()) return s;
  }
  if (fh->type == FabricMsg::kFrame) {
    f.payload = Buffer::copy_of(m->payload);
    if (!m->bulk_in_sink) f.bulk = Buffer::copy_of(m->bulk);
    f.times.complete = f.times.first_byte;
    return handle_frame(std::move(f));
  }
  // kFrameRma: what is inline is copied now; the rest is read from the sender.
  if (state_.load() == kClosing) return Status::Ok();  // not taken: it fails at the sender
  if (state_.load() != kOpen) return Status(Code::kProtocol, "an RMA frame before the handshake");
  return read_frame_data(*m, fh->cookie, std::move(f));
}

Status FabConn::handle_frame(InFrame&& f) {
  if (state_.load() == kHandshake) return handshake_step(std::move(f));
  if (state_.load() == kClosing) return Status::Ok();
  if (state_.load() != kOpen) return Status(Code::kProtocol, "a frame before the connection");
  PendingRx p;
  p.frame = std::move(f);
  rxq_.push_back(std::move(p));
  return Status::Ok();
}

void FabConn::deliver_ready() {
  while (!rxq_.empty() && rxq_.front().waits == 0 && state_.load() == kOpen) {
    InFrame f = std::move(rxq_.front().frame);
    rxq_.pop_front();
    ++rx_front_seq_;
    t_.events_.on_frame(*this, std::move(f));
  }
}

}  // namespace pfsnet::fabric_detail
