// Fuzz target: the config file parser (parse_config; toml++ underneath) and run-time
// assignments (`pfsnet config set KEY=VALUE`, apply_config_assignments). Whatever the
// text, it parses or fails with a message; a config that parses survives being rendered
// and parsed again unchanged (what `config set` does with it).
#include <pfsnet/config.h>

#include <string>
#include <string_view>

#include "base/live_config.h"
#include "fuzz.h"

using namespace pfsnet;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1 << 16) return 0;  // a config file, not a disk image
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // After a NUL-free first line of assignments ("key=value;key=value"), the rest is a
  // file; without a newline the whole input is the file.
  std::string_view assigns;
  if (auto nl = text.find('\n'); nl != std::string_view::npos && text.starts_with("#!")) {
    assigns = text.substr(2, nl - 2);
    text.remove_prefix(nl + 1);
  }
  auto cfg = parse_config(text, "fuzz.toml");
  if (!cfg.ok()) {
    FUZZ_CHECK(!cfg.status().message().empty());
    return 0;
  }
  Config again = *cfg;
  FUZZ_CHECK(apply_config_assignments(&again, {}).ok());
  FUZZ_CHECK(config_diff(*cfg, again).empty());
  if (!assigns.empty()) {
    std::vector<std::string> list;
    size_t start = 0;
    while (start <= assigns.size() && list.size() < 16) {
      size_t end = assigns.find(';', start);
      if (end == std::string_view::npos) end = assigns.size();
      list.emplace_back(assigns.substr(start, end - start));
      start = end + 1;
    }
    Config set = *cfg;
    Status s = apply_config_assignments(&set, list);
    if (!s.ok()) FUZZ_CHECK(!s.message().empty() && config_diff(*cfg, set).empty());
  }
  return 0;
}

namespace pfsnet::fuzz {

std::vector<std::vector<uint8_t>> fuzz_seeds() {
  auto v = [](std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  return {
      v("[node]\nname = \"oss01\"\nroles = [\"server\"]\nmgs = [\"127.0.0.2@tcp\"]\n"
        "cluster_key_file = \"/etc/pfsnet/cluster.key\"\n[[net]]\nnid = \"127.0.0.4@tcp\"\n"
        "port = 7988\n[lnet]\ncredits = 64\npeer_credits = 8\ntransaction_timeout = 50\n"
        "checksum = true\n[rpc]\nmax_rpcs_in_flight = 8\n[stats]\nmaxBlockSize = 1048576\n"),
      v("#!lnet.peer_credits=16;stats.rpcPerfNumberSecondIntervals=120;lnet.checksum=false\n"
        "[node]\nname = \"c1\"\n[[net]]\nnid = \"198.18.1.1@tcp\"\n[[net]]\n"
        "nid = \"198.18.2.1@o2ib1\"\nprovider = \"tcp\"\n[mesh]\ninterval = 1\nwindow = 20\n"
        "[[emulation]]\nni = \"198.18.1.1@tcp\"\ndelay_ms = 20\nrate_mbit = 100\n"),
      v("[node]\nname = \"m\"\nroles = [\"mgs\", \"client\"]\nhttp = \"127.0.0.1:9100\"\n"
        "[[net]]\nnid = \"127.0.0.2@tcp\"\n[membership]\nclient_ping_interval = 50\n"
        "[tune]\nauto = true\n[health]\nslowness = true\n"),
  };
}

}  // namespace pfsnet::fuzz
