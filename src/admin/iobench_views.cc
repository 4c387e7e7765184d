#include "admin/iobench_views.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace pfsnet {

using nlohmann::json;

std::string iobench_tables(const json& r) {
  std::string out;
  std::vector<int> nodes = r["nodes"].get<std::vector<int>>(),
                   threads = r["threads"].get<std::vector<int>>();
  for (const char* op : {"read", "write"}) {
    bool any = false;
    for (const json& c : r["cells"]) any = any || c["op"] == op;
    if (!any) continue;
    const bool direct = op == std::string("write") && r.value("direct", false);
    out += std::string(op == std::string("read") ? "Read" : "Write") + " throughput, MiB/s (" +
           std::to_string(r["servers"].size()) + " server(s), " +
           std::to_string(r["size"].get<uint64_t>() >> 10) + " KiB requests" +
           (direct ? ", direct" : "") + ")\n";
    char line[64];
    std::snprintf(line, sizeof(line), "%-10s", "");
    out += line;
    for (int t : threads) {
      std::snprintf(line, sizeof(line), " %10s",
                    (std::to_string(t) + (t == 1 ? " thread" : " threads")).c_str());
      out += line;
    }
    out += "\n";
    for (int n : nodes) {
      std::snprintf(line, sizeof(line), "%-10s",
                    (std::to_string(n) + (n == 1 ? " node" : " nodes")).c_str());
      out += line;
      for (int t : threads) {
        double v = -1;
        for (const json& c : r["cells"])
          if (c["op"] == op && c["nodes"] == n && c["threads"] == t) v = c["mib_s"].get<double>();
        std::snprintf(line, sizeof(line), " %10.1f", v);
        out += v < 0 ? std::string(11, ' ') : std::string(line);
      }
      out += "\n";
    }
    out += "\n";
  }
  return out;
}

std::string iobench_svg(const json& r) {
  std::vector<int> nodes = r["nodes"].get<std::vector<int>>(),
                   threads = r["threads"].get<std::vector<int>>();
  const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                           "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  double top = 1;
  for (const json& c : r["cells"]) top = std::max(top, c["mib_s"].get<double>() * 1.1);
  const int w = 640, h = 300, left = 60, bottom = 40, pad = 20;
  std::string svg;
  int charts = 0;
  for (const char* op : {"read", "write"}) {
    bool any = false;
    for (const json& c : r["cells"]) any = any || c["op"] == op;
    if (!any) continue;
    int y0 = charts++ * h;
    auto X = [&](size_t i) {
      return left + (nodes.size() > 1 ? double(i) * (w - left - pad) / double(nodes.size() - 1)
                                      : (w - left - pad) / 2.0);
    };
    auto Y = [&](double v) { return y0 + pad + (h - pad - bottom) * (1 - v / top); };
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "<text x=\"%d\" y=\"%d\" font-size=\"13\">%s MiB/s by nodes</text>\n", left,
                  y0 + 14, op);
    svg += buf;
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>\n", left,
                  Y(0), w - pad, Y(0));
    svg += buf;
    for (int k = 0; k <= 4; ++k) {
      std::snprintf(buf, sizeof(buf),
                    "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%.0f</text>\n",
                    left - 4, Y(top * k / 4) + 3, top * k / 4);
      svg += buf;
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      std::snprintf(
          buf, sizeof(buf),
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%d</text>\n", X(i),
          Y(0) + 14, nodes[i]);
      svg += buf;
    }
    for (size_t k = 0; k < threads.size(); ++k) {
      std::string pts;
      for (size_t i = 0; i < nodes.size(); ++i)
        for (const json& c : r["cells"])
          if (c["op"] == op && c["nodes"] == nodes[i] && c["threads"] == threads[k]) {
            std::snprintf(buf, sizeof(buf), "%.1f,%.1f ", X(i), Y(c["mib_s"].get<double>()));
            pts += buf;
          }
      const char* col = colours[k % 8];
      svg +=
          "<polyline fill=\"none\" stroke=\"" + std::string(col) + "\" points=\"" + pts + "\"/>\n";
      std::snprintf(buf, sizeof(buf),
                    "<text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"%s\">%d thread(s)</text>\n",
                    w - 110, y0 + pad + 12 * int(k + 1), col, threads[k]);
      svg += buf;
    }
  }
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" +
         std::to_string(std::max(1, charts) * h) + "\">\n" + svg + "</svg>\n";
}

}  // namespace pfsnet
