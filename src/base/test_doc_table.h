// The rows of the reference tables in docs/ (configuration.md, metrics.md), for the tests
// that hold those pages against the code. For tests only; not installed.
#pragma once

#include <fstream>
#include <string>
#include <vector>

namespace pfsnet {

// Each line of `path` that starts a table row naming a code item ("| `..."), split into
// its cells, trimmed; a cell may hold "\|" (a bar, not a border). Empty when the file
// cannot be read.
inline std::vector<std::vector<std::string>> doc_table_rows(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::string cell;
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
        cell += '|';
        ++i;
      } else if (line[i] == '|') {
        size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
        cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
        cell.clear();
      } else {
        cell += line[i];
      }
    }
    rows.push_back(std::move(cells));
  }
  return rows;
}

}  // namespace pfsnet
