// Fuzz target: the block service's messages from peers -- BLOCK_WRITE / BLOCK_READ
// requests (file name, target, block, offset, length, checked against the block size) and
// BLOCK_INFO replies; IOBENCH requests and replies (pfsnet bench gpfs); TOKEN_* requests;
// a block device target's label and slot records (what a device hands a server at open).
// The first byte picks the decoder and, for block requests, the block size.
#include <cstring>

#include "fuzz.h"
#include "storage/block_store.h"
#include "storage/device_layout.h"
#include "storage/iobench.h"
#include "storage/protocol.h"
#include "storage/tokens.h"

using namespace pfsnet;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::span<const uint8_t> in(data + 1, size - 1);
  if ((data[0] & 0x0f) == 0x0f) {  // a device's label (0x0f: device bytes, label) or record
    if (data[0] & 0x10) {
      auto r = decode_slot_record(in);
      if (r) {
        FUZZ_CHECK(check_file_name(r->file).ok());
        auto again = decode_slot_record(encode_slot_record(*r));
        FUZZ_CHECK(again && again->file == r->file && again->block == r->block);
      }
      return 0;
    }
    if (in.size() < 8) return 0;
    uint64_t device_bytes;
    std::memcpy(&device_bytes, in.data(), 8);
    LabelRead l = decode_device_label(in.subspan(8), device_bytes);
    FUZZ_CHECK((l.state == LabelState::kForeign) == !l.why.empty());
    if (l.state == LabelState::kLabelled) {
      FUZZ_CHECK(l.layout.slots > 0 && l.layout.end() <= device_bytes);
      FUZZ_CHECK(l.layout.data_offset % 4096 == 0 &&
                 l.layout.record_offset(l.layout.slots) <= l.layout.data_offset);
      LabelRead again = decode_device_label(encode_device_label(l.layout), device_bytes);
      FUZZ_CHECK(again.state == LabelState::kLabelled && again.layout.slots == l.layout.slots &&
                 again.layout.block_size == l.layout.block_size);
    }
    return 0;
  }
  if ((data[0] & 0x0f) == 0x0b) {  // TOKEN_*: 0x0b with a range, 0x1b without
    bool range = !(data[0] & 0x10);
    auto m = decode_token_range(in, range);
    if (m.ok() && range) FUZZ_CHECK(m->start < m->end && m->end <= (uint64_t(1) << 62));
    if (m.ok()) FUZZ_CHECK(m->file.find('/') == std::string::npos);
    return 0;
  }
  if ((data[0] & 3) == 3) {
    if (data[0] & 4) {
      fuzz::roundtrip(decode_iobench_result(in), encode_iobench_result, decode_iobench_result);
      return 0;
    }
    auto q = decode_iobench_request(in);
    if (q.ok() && q->phase == "prepare") {
      FUZZ_CHECK(q->threads >= 1 && q->threads <= IobenchRequest::kMaxThreads);
      FUZZ_CHECK(q->requests >= 1 && q->size >= 1 && !q->servers.empty());
      // The job's last byte stays below 1 PiB: no offset overflows.
      FUZZ_CHECK((q->first_segment + uint64_t(q->threads)) * q->requests <=
                 (uint64_t(1) << 50) / q->size);
    }
    fuzz::roundtrip(
        q, [](const IobenchRequest& r) { return r.encode(); }, decode_iobench_request);
    return 0;
  }
  if (data[0] & 1) {
    fuzz::roundtrip(decode_block_info(in), encode_block_info, decode_block_info);
    return 0;
  }
  const uint32_t block_size = 4096u << ((data[0] >> 1) % 13);  // 4 KiB .. 16 MiB
  auto decode = [block_size](std::span<const uint8_t> b) { return decode_block_io(b, block_size); };
  auto io = decode(in);
  if (io.ok()) {
    FUZZ_CHECK(io->length > 0 && uint64_t(io->offset) + io->length <= block_size);
    FUZZ_CHECK(io->file.find('/') == std::string::npos && io->file != "..");
  }
  fuzz::roundtrip(io, encode_block_io, decode);
  return 0;
}

namespace pfsnet::fuzz {
std::vector<std::vector<uint8_t>> fuzz_seeds() {
  return {tagged(0x10, encode_block_io({"bench.file", 3, 77, 4096, 8192})),
          tagged(0x00, encode_block_io({"a", 0, 0, 0, 4096})),
          tagged(0x01, encode_block_info({262144, 2, uint64_t{1} << 30})),
          tagged(0x03,
                 [] {
                   IobenchRequest q;
                   q.job = 9;
                   q.file = "iobench";
                   q.servers = {*Nid::parse("127.0.0.1@tcp")};
                   q.threads = 4;
                   q.requests = 16;
                   q.first_segment = 4;
                   return q.encode();
                 }()),
          tagged(0x07, encode_iobench_result({1 << 20, 0, "", 5, 9, 0.25})),
          tagged(0x0b, encode_token_range({"tok", 65536, 131072})),
          tagged(0x1f,
                 [] {
                   auto r = encode_slot_record({"bench.file", 77});
                   return std::vector<uint8_t>(r.begin(), r.end());
                 }()),
          tagged(0x0f, [] {
            uint64_t bytes = 16 << 20;
            std::vector<uint8_t> v(8);
            std::memcpy(v.data(), &bytes, 8);
            auto l = encode_device_label(*DeviceLayout::fit(bytes, 65536));
            v.insert(v.end(), l.begin(), l.end());
            return v;
          }())};
}
}  // namespace pfsnet::fuzz
