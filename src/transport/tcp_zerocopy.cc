#include "transport/tcp_zerocopy.h"

#include <linux/errqueue.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "transport/tcp_transport.h"

namespace pfsnet::tcp_detail {

void ZcLedger::issued(BulkData hold) {
  held_.emplace_back(next_, std::move(hold));
  done_.push_back(false);
  ++next_;
}

std::vector<BulkData> ZcLedger::completed(uint32_t lo, uint32_t hi, bool copied) {
  std::vector<BulkData> freed;
  // The kernel's numbers are the low 32 bits of ours; calls not yet completed are fewer
  // than 2^32, so each maps to one call at or after first_open_.
  const uint64_t from =
      first_open_ + static_cast<uint32_t>(lo - static_cast<uint32_t>(first_open_));
  const uint64_t count = uint64_t{static_cast<uint32_t>(hi - lo)} + 1;
  if (from >= next_ || count > next_ - from) return freed;  // not calls made: ignored
  for (uint64_t id = from; id < from + count; ++id) {
    bool& d = done_[id - first_open_];
    if (d) continue;  // told twice
    d = true;
    ++completed_;
    if (copied) ++copied_;
  }
  while (!done_.empty() && done_.front()) {
    done_.pop_front();
    ++first_open_;
  }
  while (!held_.empty() && held_.front().first < first_open_) {
    freed.push_back(std::move(held_.front().second));
    held_.pop_front();
  }
  return freed;
}

std::vector<BulkData> ZcLedger::take_all() {
  std::vector<BulkData> all;
  for (auto& [id, b] : held_) all.push_back(std::move(b));
  held_.clear();
  done_.clear();
  first_open_ = next_;
  return all;
}

StreamIo ZeroCopySends::send(int fd, const iovec& v, const BulkData& hold) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(&v);
  msg.msg_iovlen = 1;
  for (int i = 0; i < 8; ++i) {  // EINTR: again, a bounded number of times
    // The call is entered in the ledger before a reaper can apply its completion (on
    // loopback it may be queued before sendmsg returns): reap() takes the lock too.
    MutexLock lk(mu_);
    ssize_t n = ::sendmsg(fd, &msg, MSG_ZEROCOPY | MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      ledger_.issued(hold);
      outstanding_.store(ledger_.outstanding(), std::memory_order_release);
      return StreamIo{.n = static_cast<size_t>(n)};
    }
    if (n == 0) return StreamIo{};
    if (errno == EAGAIN || errno == EWOULDBLOCK) return StreamIo{};
    if (errno == EINTR) continue;
    if (errno == ENOBUFS) {
      // No room for one more notification (net.core.optmem_max): this one copied.
      ++fallback_copies_;
      lk.unlock();
      return PlainStream(fd).write({&v, 1});
    }
    break;
  }
  int err = errno;
  return StreamIo{.failed = Status(Code::kClosed, std::strerror(err), health_kind_for_errno(err))};
}

bool ZeroCopySends::reap(int fd) {
  std::vector<BulkData> freed;  // freed after the lock is let go
  bool any = false;
  for (int round = 0; round < 64; ++round) {  // bounded: each message covers many calls
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(sock_extended_err) + sizeof(sockaddr_in6))];
    msghdr msg{};
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    if (::recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) break;  // EAGAIN: no more
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (!((c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
            (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR)))
        continue;
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(c), sizeof(ee));
      if (ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY || ee.ee_errno != 0) continue;
      any = true;
      MutexLock lk(mu_);
      auto f = ledger_.completed(ee.ee_info, ee.ee_data, ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED);
      outstanding_.store(ledger_.outstanding(), std::memory_order_release);
      for (auto& b : f) freed.push_back(std::move(b));
      if (!keep_when_copied_ && !turned_off_ && ledger_.completed_total() >= kHiddenCopyProof &&
          ledger_.copied_total() == ledger_.completed_total()) {
        turned_off_ = true;
        on_.store(false, std::memory_order_relaxed);
      }
    }
  }
  return any;
}

std::vector<BulkData> ZeroCopySends::take_all() {
  MutexLock lk(mu_);
  std::vector<BulkData> all = ledger_.take_all();
  outstanding_.store(0, std::memory_order_release);
  return all;
}

ZeroCopyStats ZeroCopySends::stats() const {
  MutexLock lk(mu_);
  return ZeroCopyStats{ledger_.issued_total(), ledger_.completed_total(), ledger_.copied_total(),
                       fallback_copies_, turned_off_ ? 1u : 0u};
}

void ZcGraveyard::retire(int fd, std::shared_ptr<ZeroCopySends> z) {
  if (!z) return;
  z->reap(fd);
  bool finished;
  {
    MutexLock lk(mu_);
    finished = finished_;
  }
  if (z->outstanding() > 0 && !finished) {
    if (int own = ::dup(fd); own >= 0) {
      MutexLock lk(mu_);
      kept_.push_back(Kept{own, std::move(z)});
      return;
    }
  }
  if (z->outstanding() > 0) {
    // After the stop (or out of descriptors): reset when the connection's own descriptor
    // closes, so the kernel drops what it had yet to send rather than send memory reused.
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  }
  std::vector<BulkData> let_go = z->take_all();
  MutexLock lk(mu_);
  gone_.add(z->stats());
}

size_t ZcGraveyard::sweep() {
  std::vector<Kept> done;
  size_t left;
  {
    MutexLock lk(mu_);
    for (size_t i = 0; i < kept_.size();) {
      kept_[i].z->reap(kept_[i].fd);
      if (kept_[i].z->outstanding() == 0) {
        gone_.add(kept_[i].z->stats());
        done.push_back(std::move(kept_[i]));
        kept_[i] = std::move(kept_.back());
        kept_.pop_back();
      } else {
        ++i;
      }
    }
    left = kept_.size();
  }
  for (Kept& k : done) ::close(k.fd);
  return left;
}

void ZcGraveyard::finish() {
  sweep();
  std::vector<Kept> rest;
  {
    MutexLock lk(mu_);
    finished_ = true;
    rest.swap(kept_);
  }
  for (Kept& k : rest) {
    PFS_LOG_WARN(
        "TCP zero-copy: a closed connection's socket still had {} send(s) in flight "
        "at the transport's stop: reset",
        k.z->outstanding());
    reset_and_close(k.fd);
    std::vector<BulkData> let_go = k.z->take_all();
    MutexLock lk(mu_);
    gone_.add(k.z->stats());
  }
}

size_t ZcGraveyard::kept() const {
  MutexLock lk(mu_);
  return kept_.size();
}

ZeroCopyStats ZcGraveyard::stats() const {
  MutexLock lk(mu_);
  ZeroCopyStats s = gone_;
  for (const Kept& k : kept_) s.add(k.z->stats());
  return s;
}

void ZcGraveyard::reset_and_close(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  ::close(fd);
}

}  // namespace pfsnet::tcp_detail
