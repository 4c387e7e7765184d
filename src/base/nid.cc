#include <arpa/inet.h>
#include <pfsnet/nid.h>

#include <charconv>
#include <cstring>

namespace pfsnet {
namespace {

Status bad(std::string_view text, std::string_view why) {
  return Status(Code::kInvalidArgument,
                "malformed NID '" + std::string(text) + "': " + std::string(why));
}

bool parse_u32(std::string_view s, uint32_t max, uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v > max) return false;
  // No leading zeros ("01"), which inet_aton would read as octal.
  if (s.size() > 1 && s[0] == '0') return false;
  *out = v;
  return true;
}

}  // namespace

Result<Nid> Nid::parse(std::string_view text) {
  auto at = text.find('@');
  if (at == std::string_view::npos) return bad(text, "expected ADDRESS@NET");
  std::string_view addr = text.substr(0, at);
  std::string_view net = text.substr(at + 1);

  Nid nid;
  if (addr.find(':') != std::string_view::npos) {
    // An IPv6 address, as Lustre 2.16 reads one (inet_pton's forms: "2001:2::5", "::1",
    // "::ffff:198.18.0.1"); no zone, no brackets.
    char buf[64];
    if (addr.size() >= sizeof buf) return bad(text, "IPv6 address too long");
    std::memcpy(buf, addr.data(), addr.size());
    buf[addr.size()] = 0;
    if (inet_pton(AF_INET6, buf, nid.addr.data()) != 1)
      return bad(text, "address must be a dotted IPv4 or an IPv6 address");
    // One NID per address: an IPv4-mapped address (::ffff:a.b.c.d) is written as IPv4.
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(nid.addr.data(), kMapped, 12) == 0)
      return bad(text, "an IPv4-mapped address is written as its IPv4 address");
    nid.addr_len = 16;
  } else {
    uint32_t a = 0;
    int parts = 0;
    size_t pos = 0;
    for (;;) {
      size_t dot = addr.find('.', pos);
      std::string_view part = addr.substr(pos, dot == std::string_view::npos ? dot : dot - pos);
      uint32_t octet = 0;
      if (++parts > 4 || !parse_u32(part, 255, &octet))
        return bad(text, "address must be a dotted IPv4 or an IPv6 address");
      a = (a << 8) | octet;
      if (dot == std::string_view::npos) break;
      pos = dot + 1;
    }
    if (parts != 4) return bad(text, "address must be a dotted IPv4 or an IPv6 address");
    nid.set_ipv4(a);
  }

  auto n = parse_lnet_net(net);
  if (!n.ok()) return bad(text, n.status().message());
  nid.type = static_cast<NetType>(*n >> 16);
  nid.net_num = static_cast<uint16_t>(*n);
  return nid;
}

Nid Nid::ipv4(uint32_t a, NetType type, uint16_t net_num) {
  Nid n;
  n.type = type;
  n.net_num = net_num;
  n.set_ipv4(a);
  return n;
}

void Nid::set_ipv4(uint32_t a) {
  addr = {};
  addr_len = 4;
  for (int k = 0; k < 4; ++k) addr[k] = static_cast<uint8_t>(a >> (24 - 8 * k));
}

std::string Nid::address_string() const {
  if (!is_large()) {
    uint32_t a = ipv4();
    return std::to_string((a >> 24) & 255) + "." + std::to_string((a >> 16) & 255) + "." +
           std::to_string((a >> 8) & 255) + "." + std::to_string(a & 255);
  }
  char buf[INET6_ADDRSTRLEN];
  if (addr_len == 16 && inet_ntop(AF_INET6, addr.data(), buf, sizeof buf)) return buf;
  // An address of another length (a later network type's): hex words, as Lustre prints an
  // address it has no format for.
  std::string s;
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < addr_len; ++i) {
    if (i > 0 && i % 4 == 0) s += ':';
    s += kHex[addr[i] >> 4];
    s += kHex[addr[i] & 15];
  }
  return s;
}

std::string Nid::to_string() const { return address_string() + "@" + lnet_net_name(net()); }

Result<uint32_t> parse_lnet_net(std::string_view net) {
  std::string_view type;
  NetType t;
  if (net.starts_with("tcp")) {
    t = NetType::kTcp;
    type = "tcp";
  } else if (net.starts_with("o2ib")) {
    t = NetType::kO2ib;
    type = "o2ib";
  } else {
    return Status(Code::kInvalidArgument, "network type must be tcp or o2ib");
  }
  std::string_view num = net.substr(type.size());
  uint32_t n = 0;
  if (!num.empty() && !parse_u32(num, 65535, &n))
    return Status(Code::kInvalidArgument, "network number must be 0..65535");
  return uint32_t(t) << 16 | n;
}

std::string lnet_net_name(uint32_t net) {
  std::string s = NetType(net >> 16) == NetType::kO2ib ? "o2ib" : "tcp";
  if (uint16_t num = static_cast<uint16_t>(net); num != 0) s += std::to_string(num);
  return s;
}

Result<Nid> Nid::unpack(uint64_t v) {
  uint64_t type = v >> 48;
  if (type != uint64_t(NetType::kTcp) && type != uint64_t(NetType::kO2ib))
    return Status(Code::kProtocol, "bad NID network type " + std::to_string(type));
  Nid n;
  n.type = static_cast<NetType>(type);
  n.net_num = static_cast<uint16_t>(v >> 32);
  n.set_ipv4(static_cast<uint32_t>(v));
  return n;
}

}  // namespace pfsnet
