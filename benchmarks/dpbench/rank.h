#pragma once
// This process as one rank of a multi-process run (started by our launcher, torchrun,
// srun or mpirun): who it is, which device it takes, the rendezvous and the process
// group, then the DDP benchmark (or --verify) or the collective benchmark as that rank.
#include <string>
#include <vector>

#include "benchmarks/dpbench/options.h"
#include "engine/core/env.h"

namespace dpb::bench {

// Where this process stands: the rank environment from flags or the launcher's
// variables (source "none" when neither says anything).
RankEnv rank_env(const BenchOptions& o);

// --mode=ddp as one rank: the training benchmark with this rank's process group; rank 0
// prints and writes the report. Returns the exit code.
int run_ddp_rank(const BenchOptions& o, const std::vector<std::string>& argv);

// --bench=collectives as one rank (or as the only process): returns the exit code.
int run_collectives_rank(const BenchOptions& o, const std::vector<std::string>& argv);

}  // namespace dpb::bench
