// See fabric_rma_stream.h.
#include "fabric_rma_stream.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "transport/fabric_transport.h"

namespace pfsnet::bench {
namespace {

using Clock = std::chrono::steady_clock;

void close_fid(fid* f) {
  if (f) fi_close(f);
}

// One end: fabric, domain, event and completion queues (polled: FI_WAIT_NONE), endpoint.
struct End {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_eq* eq = nullptr;
  fid_cq* cq = nullptr;
  fid_pep* pep = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* mr = nullptr;
  ~End() {
    close_fid(mr ? &mr->fid : nullptr);
    close_fid(ep ? &ep->fid : nullptr);
    close_fid(pep ? &pep->fid : nullptr);
    close_fid(cq ? &cq->fid : nullptr);
    close_fid(eq ? &eq->fid : nullptr);
    close_fid(domain ? &domain->fid : nullptr);
    close_fid(fabric ? &fabric->fid : nullptr);
    if (info) fi_freeinfo(info);
  }
  int open(fi_info* i) {
    info = i;
    fi_eq_attr eqa{};
    eqa.wait_obj = FI_WAIT_NONE;
    fi_cq_attr cqa{};
    cqa.format = FI_CQ_FORMAT_CONTEXT;
    cqa.wait_obj = FI_WAIT_NONE;
    cqa.size = 1024;
    int rc = fi_fabric(info->fabric_attr, &fabric, nullptr);
    if (rc == 0) rc = fi_domain(fabric, info, &domain, nullptr);
    if (rc == 0) rc = fi_eq_open(fabric, &eqa, &eq, nullptr);
    if (rc == 0) rc = fi_cq_open(domain, &cqa, &cq, nullptr);
    return rc;
  }
  int endpoint(fi_info* i) {
    int rc = fi_endpoint(domain, i, &ep, nullptr);
    if (rc == 0) rc = fi_ep_bind(ep, &eq->fid, 0);
    if (rc == 0) rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc == 0) rc = fi_enable(ep);
    return rc;
  }
  // One event, if any: 0 = none, else its type (`info` set for a CONNREQ); < 0 error.
  int64_t poll_event(fi_info** info) {
    fi_eq_cm_entry e{};
    uint32_t ev = 0;
    ssize_t n = fi_eq_read(eq, &ev, &e, sizeof e, 0);
    if (n == -FI_EAGAIN) return 0;
    if (n < 0) return n;
    if (ev == FI_CONNREQ) *info = e.info;
    return ev;
  }
};

double fail(const char* what, int rc) {
  std::fprintf(stderr, "bench: raw fabric RMA: %s: %s\n", what, fi_strerror(rc < 0 ? -rc : rc));
  return 0;
}

}  // namespace

