#pragma once
// What this dpbench process runs, once its options are parsed: a sweep of child runs
// (--gpus=1,2,4, --repeat), the local launcher that starts the ranks of a multi-process
// run on this node (like torchrun --nproc-per-node), one rank of such a run, or a
// single-process benchmark (or --verify).
#include <string>
#include <vector>

#include "benchmarks/dpbench/options.h"
#include "engine/core/env.h"

namespace dpb::bench {

// Runs what the options ask for; returns the process exit code.
int run(BenchOptions o, const std::vector<std::string>& argv);

// Whether this process should start the ranks itself: nothing launched it and the run
// needs more than one rank on this node (or spans nodes).
bool should_launch(const BenchOptions& o, const RankEnv& env);

// Starts o.device.count ranks of this same command on this node; returns the exit code
// (and says which rank died and how on stderr).
int launch_ranks(const BenchOptions& o, const std::vector<std::string>& argv);

}  // namespace dpb::bench
