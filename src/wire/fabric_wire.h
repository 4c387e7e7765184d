// The fabric LND's wire (o2iblnd's kib_msg and connparams, in the small): what one
// libfabric message carries, and the parameters both ends exchange when they connect.
//
// Every message is one receive buffer of at most the connection's message size:
//
//   FabricHeader (16 bytes) | body
//
//   kFrame     body = an encoded frame head (the header of the connection's version and,
//              version 2, its extension area) | payload | bulk (the frame whole, inline)
//              [| sink RmaDesc]
//   kFrameRma  body = an encoded frame head | payload (unless by RMA) | RmaDesc per part
//              by RMA (payload first, then bulk; flags say which) [| sink RmaDesc]: the
//              receiver reads them from the sender's registered memory, then answers
//              kRmaDone
//   Either, flag kSinkOffered (a request): the last descriptor is a registered buffer of
//              the sender's that the reply's bulk may be written into (o2iblnd's GET sink).
//   Either, flag kBulkInSink (a reply): its bulk_len bytes were written by RMA into the
//              sink that the request of the same xid offered, before this message was
//              sent; the body carries no bulk.
//   kRmaDone   cookie = the kFrameRma's; flags kRmaFailed when the read failed
//   kNoop      nothing: returns credits when no other message goes back
//
// Credits are the connection's own (LND) flow control, apart from Net's: one per receive
// buffer the peer has posted. `credits` returns buffers this end has reposted.
// Little-endian; decoders check every length against what arrived and the limits.
// Thread safety: pure functions.
#pragma once

#include <pfsnet/config.h>
#include <pfsnet/status.h>

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "wire/frame.h"

namespace pfsnet {

inline constexpr size_t kFabricHeaderSize = 16;
inline constexpr size_t kRmaDescSize = 24;
inline constexpr size_t kConnParamsSize = 16;
inline constexpr uint32_t kConnParamsMagic = 0x46534650;  // "PFSF"
inline constexpr uint16_t kFabricWireVersion = 2;
// The bounds of the connection parameters either end may ask for (kMinRxDepth ..
// kMaxMsgSize) are those of the net.rx_depth and net.msg_size keys, in pfsnet/config.h.

enum class FabricMsg : uint8_t { kFrame = 1, kFrameRma = 2, kRmaDone = 3, kNoop = 4 };

inline constexpr uint8_t kRmaPayload = 1;   // kFrameRma: the payload is read by RMA
inline constexpr uint8_t kRmaBulk = 2;      // kFrameRma: the bulk is read by RMA
inline constexpr uint8_t kSinkOffered = 4;  // kFrame/kFrameRma: a request offers a reply sink
inline constexpr uint8_t kBulkInSink = 8;   // kFrame/kFrameRma: the reply's bulk is in the sink
inline constexpr uint8_t kRmaFailed = 1;    // kRmaDone: the read failed

struct FabricHeader {
  FabricMsg type = FabricMsg::kNoop;
  uint8_t flags = 0;
  uint16_t credits = 0;
  uint32_t body_len = 0;
  uint64_t cookie = 0;
};

// A registered region of the sender's: where to read it and with which key.
struct RmaDesc {
  uint64_t addr = 0;  // virtual address or offset, as the provider's mr_mode says
  uint64_t key = 0;
  uint64_t len = 0;
};

// What each end of a connection asks of the other when it connects (CM private data).
struct ConnParams {
  uint16_t version = kFabricWireVersion;
  uint32_t rx_depth = 0;  // receive buffers posted: the peer's credits
  uint32_t msg_size = 0;  // bytes per receive buffer: the largest message it takes
};

void encode_fabric_header(const FabricHeader& h, uint8_t* out);  // kFabricHeaderSize bytes
// Decodes the header of a message of `msg.size()` bytes; body_len must match what arrived.
Result<FabricHeader> decode_fabric_header(std::span<const uint8_t> msg);

void encode_rma_desc(const RmaDesc& d, uint8_t* out);  // kRmaDescSize bytes
// `max_len` bounds the region (the frame limits).
Result<RmaDesc> decode_rma_desc(std::span<const uint8_t> bytes, uint64_t max_len);

// A kFrame or kFrameRma message's body, taken apart and checked: the lengths of its parts
// against each other, the frame header and `limits`; which flags go with which frame kind
// (a sink is offered only by a request and used only by a reply, never with bulk of its
// own). The spans point into `body`.
struct FrameMsg {
  FrameHeader hdr;
  std::span<const uint8_t> payload;              // inline (empty when read by RMA)
  std::span<const uint8_t> bulk;                 // inline (empty when read by RMA or in the sink)
  std::optional<RmaDesc> payload_rma, bulk_rma;  // parts to read from the sender
  std::optional<RmaDesc> sink;                   // offered for the reply's bulk
  bool bulk_in_sink = false;
};
Result<FrameMsg> decode_frame_msg(const FabricHeader& fh, std::span<const uint8_t> body,
                                  const FrameLimits& limits);

std::array<uint8_t, kConnParamsSize> encode_conn_params(const ConnParams& p);
Result<ConnParams> decode_conn_params(std::span<const uint8_t> bytes);

}  // namespace pfsnet
