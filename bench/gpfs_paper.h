// The GPFS 1.4 paper's measured tables (its Appendices B and C: MB/s, mean of its runs),
// and a printer that shows one of ours beside the paper's, cell for cell, with the ratio
// of each table's largest row to its peak.
#pragma once

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pfsnet {

struct PaperTable {
  const char* name;  // "Table 1"
  std::vector<int> nodes;
  std::vector<std::vector<double>> mb_s;  // [row][thread column: 1, 2, 4, 8, 16]
};

inline const std::vector<int> kPaperThreads{1, 2, 4, 8, 16};

// Appendix B, 1 server (SP Switch, 80 buddy buffers, 100 MB pagepools).
inline const PaperTable kTable1Read{"Table 1",
                                    {1, 2, 4, 8, 16, 32},
                                    {{108.2, 123.0, 121.6, 124.4, 124.9},
                                     {121.1, 124.6, 125.3, 125.2, 125.4},
                                     {123.7, 125.5, 125.4, 125.1, 125.1},
                                     {123.4, 125.2, 125.0, 124.8, 124.8},
                                     {122.9, 124.7, 124.8, 124.8, 124.8},
                                     {122.2, 125.2, 124.8, 124.6, 124.6}}};
inline const PaperTable kTable2Write{"Table 2",
                                     {1, 2, 4, 8, 16, 32},
                                     {{133.7, 133.4, 131.9, 129.9, 129.4},
                                      {143.6, 138.5, 134.2, 132.5, 130.9},
                                      {144.4, 138.7, 134.7, 133.3, 132.0},
                                      {139.4, 135.7, 134.2, 132.9, 131.9},
                                      {135.3, 132.9, 132.3, 131.3, 131.6},
                                      {123.7, 122.9, 123.2, 124.9, 126.1}}};
// Appendix B, 2 servers, the file striped across both.
inline const PaperTable kTable4Read{"Table 4",
                                    {1, 2, 4, 8, 16, 32},
                                    {{121.7, 128.9, 129.7, 131.0, 131.5},
                                     {166.4, 172.6, 177.2, 179.2, 179.8},
                                     {193.6, 204.9, 207.3, 207.7, 207.9},
                                     {213.1, 223.3, 224.4, 221.3, 217.1},
                                     {216.5, 223.7, 224.0, 223.5, 230.5},
                                     {227.7, 232.8, 213.1, 213.4, 235.9}}};
inline const PaperTable kTable5Write{"Table 5",
                                     {1, 2, 4, 8, 16, 32},
                                     {{135.3, 134.8, 133.1, 131.8, 130.4},
                                      {176.9, 186.4, 183.1, 177.4, 176.3},
                                      {212.6, 208.1, 201.1, 203.2, 196.5},
                                      {229.2, 221.4, 218.7, 215.9, 208.0},
                                      {212.0, 206.9, 212.0, 214.5, 211.0},
                                      {173.6, 177.0, 179.7, 175.4, 181.6}}};
// Appendix C, high nodes: 1 server on SP Switch2, 256 buddy buffers, 62 MB pagepools.
inline const PaperTable kTable7Read{"Table 7",
                                    {1, 2, 4, 6, 8, 12, 16, 24, 28},
                                    {{379.2, 502.3, 349.5, 365.2, 354.4},
                                     {577.1, 538.1, 586.9, 617.5, 633.6},
                                     {590.8, 647.6, 650.9, 695.0, 719.2},
                                     {616.2, 699.2, 698.0, 707.7, 720.8},
                                     {681.1, 707.3, 705.0, 710.5, 723.1},
                                     {660.8, 714.8, 712.1, 683.1, 710.4},
                                     {654.8, 716.4, 716.7, 693.8, 716.9},
                                     {619.3, 708.7, 722.4, 707.9, 720.2},
                                     {706.6, 718.8, 721.1, 708.3, 722.0}}};
inline const PaperTable kTable8Write{"Table 8",
                                     {1, 2, 4, 6, 8, 12, 16, 24},
                                     {{181.6, 341.9, 416.4, 431.7, 417.1},
                                      {359.6, 651.5, 703.7, 711.1, 726.7},
                                      {643.8, 644.8, 636.8, 615.8, 641.6},
                                      {611.4, 591.7, 593.6, 571.7, 583.8},
                                      {586.4, 549.4, 571.3, 560.6, 564.3},
                                      {556.2, 529.5, 525.6, 518.8, 516.6},
                                      {527.8, 504.7, 502.5, 495.8, 491.0},
                                      {456.0, 477.9, 470.7, 467.2, 467.3}}};

// The paper's largest row's lowest figure over its peak.
inline double paper_row_vs_peak(const PaperTable& t) {
  double peak = 0, low = 1e300;
  for (const auto& row : t.mb_s)
    for (double v : row) peak = std::max(peak, v);
  for (double v : t.mb_s.back()) low = std::min(low, v);
  return low / peak;
}

// Our cell (MiB/s) of `op` at `nodes` x `threads`, or -1.
inline double our_cell(const nlohmann::json& r, const std::string& op, int nodes, int threads) {
  for (const auto& c : r["cells"])
    if (c["op"] == op && c["nodes"] == nodes && c["threads"] == threads)
      return c["mib_s"].get<double>();
  return -1;
}

// Ours beside the paper's, a row per node count: "ours / paper" for each thread count.
inline std::string beside_paper(const nlohmann::json& r, const std::string& op,
                                const PaperTable& t) {
  std::string out = op + ", MiB/s here / MB/s in the paper's " + t.name + "\n" + "         ";
  char buf[64];
  for (int th : kPaperThreads) {
    std::snprintf(buf, sizeof(buf), " %13d thr", th);
    out += buf;
  }
  out += "\n";
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%3d nodes", t.nodes[i]);
    out += buf;
    for (size_t j = 0; j < kPaperThreads.size(); ++j) {
      double ours = our_cell(r, op, t.nodes[i], kPaperThreads[j]);
      if (ours < 0)
        std::snprintf(buf, sizeof(buf), " %9s/%7.1f", "-", t.mb_s[i][j]);
      else
        std::snprintf(buf, sizeof(buf), " %9.1f/%7.1f", ours, t.mb_s[i][j]);
      out += buf;
    }
    out += "\n";
  }
  std::snprintf(buf, sizeof(buf), "the paper's largest row over its peak: %.2f\n",
                paper_row_vs_peak(t));
  return out + buf;
}

}  // namespace pfsnet
