// How an iobench result (storage/iobench.h, run_iobench) is shown: the GPFS paper's tables
// and an SVG chart.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pfsnet {

// The paper's table layout, one table per operation: a row per node count, a column per
// thread count, MiB/s in each cell.
std::string iobench_tables(const nlohmann::json& result);
// An SVG chart: MiB/s against nodes, a line per thread count, per operation.
std::string iobench_svg(const nlohmann::json& result);

}  // namespace pfsnet
