#include "tune/storage_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "rpc/msg_types.h"

namespace pfsnet {

namespace {

constexpr double kMB = 1024.0 * 1024.0;  // the paper's MB
constexpr uint32_t kMinBlock = 16 << 10, kMaxBlock = 16 << 20;

std::string mb(double bytes) { return fmt::format("{:.1f} MB", bytes / kMB); }
std::string kib(double bytes) { return fmt::format("{:.0f} KiB", bytes / 1024); }

}  // namespace

StorageAdvice advise_storage(const StorageMeasure& m) {
  StorageAdvice a;
  const double bs = m.block_size;
  // Block size against the application's requests.
  a.block_size = m.block_size;
  if (m.request_bytes > 0 && m.request_bytes < bs) {
    a.request_share = m.request_bytes / bs;
    a.request_rate = a.request_share * m.throughput;
    uint32_t fit = kMinBlock;
    while (fit < kMaxBlock && fit * 2 <= m.request_bytes) fit *= 2;
    a.block_size = fit;
    a.why_block_size = fmt::format(
        "random {} requests on {} blocks use {:.3f} of each block read{}: blocks of {} match them",
        kib(m.request_bytes), kib(bs), a.request_share,
        m.throughput > 0
            ? fmt::format(", so {:.1f} of {:.1f} MB/s", a.request_rate / kMB, m.throughput / kMB)
            : "",
        kib(fit));
    a.problems.push_back({"block_above_requests", "",
                          fmt::format("blocks of {} are larger than the {} requests: {}", kib(bs),
                                      kib(m.request_bytes), a.why_block_size)});
  } else {
    a.request_rate = m.throughput;
    a.why_block_size =
        m.request_bytes > 0
            ? fmt::format("requests of {} use whole {} blocks", kib(m.request_bytes), kib(bs))
            : "the application's request size is unknown: blocks as they are";
  }
  // Block buffers: throughput x turnaround, tripled.
  if (m.throughput > 0 && m.turnaround_s > 0) {
    double need = m.throughput * m.turnaround_s;
    a.buffers_needed = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(need / bs)));
    a.buffers = 3 * a.buffers_needed;
    a.why_buffers = fmt::format(
        "{:.1f} MB/s x {:.0f} ms turnaround = {} in flight = {} buffers of {}; x3 for margin: {}",
        m.throughput / kMB, m.turnaround_s * 1000, mb(need), a.buffers_needed, kib(bs), a.buffers);
    if (m.buffers < a.buffers_needed)
      a.problems.push_back({"buffers_below_need", "",
                            fmt::format("{} block buffers hold less than throughput x turnaround "
                                        "({}): requests wait for buffers; {}",
                                        m.buffers, mb(need), a.why_buffers)});
  } else {
    a.buffers = m.buffers;
    a.why_buffers = "throughput or turnaround unknown: buffers as they are";
  }
  // Prefetch depth: the reader's rate x turnaround, +1, within the pagepool.
  double rate = m.reader_rate > 0 ? m.reader_rate : m.throughput;
  int64_t pool_blocks = std::max<int64_t>(1, static_cast<int64_t>(m.pagepool / bs));
  if (rate > 0 && m.turnaround_s > 0) {
    int64_t need = static_cast<int64_t>(std::ceil(rate * m.turnaround_s / bs)) + 1;
    a.prefetch_depth = std::min(need, pool_blocks);
    a.why_prefetch = fmt::format(
        "a reader at {:.1f} MB/s waits {:.0f} ms per block: {} blocks ahead keep it streaming{}",
        rate / kMB, m.turnaround_s * 1000, need,
        need > pool_blocks ? fmt::format(" (the pagepool holds {})", pool_blocks) : "");
    if (m.prefetch_depth < a.prefetch_depth)
      a.problems.push_back({"prefetch_below_need", "",
                            fmt::format("prefetch_depth {} is below {}: {}", m.prefetch_depth,
                                        a.prefetch_depth, a.why_prefetch)});
  } else {
    a.prefetch_depth = m.prefetch_depth;
    a.why_prefetch = "reader rate or turnaround unknown: prefetch depth as it is";
  }
  return a;
}

StorageMeasured measure_block_service(const StatsReport& r, uint32_t block_size) {
  StorageMeasured m;
  std::map<int64_t, int64_t> per_second;  // start -> requests
  double exec_ms = 0, wait_ms = 0;
  int64_t waits = 0;
  for (const MessageReport& mr : r.messages) {
    bool request = mr.type == kMsgBlockWrite || mr.type == kMsgBlockRead;
    if (!request && mr.type != kMsgBlockBufferWait) continue;
    for (const IntervalView& iv : mr.execution.seconds) {
      if (iv.count <= 0) continue;
      if (request) {
        per_second[iv.start] += iv.count;
        m.requests += iv.count;
        exec_ms += iv.avg_ms * double(iv.count);
      } else {
        waits += iv.count;
        wait_ms += iv.avg_ms * double(iv.count);
      }
    }
  }
  if (m.requests == 0) return m;
  for (const auto& [start, n] : per_second) m.peak_requests = std::max(m.peak_requests, n);
  m.throughput = double(m.peak_requests) * block_size;
  double hold_ms = exec_ms / double(m.requests) - (waits > 0 ? wait_ms / double(waits) : 0);
  m.turnaround_s = std::max(hold_ms, 0.0) / 1000;
  m.source = fmt::format(
      "this server's statistics: {} block requests, at most {} in a second ({:.1f} MB/s of {} "
      "blocks), each holding a buffer {:.1f} ms",
      m.requests, m.peak_requests, m.throughput / kMB, kib(block_size), m.turnaround_s * 1000);
  return m;
}

}  // namespace pfsnet
