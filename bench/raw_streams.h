// Raw TCP moving the bytes a data path moves, from and to memory as large as that path's.
// pfsnet_bench's raw stream (tcp_baseline.h) sends one cached MiB again and again into one
// cached MiB; a block service reading a 2 GiB file sends it from 2 GiB of the server's
// memory into its readers' buffers, and on this VM the readers' 8 MiB alone moved two raw
// streams from ~5,400 to ~4,400 MiB/s. This is the raw TCP of the same bytes, for the same
// figures.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pfsnet::bench {

struct RawStreams {
  int streams = 2;                  // connections at once (one per client node)
  uint64_t bytes_per_stream = 0;    // each moves this many, in 1 MiB sends
  size_t src_bytes_per_stream = 0;  // the memory each sender walks, 1 MiB at a time
  size_t dst_bytes_per_stream = 0;  // the memory each receiver walks
};

// MiB/s of all streams: every byte over the time from their common start to the last
// receiver's end. Each stream is its own sending and receiving thread over loopback
// (127.0.33.1), its memory touched before the start. Throws std::runtime_error on a
// socket error; every send and receive has a 10 s deadline.
double raw_tcp_streams_mib_s(const RawStreams& r);

}  // namespace pfsnet::bench
