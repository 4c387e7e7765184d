// NIDs: LNet-style network identifiers, "ADDRESS@NET" such as "127.0.0.2@tcp",
// "10.1.0.5@tcp1" or "10.2.0.5@o2ib". The address is IPv4; the net is a type ("tcp",
// or "o2ib" for verbs) and an optional number (0 when absent).
// Thread safety: a plain value.
#pragma once

#include <pfsnet/status.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace pfsnet {

enum class NetType : uint8_t { kTcp = 1, kO2ib = 2 };

struct Nid {
  uint32_t addr = 0;  // IPv4 address, host byte order
  NetType type = NetType::kTcp;
  uint16_t net_num = 0;

  static Result<Nid> parse(std::string_view text);
  std::string to_string() const;
  // Dotted-quad address alone, e.g. "127.0.0.2".
  std::string address_string() const;
  // True for a verbs (RDMA) network.
  bool is_verbs() const { return type == NetType::kO2ib; }

  // Packs into the 64-bit wire form: type << 48 | net_num << 32 | addr. 0 is "any".
  uint64_t pack() const {
    return (uint64_t(type) << 48) | (uint64_t(net_num) << 32) | uint64_t(addr);
  }
  static Result<Nid> unpack(uint64_t v);

  friend bool operator==(const Nid&, const Nid&) = default;
  friend auto operator<=>(const Nid& a, const Nid& b) { return a.pack() <=> b.pack(); }
};

}  // namespace pfsnet

template <>
struct std::hash<pfsnet::Nid> {
  size_t operator()(const pfsnet::Nid& n) const noexcept { return std::hash<uint64_t>()(n.pack()); }
};
