#include <pfsnet/nid.h>

#include <charconv>

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
  uint32_t a = 0;
  int parts = 0;
  size_t pos = 0;
  for (;;) {
    size_t dot = addr.find('.', pos);
    std::string_view part = addr.substr(pos, dot == std::string_view::npos ? dot : dot - pos);
    uint32_t octet = 0;
    if (++parts > 4 || !parse_u32(part, 255, &octet))
      return bad(text, "address must be a dotted IPv4 address");
    a = (a << 8) | octet;
    if (dot == std::string_view::npos) break;
    pos = dot + 1;
  }
  if (parts != 4) return bad(text, "address must be a dotted IPv4 address");
  nid.addr = a;

  std::string_view type;
  if (net.starts_with("tcp")) {
    nid.type = NetType::kTcp;
    type = "tcp";
  } else if (net.starts_with("o2ib")) {
    nid.type = NetType::kO2ib;
    type = "o2ib";
  } else {
    return bad(text, "network type must be tcp or o2ib");
  }
  std::string_view num = net.substr(type.size());
  if (!num.empty()) {
    uint32_t n = 0;
    if (!parse_u32(num, 65535, &n)) return bad(text, "network number must be 0..65535");
    nid.net_num = static_cast<uint16_t>(n);
  }
  return nid;
}

std::string Nid::address_string() const {
  return std::to_string((addr >> 24) & 255) + "." + std::to_string((addr >> 16) & 255) + "." +
         std::to_string((addr >> 8) & 255) + "." + std::to_string(addr & 255);
}

std::string Nid::to_string() const {
  std::string s = address_string();
  s += type == NetType::kO2ib ? "@o2ib" : "@tcp";
  if (net_num != 0) s += std::to_string(net_num);
  return s;
}

Result<Nid> Nid::unpack(uint64_t v) {
  uint64_t type = v >> 48;
  if (type != uint64_t(NetType::kTcp) && type != uint64_t(NetType::kO2ib))
    return Status(Code::kProtocol, "bad NID network type " + std::to_string(type));
  Nid n;
  n.type = static_cast<NetType>(type);
  n.net_num = static_cast<uint16_t>(v >> 32);
  n.addr = static_cast<uint32_t>(v);
  return n;
}

}  // namespace pfsnet
