#pragma once
// dpbench --simulate: a profile and a link model in, the predicted sweep out (console
// table and a dpbench report whose sweep[] points carry predicted: true).
#include <ostream>
#include <string>
#include <vector>

#include "benchmarks/dpbench/options.h"

namespace dpb::bench {

int run_simulation(const BenchOptions& o, const std::vector<std::string>& argv, std::ostream& out);

}  // namespace dpb::bench
