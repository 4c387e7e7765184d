#include "wire/data_crc.h"

#include <cstring>

#include "wire/crc32c.h"
#include "wire/le.h"

namespace pfsnet {

uint32_t data_crc(std::span<const uint8_t> payload, std::span<const uint8_t> bulk) {
  return crc32c(bulk, crc32c(payload));
}

uint32_t data_crc_joined(std::span<const uint8_t> payload, uint32_t bulk_crc, size_t bulk_len) {
  return crc32c_combine(crc32c(payload), bulk_crc, bulk_len);
}

Buffer seal_payload(std::span<const uint8_t> payload, std::span<const uint8_t> bulk) {
  Buffer out(payload.size() + kDataCrcSize);
  if (!payload.empty()) std::memcpy(out.data(), payload.data(), payload.size());
  le::put<uint32_t>(out.data() + payload.size(), data_crc(payload, bulk));
  return out;
}

bool unseal_payload(Buffer* payload, std::span<const uint8_t> bulk,
                    std::optional<uint32_t>* bulk_crc) {
  if (payload->size() < kDataCrcSize) return false;
  size_t n = payload->size() - kDataCrcSize;
  std::span<const uint8_t> data(payload->data(), n);
  const uint32_t of_payload = crc32c(data);
  if (bulk_crc && bulk_crc->has_value()) {  // taken as the bulk came in
    if (le::get<uint32_t>(payload->data() + n) !=
        crc32c_combine(of_payload, **bulk_crc, bulk.size()))
      return false;
    payload->shrink_to(n);
    return true;
  }
  const uint32_t seal = crc32c(bulk, of_payload);
  if (le::get<uint32_t>(payload->data() + n) != seal) return false;
  payload->shrink_to(n);
  // seal = crc(payload) x^(8 |bulk|) + crc(bulk): the bulk's own is what that adds.
  if (bulk_crc && !bulk.empty()) *bulk_crc = seal ^ crc32c_combine(of_payload, 0, bulk.size());
  return true;
}

}  // namespace pfsnet
