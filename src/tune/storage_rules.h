// The GPFS paper's tuning rules for the block service (the GPFS 1.4 paper, "Performance Impact of
// Small I/O Requests" and Appendix A), as advice with one-line reasons like the credit
// advice (tune.h):
//
//   block size vs request size: a random request of R bytes on blocks of B costs a whole
//     block, so it is delivered at (R / B) x the block rate -- 32 KiB requests on 256 KiB
//     blocks at 128 MB/s: 0.125 x 128 = 16 MB/s. Advice: blocks no larger than the
//     application's requests (within the allowed sizes).
//   block buffers (buddy buffers): a server needs throughput x turnaround bytes of them
//     -- 130 MB/s x 40 ms = 5.2 MB = 21 buffers of 256 KiB -- and the paper triples it: 63.
//   prefetch depth: a sequential reader streams when the blocks fetched ahead cover its
//     rate x a block's turnaround (+1 for the block being copied), within the pagepool.
//
// Pure: numbers in, advice out. Threads: any.
#pragma once

#include <pfsnet/stats.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tune/tune.h"

namespace pfsnet {

struct StorageMeasure {
  uint32_t block_size = 256 << 10;
  int64_t buffers = 64;          // the server's block buffers now
  int64_t prefetch_depth = 4;    // the client's now
  int64_t pagepool = 100 << 20;  // bytes
  double request_bytes = 0;      // the application's typical request; 0: unknown
  double throughput = 0;         // bytes/s a server delivers (or its link); 0: unknown
  double turnaround_s = 0;       // one block request, sent to answered; 0: unknown
  double reader_rate = 0;        // bytes/s a sequential reader consumes; 0: = throughput
};

struct StorageAdvice {
  // Small requests: the share of each block read that is used, and the rate they get.
  double request_share = 1, request_rate = 0;
  uint32_t block_size = 0;  // recommended
  std::string why_block_size;
  int64_t buffers_needed = 0, buffers = 0;  // throughput x turnaround; tripled
  std::string why_buffers;
  int64_t prefetch_depth = 0;
  std::string why_prefetch;
  // buffers_below_need, block_above_requests, prefetch_below_need; empty: they fit
  std::vector<TuneProblem> problems;
};

StorageAdvice advise_storage(const StorageMeasure& m);

// What a block server's own statistics say (the BLOCK_* message types, StatsQuery kMessage
// at second granularity): the busiest second's requests (BLOCK_WRITE + BLOCK_READ) x the
// block size as its throughput, and the time a request holds a block buffer -- its mean
// execution less its mean wait for the buffer -- as the turnaround, so that buffers needed
// = throughput x turnaround is Little's law over the buffers (a wait for buffers does not
// count: it would make too few buffers ask for ever more). Zero where nothing was served.
struct StorageMeasured {
  double throughput = 0;    // bytes/s
  double turnaround_s = 0;  // a request's hold of a buffer
  int64_t requests = 0;     // over the intervals given
  int64_t peak_requests = 0;
  std::string source;  // what it was measured from, for the reasons
};
StorageMeasured measure_block_service(const StatsReport& r, uint32_t block_size);

}  // namespace pfsnet
