#pragma once
// --gpus=1,2,4 and --repeat=R: one dpbench run per device count and repetition, each a
// child process with the sweep's command line that runs one point's typed options
// (sweep_run(), options.h) through the path a single run takes (so every mode, DDP's
// launched ranks included, runs exactly as it would alone), merged into one report with the scaling efficiency
//   E(N) = throughput(N) / (N * throughput(1))
// from the median throughput of the repetitions (weak scaling: dp and mp hand N x --batch
// to the wrapper at N devices, so every device keeps the same work; ddp keeps --batch per
// rank; mp's 1-device point is single-device training). Every point gets the same thread
// budget per device: --threads, else this node's cores over the largest count.
#include <string>
#include <vector>

#include "benchmarks/dpbench/options.h"

namespace dpb::bench {

// Runs the sweep; returns the exit code. `args` is the original command line.
int run_sweep(const BenchOptions& o, const std::vector<std::string>& args);

}  // namespace dpb::bench
