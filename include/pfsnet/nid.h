// NIDs: LNet-style network identifiers, "ADDRESS@NET" such as "127.0.0.2@tcp",
// "10.1.0.5@tcp1", "10.2.0.5@o2ib" or "2001:2::5@tcp". The address is IPv4 or, a large NID
// (Lustre 2.16's `struct lnet_nid`), IPv6 -- written as Lustre writes it, the address's
// canonical text (RFC 5952) before the '@'; the net is a type ("tcp", or "o2ib" for verbs)
// and an optional number (0 when absent).
// Thread safety: a plain value.
#pragma once

#include <pfsnet/status.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace pfsnet {

enum class NetType : uint8_t { kTcp = 1, kO2ib = 2 };

struct Nid {
  static constexpr size_t kMaxAddrBytes = 16;

  NetType type = NetType::kTcp;
  uint16_t net_num = 0;
  uint8_t addr_len = 4;                       // bytes of address: 4 (IPv4) or 16 (IPv6)
  std::array<uint8_t, kMaxAddrBytes> addr{};  // network byte order; bytes past addr_len are 0

  static Result<Nid> parse(std::string_view text);
  // No NID: no address (a frame header's "none given", 0 in version 1's form).
  static Nid none() {
    Nid n;
    n.addr_len = 0;
    return n;
  }
  bool is_none() const { return addr_len == 0; }
  // An IPv4 NID from a host-order address.
  static Nid ipv4(uint32_t a, NetType type = NetType::kTcp, uint16_t net_num = 0);
  std::string to_string() const;
  // The address alone, e.g. "127.0.0.2" or "2001:2::5".
  std::string address_string() const;
  // The network, as one number (LNet's LNET_NIDNET): type << 16 | net_num.
  uint32_t net() const { return uint32_t(type) << 16 | net_num; }
  // True for a verbs (RDMA) network.
  bool is_verbs() const { return type == NetType::kO2ib; }
  // True when the address is IPv6 (or longer): the NID has no 64-bit form and a version-1
  // peer cannot be told of it (LNet's large NIDs).
  bool is_large() const { return addr_len > 4; }
  // The IPv4 address in host byte order; 0 for a large NID.
  uint32_t ipv4() const {
    return addr_len != 4 ? 0
                         : uint32_t(addr[0]) << 24 | uint32_t(addr[1]) << 16 |
                               uint32_t(addr[2]) << 8 | addr[3];
  }
  void set_ipv4(uint32_t a);

  // The 64-bit form version 1 speaks: type << 48 | net_num << 32 | IPv4 address. 0 for a
  // large NID, which has none, and for none().
  uint64_t small_form() const {
    return addr_len != 4 ? 0
                         : (uint64_t(type) << 48) | (uint64_t(net_num) << 32) | uint64_t(ipv4());
  }
  static Result<Nid> unpack(uint64_t v);

  friend bool operator==(const Nid&, const Nid&) = default;
  friend auto operator<=>(const Nid&, const Nid&) = default;
};

}  // namespace pfsnet

template <>
struct std::hash<pfsnet::Nid> {
  size_t operator()(const pfsnet::Nid& n) const noexcept {
    // An IPv4 NID hashes as its 64-bit form did (the common case, per RPC: no loop).
    if (n.addr_len == 4) return std::hash<uint64_t>()(n.small_form());
    uint64_t h = (uint64_t(n.type) << 56) ^ (uint64_t(n.net_num) << 40) ^ n.addr_len;
    for (size_t i = 0; i < n.addr_len; ++i) h = (h ^ n.addr[i]) * 0x100000001b3ull;
    return std::hash<uint64_t>()(h);
  }
};

// A pair of NIDs (a path: local, peer) as a hash key.
template <>
struct std::hash<std::pair<pfsnet::Nid, pfsnet::Nid>> {
  size_t operator()(const std::pair<pfsnet::Nid, pfsnet::Nid>& p) const noexcept {
    return std::hash<pfsnet::Nid>()(p.first) * 0x9e3779b97f4a7c15ull ^
           std::hash<pfsnet::Nid>()(p.second);
  }
};

namespace pfsnet {
// A network's name, "tcp", "tcp2", "o2ib1" (what follows a NID's '@'), as the one number
// Nid::net() gives: type << 16 | net_num. Errors name what is wrong.
Result<uint32_t> parse_lnet_net(std::string_view net);
std::string lnet_net_name(uint32_t net);

// 64 bits of a NID to seed a hash or a spread with: an IPv4 NID's small form (what the
// seeds have always been), a large NID's hash.
inline uint64_t nid_seed(const Nid& n) {
  return n.is_large() ? std::hash<Nid>()(n) : n.small_form();
}
}  // namespace pfsnet
