// Fuzz target: the probes' messages from peers -- cluster health (HEALTH_REPORT, the
// HEALTH_CLUSTER page), netverify (NETVERIFY_INFO, NETVERIFY_MTU_SEND, its UDP datagrams)
// the probe mesh's MTU ask and answer, HEALTH_MUTE's request and reply, and HEALTH_LIST's
// request and reply. The first byte
// picks the decoder.
#include "fuzz.h"
#include "probe/cluster_health.h"
#include "probe/health_list.h"
#include "probe/health_mutes.h"
#include "probe/mesh.h"
#include "probe/netverify.h"

using namespace pfsnet;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::span<const uint8_t> in(data + 1, size - 1);
  switch (data[0] % 12) {
    case 0:
      fuzz::roundtrip(decode_health_report(in), encode_health_report, decode_health_report);
      break;
    case 1:
      fuzz::roundtrip(decode_health_page(in), encode_health_page, decode_health_page);
      break;
    case 2:
      fuzz::roundtrip(decode_nv_info(in), encode_nv_info, decode_nv_info);
      break;
    case 3:
      fuzz::roundtrip(decode_nv_mtu_send_req(in), encode_nv_mtu_send_req, decode_nv_mtu_send_req);
      break;
    case 4:
      fuzz::roundtrip(decode_nv_mtu_send_rep(in), encode_nv_mtu_send_rep, decode_nv_mtu_send_rep);
      break;
    case 5:
      fuzz::roundtrip(
          decode_nv_datagram(in), [](const NvDatagram& d) { return encode_nv_datagram(d); },
          [](std::span<const uint8_t> b) { return decode_nv_datagram(b); });
      break;
    case 6:
      if (auto nid = decode_mesh_mtu_ask(in)) {
        Buffer e = encode_mesh_mtu_ask(*nid);
        auto again = decode_mesh_mtu_ask(e.span());
        FUZZ_CHECK(again && *again == *nid);
      }
      break;
    case 7:
      if (uint32_t mtu = decode_mesh_mtu_answer(in)) {
        FUZZ_CHECK(decode_mesh_mtu_answer(encode_mesh_mtu_answer(mtu).span()) == mtu);
      }
      break;
    case 8:
      fuzz::roundtrip(decode_mute_req(in), encode_mute_req, decode_mute_req);
      break;
    case 9:
      fuzz::roundtrip(decode_mute_list(in), encode_mute_list, decode_mute_list);
      break;
    case 10:
      fuzz::roundtrip(decode_health_list(in), encode_health_list, decode_health_list);
      break;
    case 11:
      fuzz::roundtrip(decode_health_list_request(in), encode_health_list_request,
                      decode_health_list_request);
      break;
  }
  return 0;
}

namespace pfsnet::fuzz {

std::vector<std::vector<uint8_t>> fuzz_seeds() {
  Nid a = *Nid::parse("198.18.1.2@tcp"), b = *Nid::parse("198.18.2.3@tcp1");
  Problem p{"ni",     "198.18.1.16@tcp (s4)", "THROTTLED",
            "c1, c2", 1795576298187,          "probe mesh: read 2.4 MiB/s < median 410.3 / 3",
            ""};
  HealthReport rep{"c2", {p, p}};
  HealthPage page{3, 1, {{"c1", 1795576298187, {p}}, {"c2", 0, {}}}};
  NvInfo info{"oss01", 1795576298187000000, 8, 64, 8, 2097152, {{a, "eth0", 1500}, {b, "", 0}},
              "eth0",  "198.18.1.254"};
  NvMtuSendReq mreq{a, 40000, 0x1234567890abcdefULL, {576, 1280, 1500, 9000}};
  NvMtuSendRep mrep{{576, 1280, 1500}, {9000}};
  NvDatagram probe{NvKind::kProbe, 77, 1500, "", "", ""};
  NvDatagram ack{NvKind::kAck, 77, 1500, "eth0", "198.18.1.2", "198.18.1.3"};
  HealthMute m{"LOSSY", "198.18.1.2@tcp -> 198.18.2.3@tcp1", 1795576298187, 1795583498187, true, 2,
               "c1"};
  Problem muted = p;
  muted.muted = true;
  HealthListReply list{true, a, 5, 4, {p, muted}, 3, {{m, 1, false, "grew worse"}}, ""};
  return {tagged(0, encode_health_report(rep)),
          tagged(1, encode_health_page(page)),
          tagged(2, encode_nv_info(info)),
          tagged(3, encode_nv_mtu_send_req(mreq)),
          tagged(4, encode_nv_mtu_send_rep(mrep)),
          tagged(5, encode_nv_datagram(probe)),
          tagged(5, encode_nv_datagram(ack)),
          tagged(6, encode_mesh_mtu_ask(a)),
          tagged(7, encode_mesh_mtu_answer(9000)),
          tagged(8, encode_mute_req({MuteOp::kSet, m})),
          tagged(9, encode_mute_list({{m, m}})),
          tagged(10, encode_health_list(list)),
          tagged(10, encode_health_list(HealthListReply{})),
          tagged(11, encode_health_list_request(rep))};
}

}  // namespace pfsnet::fuzz
