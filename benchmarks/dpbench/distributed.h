#pragma once
// Runs that span ranks: starting them (the local launcher, like torchrun
// --nproc-per-node) or being one of them (started by our launcher, torchrun, srun or
// mpirun), and the collective benchmark on top.
#include <string>
#include <vector>

#include "benchmarks/dpbench/harness.h"
#include "engine/core/env.h"

namespace dpb::bench {

// Where this process stands: the rank environment from flags or the launcher's
// variables (source "none" when neither says anything).
RankEnv rank_env(const BenchOptions& o);

// Whether this process should start the ranks itself: nothing launched it and the run
// needs more than one rank on this node (or spans nodes).
bool should_launch(const BenchOptions& o, const RankEnv& env);

// Starts o.gpus ranks of this same command on this node; returns the exit code (and
// says which rank died and how on stderr).
int launch_ranks(const BenchOptions& o, const std::vector<std::string>& argv);

// --bench=collectives as one rank (or as the only process): returns the exit code.
int run_collectives_rank(const BenchOptions& o, const std::vector<std::string>& argv);

}  // namespace dpb::bench
