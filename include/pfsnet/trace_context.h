// A W3C Trace Context (the traceparent header, version 00: a 16-byte trace id, an 8-byte
// parent id, flags): what a caller puts on an RPC (CallOptions::trace) and a handler reads
// (RpcRequest::trace). It travels on wire-version-2 connections whose ends both announce
// the `trace` feature (docs/wire_format.md, "Extensions").
// Thread safety: a plain value.
#pragma once

#include <pfsnet/status.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace pfsnet {

struct TraceContext {
  std::array<uint8_t, 16> trace_id{};
  std::array<uint8_t, 8> parent_id{};
  uint8_t flags = 0;  // bit 0: sampled
  // All-zero ids are invalid (W3C).
  bool valid() const;
  // "00-<32 hex>-<16 hex>-<2 hex>", the traceparent header's form.
  std::string to_string() const;
  // That form back (lowercase hex only); an error says what it expects.
  static Result<TraceContext> parse(std::string_view traceparent);
  friend bool operator==(const TraceContext&, const TraceContext&) = default;
};

}  // namespace pfsnet
