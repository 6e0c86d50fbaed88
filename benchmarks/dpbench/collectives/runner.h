#pragma once
// The collectives harness: for each op and each size from min to max bytes (times a
// factor): warm-up iterations, then timed iterations (each waited for), time = the
// slowest rank's mean; algbw = bytes / time, busbw = algbw x the spec's bus factor.
// After timing every size runs once more on known values and is checked element by
// element; the wrong count is summed over the ranks. With --load each rank keeps a compute
// thread busy throughout, and each size reports the ranks' mean slowdown of that thread
// while its timed collectives ran against its rate alone just before.
#include <iosfwd>
#include <vector>

#include "benchmarks/dpbench/collectives/spec.h"
#include "reports/collectives_report.h"

namespace dpb::bench {

// Runs the sweep on every rank; rank 0 prints nccl-tests' table on `out` and returns the
// rows; other ranks return none.
std::vector<reports::CollectiveRow> run_collectives(comm::ProcessGroup& pg, Device device, const CollectiveOptions& o,
                                                     std::ostream& out);

}  // namespace dpb::bench
