#pragma once
// One measured training run: sets the run up, trains (warm-up excluded from the
// measurements), turns what it recorded into the report model (metrics.h), prints the
// summary on stdout, diagnoses it with --doctor and writes the report and the trace.
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/dpbench/options.h"
#include "benchmarks/dpbench/setup.h"
#include "reports/model.h"

namespace dpb::bench {

// Returns the report (already written when --json is set). With `rank`, this process is
// one DDP rank: every rank trains, rank 0 gathers the others' metrics, prints and writes
// the report (the others return nullopt).
std::optional<reports::RunReport> run_benchmark(const BenchOptions& o, const std::vector<std::string>& argv,
                                                std::ostream& out, const RankContext* rank = nullptr);

}  // namespace dpb::bench