double fabric_rma_mib_s(RmaOp op, const std::string& provider, const std::string& addr,
                        uint16_t port, size_t size, int depth, double seconds) {
  std::string svc = std::to_string(port);
  fi_info* h = fabric_hints(provider, "");  // what the fabric LND asks for
  fi_info *si = nullptr, *ci = nullptr;
  int rc = fi_getinfo(FI_VERSION(1, 17), addr.c_str(), svc.c_str(), FI_SOURCE, h, &si);
  if (rc == 0) rc = fi_getinfo(FI_VERSION(1, 17), addr.c_str(), svc.c_str(), 0, h, &ci);
  fi_freeinfo(h);
  if (rc != 0) return fail("fi_getinfo", rc);
  End target, reader;  // target: holds the region read or written; reader: issues the RMA
  if ((rc = target.open(si)) != 0) return fail("target", rc);
  if ((rc = reader.open(ci)) != 0) return fail("reader", rc);
  rc = fi_passive_ep(target.fabric, target.info, &target.pep, nullptr);
  if (rc == 0) rc = fi_pep_bind(target.pep, &target.eq->fid, 0);
  if (rc == 0) rc = fi_listen(target.pep);
  if (rc == 0) rc = reader.endpoint(reader.info);
  if (rc == 0) rc = fi_connect(reader.ep, reader.info->dest_addr, nullptr, 0);
  // Both event queues are polled together: each end's connection manager progresses only
  // when its queue is read.
  bool target_up = false, reader_up = false;
  auto until = Clock::now() + std::chrono::seconds(5);
  while (rc == 0 && !(target_up && reader_up)) {
    if (Clock::now() > until) rc = -FI_ETIMEDOUT;
    fi_info* req = nullptr;
    int64_t ev = target.poll_event(&req);
    if (ev == FI_CONNREQ) {
      rc = target.endpoint(req);
      if (rc == 0) rc = fi_accept(target.ep, nullptr, 0);
      fi_freeinfo(req);
    } else if (ev == FI_CONNECTED) {
      target_up = true;
    } else if (ev < 0) {
      rc = static_cast<int>(ev);
    }
    ev = reader.poll_event(&req);
    if (ev == FI_CONNECTED) reader_up = true;
    if (ev < 0) rc = static_cast<int>(ev);
  }
  if (rc != 0) return fail("connecting", rc);

  // Page-aligned, touched memory on both ends, registered once.
  auto alloc = [size] {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, (size + 4095) / 4096 * 4096));
    std::memset(p, 0x5a, size);
    return std::unique_ptr<uint8_t, decltype(&std::free)>(p, &std::free);
  };
  auto src = alloc();
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> sinks;
  for (int i = 0; i < depth; ++i) sinks.push_back(alloc());
  const bool write = op == RmaOp::kWrite;
  rc = fi_mr_reg(target.domain, src.get(), size, write ? FI_REMOTE_WRITE : FI_REMOTE_READ, 0, 1, 0,
                 &target.mr, nullptr);
  if (rc != 0) return fail("registering the source", rc);
  std::vector<fid_mr*> sink_mr(depth, nullptr);
  bool local = reader.info->domain_attr->mr_mode & FI_MR_LOCAL;
  for (int i = 0; i < depth && local; ++i)
    if ((rc = fi_mr_reg(reader.domain, sinks[i].get(), size, write ? FI_WRITE : FI_READ, 0, 2 + i,
                        0, &sink_mr[i], nullptr)) != 0)
      return fail("registering a sink", rc);
  uint64_t raddr = (target.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR)
                       ? reinterpret_cast<uint64_t>(src.get())
                       : 0;
  uint64_t rkey = fi_mr_key(target.mr);

  // The target's provider serves the reads when its queue is polled: its own thread.
  std::atomic<bool> stop{false};
  std::thread progress([&] {
    fi_cq_entry e[8];
    while (!stop.load(std::memory_order_relaxed)) fi_cq_read(target.cq, e, 8);
  });
  std::vector<fi_context2> ctx(depth);
  auto post = [&](int i) {
    void* desc = sink_mr[i] ? fi_mr_desc(sink_mr[i]) : nullptr;
    ssize_t r;
    auto until = Clock::now() + std::chrono::seconds(5);
    auto rma = [&] {
      return write ? fi_write(reader.ep, sinks[i].get(), size, desc, 0, raddr, rkey, &ctx[i])
                   : fi_read(reader.ep, sinks[i].get(), size, desc, 0, raddr, rkey, &ctx[i]);
    };
    while ((r = rma()) == -FI_EAGAIN && Clock::now() < until) {
      fi_cq_entry e;
      (void)fi_cq_read(reader.cq, &e, 0);
    }
    return static_cast<int>(r);
  };
  uint64_t done = 0;
  int err = 0;
  auto start = Clock::now();
  auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int i = 0; i < depth && err == 0; ++i) err = post(i);
  int inflight = err == 0 ? depth : 0;
  while (inflight > 0 && err == 0) {
    fi_cq_entry e[8];
    ssize_t n = fi_cq_read(reader.cq, e, 8);
    if (n == -FI_EAGAIN) continue;
    if (n < 0) {
      err = static_cast<int>(n);
      break;
    }
    for (ssize_t k = 0; k < n; ++k) {
      int i = static_cast<int>(static_cast<fi_context2*>(e[k].op_context) - ctx.data());
      ++done;
      --inflight;
      if (Clock::now() < end) {
        if ((err = post(i)) != 0) break;
        ++inflight;
      }
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  stop.store(true);
  progress.join();
  for (fid_mr* m : sink_mr) close_fid(m ? &m->fid : nullptr);
  if (err != 0) return fail("reading", err);
  return static_cast<double>(done) * static_cast<double>(size) / (1 << 20) / secs;
}

}  // namespace pfsnet::bench
