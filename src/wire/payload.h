// Payload: a frame's payload to send, immutable and shared (not installed).
// Thread safety: a Payload is a value; the bytes it shares are never written.
#pragma once

#include <pfsnet/buffer.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace pfsnet {

// A frame's payload to send: immutable and shared, so the attempts of an RPC, a reply kept
// for resending and the frame on the wire hold the same bytes, never a copy. An empty one
// holds nothing (no allocation).
class Payload {
 public:
  Payload() = default;
  Payload(Buffer b)  // NOLINT(google-explicit-constructor): a Buffer is a payload
      : b_(b.empty() ? nullptr : std::make_shared<const Buffer>(std::move(b))) {}
  explicit Payload(std::shared_ptr<const Buffer> b) : b_(std::move(b)) {}

  size_t size() const { return b_ ? b_->size() : 0; }
  bool empty() const { return size() == 0; }
  const uint8_t* data() const { return b_ ? b_->data() : nullptr; }
  std::span<const uint8_t> span() const { return b_ ? b_->span() : std::span<const uint8_t>(); }
  std::string_view view() const { return b_ ? b_->view() : std::string_view(); }

 private:
  std::shared_ptr<const Buffer> b_;
};

}  // namespace pfsnet
