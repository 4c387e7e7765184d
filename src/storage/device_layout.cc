#include "storage/device_layout.h"

#include <algorithm>
#include <cstring>

#include "storage/block_store.h"
#include "wire/crc32c.h"

namespace pfsnet {

namespace {

constexpr char kMagic[8] = {'P', 'F', 'S', 'N', 'E', 'T', 'B', 'D'};
// Label fields: magic 0..7, version 8, block size 12, slots 16, data offset 24, CRC 32.
constexpr size_t kLabelCrcAt = 32;
// Record fields: name length 0, name 1..64, block 72, CRC of bytes 0..123 at 124.
constexpr size_t kNameMax = 64;
constexpr size_t kBlockAt = 72;
constexpr size_t kRecordCrcAt = kDeviceRecordBytes - 4;

uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

template <typename T>
void put(uint8_t* at, T v) {
  std::memcpy(at, &v, sizeof v);  // little-endian hosts only, like the wire codecs
}
template <typename T>
T get(const uint8_t* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

}  // namespace

Result<DeviceLayout> DeviceLayout::fit(uint64_t device_bytes, uint32_t block_size) {
  if (block_size < 4096 || (block_size & (block_size - 1)) != 0)
    return Status(Code::kInvalidArgument,
                  "block size " + std::to_string(block_size) + ": a power of two of at least 4096");
  DeviceLayout l;
  l.block_size = block_size;
  if (device_bytes > kDeviceLabelBytes)
    l.slots = (device_bytes - kDeviceLabelBytes) / (uint64_t{block_size} + kDeviceRecordBytes);
  // The table is rounded up to 4 KiB, which may cost the last slot (block_size >= 4096: one).
  for (int i = 0; i < 2 && l.slots > 0; ++i) {
    l.data_offset = kDeviceLabelBytes + round_up(l.slots * kDeviceRecordBytes, 4096);
    if (l.end() <= device_bytes) break;
    --l.slots;
  }
  l.data_offset = kDeviceLabelBytes + round_up(l.slots * kDeviceRecordBytes, 4096);
  if (l.slots == 0 || l.end() > device_bytes)
    return Status(Code::kInvalidArgument, "a device of " + std::to_string(device_bytes) +
                                              " bytes holds no block of " +
                                              std::to_string(block_size) + " bytes");
  return l;
}

std::array<uint8_t, kDeviceLabelBytes> encode_device_label(const DeviceLayout& l) {
  std::array<uint8_t, kDeviceLabelBytes> b{};
  std::memcpy(b.data(), kMagic, sizeof kMagic);
  put<uint32_t>(b.data() + 8, kDeviceLayoutVersion);
  put<uint32_t>(b.data() + 12, l.block_size);
  put<uint64_t>(b.data() + 16, l.slots);
  put<uint64_t>(b.data() + 24, l.data_offset);
  put<uint32_t>(b.data() + kLabelCrcAt, crc32c(std::span(b.data(), kLabelCrcAt)));
  return b;
}

LabelRead decode_device_label(std::span<const uint8_t> first, uint64_t device_bytes) {
  LabelRead r;
  if (first.size() < kDeviceLabelBytes) {
    r.why = "shorter than a label (" + std::to_string(first.size()) + " bytes)";
    return r;
  }
  first = first.first(kDeviceLabelBytes);
  if (std::all_of(first.begin(), first.end(), [](uint8_t c) { return c == 0; })) {
    r.state = LabelState::kBlank;
    return r;
  }
  if (std::memcmp(first.data(), kMagic, sizeof kMagic) != 0) {
    r.why = "its first 4 KiB hold data that is not a pfsnet label";
    return r;
  }
  if (get<uint32_t>(first.data() + kLabelCrcAt) != crc32c(first.first(kLabelCrcAt))) {
    r.why = "its pfsnet label fails its CRC";
    return r;
  }
  uint32_t version = get<uint32_t>(first.data() + 8);
  if (version != kDeviceLayoutVersion) {
    r.why = "its pfsnet label has version " + std::to_string(version) + ", this build reads " +
            std::to_string(kDeviceLayoutVersion);
    return r;
  }
  DeviceLayout l;
  l.block_size = get<uint32_t>(first.data() + 12);
  l.slots = get<uint64_t>(first.data() + 16);
  l.data_offset = get<uint64_t>(first.data() + 24);
  // The layout must be the one fit() gives for a device this size or smaller (a device
  // that grew keeps its layout; one that shrank under its label is refused).
  auto want = DeviceLayout::fit(device_bytes, l.block_size);
  if (!want.ok() || l.slots == 0 || l.slots > want->slots ||
      l.data_offset != kDeviceLabelBytes + round_up(l.slots * kDeviceRecordBytes, 4096) ||
      l.end() > device_bytes) {
    r.why = "its pfsnet label (" + std::to_string(l.slots) + " slots of " +
            std::to_string(l.block_size) + " bytes) does not fit a device of " +
            std::to_string(device_bytes) + " bytes";
    return r;
  }
  r.state = LabelState::kLabelled;
  r.layout = l;
  return r;
}

std::array<uint8_t, kDeviceRecordBytes> encode_slot_record(const SlotRecord& rec) {
  std::array<uint8_t, kDeviceRecordBytes> b{};
  size_t n = std::min(rec.file.size(), kNameMax);
  b[0] = uint8_t(n);
  std::memcpy(b.data() + 1, rec.file.data(), n);
  put<uint64_t>(b.data() + kBlockAt, rec.block);
  put<uint32_t>(b.data() + kRecordCrcAt, crc32c(std::span(b.data(), kRecordCrcAt)));
  return b;
}

std::optional<SlotRecord> decode_slot_record(std::span<const uint8_t> rec) {
  if (rec.size() != kDeviceRecordBytes) return std::nullopt;
  if (get<uint32_t>(rec.data() + kRecordCrcAt) != crc32c(rec.first(kRecordCrcAt)))
    return std::nullopt;  // free (all zeros fail too: the CRC of zeros is not zero) or torn
  size_t n = rec[0];
  if (n == 0 || n > kNameMax) return std::nullopt;
  SlotRecord r;
  r.file.assign(reinterpret_cast<const char*>(rec.data() + 1), n);
  r.block = get<uint64_t>(rec.data() + kBlockAt);
  if (!check_file_name(r.file).ok()) return std::nullopt;
  return r;
}

}  // namespace pfsnet
