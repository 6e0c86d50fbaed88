#pragma once
// Gathering what every DDP rank measured to every rank (so rank 0 can report it): as
// all-gathers over the run's own process group, bounded by its timeout like every
// collective.
#include <string>
#include <vector>

#include "benchmarks/dpbench/metrics.h"
#include "engine/comm/process_group.h"

namespace dpb::bench {

// Every rank's string, on every rank (two all-gathers: the lengths, then the bytes).
std::vector<std::string> gather_strings(comm::ProcessGroup& pg, const std::string& mine, Device device);
// Every rank's metrics, on every rank (one all-gather).
std::vector<RankMetrics> gather_metrics(comm::ProcessGroup& pg, const RankMetrics& mine, Device device);
// Where this process runs on `device`, read back from what it got.
RankPlacement describe_placement(Device device);
// Every rank's placement and the samples each of its measured steps read, on every rank.
std::vector<RankRecord> gather_rank_records(comm::ProcessGroup& pg, const std::vector<StepRecord>& measured,
                                            Device device);

}  // namespace dpb::bench
