// docs/configuration.md against the code: every key the daemon reads has a row, every row
// names a key it reads, and each row's default, range and run-time column are what
// config_entries (pfsnet config show), the parser and runtime_key do.
#include <gtest/gtest.h>
#include <pfsnet/config.h>

#include <cmath>
#include <cstdlib>
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
  return config_entries(c);
}

// A config file setting `key` to `value` (in TOML syntax).
std::string setting(const std::string& key, const std::string& value) {
  std::string sec = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
  if (sec == "net")
    return "[[net]]\n" + std::string(name == "nid" ? "" : "nid = \"198.18.0.1@o2ib\"\n") + name +
           " = " + value + "\n";
  if (sec == "emulation") return "[[emulation]]\n" + name + " = " + value + "\n";
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
  const std::set<std::string> no_fixed_default = {"node.name", "net.nid"};
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

}  // namespace config_reference_test
}  // namespace pfsnet
