// The dashboard pfsnetd serves at / (src/admin/dashboard/: the page, its script and style,
// and uPlot, which the build installs with `npm ci` from the pinned package-lock.json):
// embedded in the binary at build time, so the page loads nothing from anywhere but the
// daemon and works offline. Only pfsnetd links it (target pfsnet_dashboard); libpfsnet
// needs no npm.
// Thread safety: constant data.
#pragma once

#include <string_view>
#include <vector>

namespace pfsnet {

struct WebFile {
  std::string_view path;          // URL path: "/", "/ui/app.js", ...
  std::string_view content_type;  // with charset for text
  std::string_view body;
};

// Every file of the dashboard; "/" is the page.
const std::vector<WebFile>& dashboard_files();

}  // namespace pfsnet
