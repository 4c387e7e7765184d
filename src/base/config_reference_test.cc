// docs/configuration.md against the code: every key the daemon reads has a row, every row
// names a key it reads, and each row's default, range and run-time column are what
// config_entries (pfsnet config show), the parser and runtime_key do.
#include <gtest/gtest.h>
#include <pfsnet/config.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "base/live_config.h"
#include "base/test_doc_table.h"

namespace pfsnet {
namespace config_reference_test {

struct Row {
  std::string key, type, def, range, runtime;
};

// The table rows of the page: "| `key` | type | default | range | run time | text |".
std::map<std::string, Row> read_reference() {
  const std::string page = std::string(PFSNET_SOURCE_DIR) + "/docs/configuration.md";
  std::map<std::string, Row> rows;
  for (const std::vector<std::string>& cells : doc_table_rows(page)) {
    EXPECT_GE(cells.size(), 6u) << cells[0];
    if (cells.size() < 6) continue;
    Row r{cells[0].substr(1, cells[0].size() - 2), cells[1], cells[2], cells[3], cells[4]};
    EXPECT_TRUE(rows.emplace(r.key, r).second) << "two rows for " << r.key;
  }
  EXPECT_FALSE(rows.empty()) << page;
  return rows;
}

// Every key: a config with one @o2ib NI (whose keys are a superset of a TCP NI's) and
// one [[emulation]] table.
std::vector<std::pair<std::string, std::string>> every_key() {
  Config c;
  NetConfig n;
  n.nid = *Nid::parse("198.18.0.1@o2ib");
  c.nets.push_back(n);
  c.emulation.push_back({});
  c.routes.push_back(RouteConfig{*parse_lnet_net("tcp2"), *Nid::parse("198.18.0.2@o2ib"), 1, 0});
  return config_entries(c);
}

// A config file setting `key` to `value` (in TOML syntax).
std::string setting(const std::string& key, const std::string& value) {
  std::string sec = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
  if (sec == "net")
    return "[[net]]\n" + std::string(name == "nid" ? "" : "nid = \"198.18.0.1@o2ib\"\n") + name +
           " = " + value + "\n";
  if (sec == "emulation") return "[[emulation]]\n" + name + " = " + value + "\n";
  if (sec == "route")
    return "[[route]]\nnet = \"tcp2\"\ngateway = \"198.18.0.2@o2ib\"\n" + name + " = " + value +
           "\n";
  return "[" + sec + "]\n" + name + " = " + value + "\n";
}

bool number(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && end && *end == '\0';
}

TEST(ConfigReferenceTest, EveryKeyHasARowAndEveryRowAKey) {
  std::map<std::string, Row> rows = read_reference();
  std::set<std::string> keys;
  for (const auto& [k, v] : every_key()) keys.insert(k);
  for (const std::string& k : keys) EXPECT_TRUE(rows.count(k)) << k << " has no row";
  for (const auto& [k, r] : rows) EXPECT_TRUE(keys.count(k)) << k << ": no such key";
  EXPECT_EQ(rows.size(), keys.size());
}

TEST(ConfigReferenceTest, EachRowsDefaultAndRunTimeAreTheCodes) {
  std::map<std::string, Row> rows = read_reference();
  const std::set<std::string> no_fixed_default = {"node.name", "net.nid", "route.net",
                                                  "route.gateway"};
  for (const auto& [key, value] : every_key()) {
    auto it = rows.find(key);
    if (it == rows.end()) continue;  // the test above names it
    const Row& r = it->second;
    EXPECT_EQ(r.runtime, runtime_key(key) ? "yes" : "no") << key;
    if (r.def.size() < 2 || r.def.front() != '`') {
      EXPECT_TRUE(no_fixed_default.count(key)) << key << ": default '" << r.def << "'";
      continue;
    }
    std::string doc = r.def.substr(1, r.def.size() - 2);
    double a, b;
    if (number(doc, &a) && number(value, &b))
      EXPECT_EQ(a, b) << key << ": documented " << doc << ", the code's " << value;
    else
      EXPECT_EQ(doc, value) << key;
    static const std::set<std::string> types = {"integer", "number",          "boolean",
                                                "string",  "list of strings", "table"};
    EXPECT_TRUE(types.count(r.type)) << key << ": type '" << r.type << "'";
  }
}

// A range "LO..HI" of an integer or number key is the parser's: just past either end is
// refused with exactly that range.
TEST(ConfigReferenceTest, EachRowsRangeIsTheParsers) {
  int checked = 0;
  for (const auto& entry : read_reference()) {
    const std::string& key = entry.first;
    const Row& r = entry.second;  // named, not bound: a lambda below captures it
    if (r.type != "integer" && r.type != "number") continue;
    size_t dots = r.range.find("..");
    ASSERT_NE(dots, std::string::npos) << key << ": range '" << r.range << "'";
    std::string lo = r.range.substr(0, dots), hi = r.range.substr(dots + 2);
    double l, h;
    ASSERT_TRUE(number(lo, &l) && number(hi, &h)) << key << ": range '" << r.range << "'";
    auto refused = [&](double v) {
      std::ostringstream text;
      text.precision(17);
      text << v;
      std::string t = text.str();
      if (r.type == "integer") t = std::to_string(static_cast<long long>(v));
      auto p = parse_config(setting(key, t), "range.toml");
      EXPECT_FALSE(p.ok()) << key << " = " << t << " was taken";
      if (!p.ok()) {
        EXPECT_NE(p.status().message().find("out of range " + lo + ".." + hi), std::string::npos)
            << key << " = " << t << ": " << p.status().message();
      }
    };
    refused(r.type == "integer" ? l - 1 : l - std::max(1.0, std::abs(l)));
    refused(r.type == "integer" ? h + 1 : h + std::max(1.0, std::abs(h)));
    ++checked;
  }
  EXPECT_GT(checked, 60);
}

// packaging/pfsnetd.toml, installed as /etc/pfsnet/pfsnetd.toml by the packages: it loads,
// every key it sets or shows commented is one the reference documents, and a commented
// line that is not marked an example ("e.g.") shows the code's default.
TEST(ConfigReferenceTest, TheInstalledConfigurationLoadsAndShowsTheDefaults) {
  const std::string path = std::string(PFSNET_SOURCE_DIR) + "/packaging/pfsnetd.toml";
  auto loaded = load_config(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ASSERT_EQ(loaded->nets.size(), 1u);
  EXPECT_EQ(loaded->nets[0].nid.ipv4() >> 24, 127u) << "as installed, the node runs on loopback";
  EXPECT_TRUE(loaded->node.mgs.empty()) << "as installed, the node runs alone";
  std::map<std::string, Row> rows = read_reference();
  std::map<std::string, std::string> defaults;
  for (const auto& [k, v] : every_key()) defaults.emplace(k, v);
  std::ifstream in(path);
  std::string line, section;
  int shown = 0, lines = 0;
  while (std::getline(in, line) && ++lines < 10000) {
    bool commented = !line.empty() && line[0] == '#';
    size_t start = commented ? line.find_first_not_of("# ") : 0;
    std::string body = start == std::string::npos ? "" : line.substr(start);
    if (body.rfind("[[", 0) == 0) {
      section = body.substr(2, body.find("]]") - 2);
      continue;
    }
    if (!commented && body.rfind("[", 0) == 0) {
      section = body.substr(1, body.find(']') - 1);
      continue;
    }
    size_t eq = body.find(" = ");
    if (eq == std::string::npos || body.find_first_of(" .") < eq) continue;  // prose
    std::string key = section + "." + body.substr(0, eq);
    std::string value = body.substr(eq + 3), note;
    if (size_t hash = value.find(" #"); hash != std::string::npos) {
      note = value.substr(hash);
      value = value.substr(0, hash);
    }
    value.erase(value.find_last_not_of(' ') + 1);
    EXPECT_TRUE(rows.count(key)) << path << ": " << key << " is not in docs/configuration.md";
    if (!commented || note.find("e.g.") != std::string::npos || !defaults.count(key)) continue;
    double a, b;
    if (number(value, &a) && number(defaults[key], &b))
      EXPECT_EQ(a, b) << key << ": shown " << value << ", the default " << defaults[key];
    else
      EXPECT_EQ(value, defaults[key]) << key;
    ++shown;
  }
  EXPECT_GT(shown, 10) << "the defaults it shows";
}

}  // namespace config_reference_test
}  // namespace pfsnet
