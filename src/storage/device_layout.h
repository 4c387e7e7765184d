// DeviceLayout: how a block-device target keeps the blocks of many striped files on one
// raw device, without a file system (the paper's VSD servers wrote to raw logical volumes).
// Pure: encodings and arithmetic only; the I/O is in block_store.cc.
//
//   [0, 4096)                 the label: "PFSNETBD", version, block size, slots, CRC-32C
//   [4096, data_offset)       the slot table: one 128-byte record per slot (the striped
//                             file's name, its block index, a CRC-32C); all zeros: free
//   [data_offset, end)        slot i's block at data_offset + i x block_size
//
// data_offset is a multiple of 4096 and of nothing else, so a block is aligned for O_DIRECT
// whatever its size. A record is written after its block: a server killed in between leaves
// the slot free (the block's bytes are garbage nobody points at); a torn record fails its
// CRC and reads as free too. A device's first 4 KiB that are all zeros have no label yet
// (a fresh device, labelled when first opened); anything else without our magic is somebody
// else's data and is refused.
//
// Thread safety: plain values.
#pragma once

#include <pfsnet/status.h>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace pfsnet {

inline constexpr size_t kDeviceLabelBytes = 4096;
inline constexpr size_t kDeviceRecordBytes = 128;
inline constexpr uint32_t kDeviceLayoutVersion = 1;

struct DeviceLayout {
  uint32_t block_size = 0;
  uint64_t slots = 0;
  uint64_t data_offset = 0;

  // The most slots a device of `device_bytes` holds for blocks of `block_size` (a power of
  // two >= 4096); kInvalidArgument when not even one fits.
  static Result<DeviceLayout> fit(uint64_t device_bytes, uint32_t block_size);
  uint64_t record_offset(uint64_t slot) const {
    return kDeviceLabelBytes + slot * kDeviceRecordBytes;
  }
  uint64_t block_offset(uint64_t slot) const { return data_offset + slot * block_size; }
  uint64_t end() const { return block_offset(slots); }
};

std::array<uint8_t, kDeviceLabelBytes> encode_device_label(const DeviceLayout& l);

enum class LabelState { kLabelled, kBlank, kForeign };
struct LabelRead {
  LabelState state = LabelState::kForeign;
  DeviceLayout layout;  // kLabelled only
  std::string why;      // kForeign: what was found
};
// What the first 4 KiB of a device of `device_bytes` say: our label (checked: CRC, version,
// a layout that fits the device), blank (all zeros), or foreign (with the reason).
LabelRead decode_device_label(std::span<const uint8_t> first, uint64_t device_bytes);

struct SlotRecord {
  std::string file;  // a striped file's name (check_file_name)
  uint64_t block = 0;
};
std::array<uint8_t, kDeviceRecordBytes> encode_slot_record(const SlotRecord& r);
// The record of a used slot; nullopt for a free slot, a torn one (CRC) or a bad name.
std::optional<SlotRecord> decode_slot_record(std::span<const uint8_t> rec);

}  // namespace pfsnet
