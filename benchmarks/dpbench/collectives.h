#pragma once
// dpbench --bench=collectives: nccl-tests' sweep over a process group. For each op and
// each size from min to max bytes (times a factor): warm-up iterations, then timed
// iterations (each waited for), time = the slowest rank's mean; algbw = bytes / time,
// busbw = algbw x F (F = 2(n-1)/n for all-reduce, (n-1)/n for all-gather and
// reduce-scatter, 1 for broadcast), with nccl-tests' sizes (all-gather: the gathered
// output, reduce-scatter: the scattered input). After timing every size is run once
// more on known values and checked element by element; the wrong count is summed over
// the ranks.
#include <nlohmann/json.hpp>

#include <iosfwd>
#include <string>
#include <vector>

#include "engine/comm/process_group.h"

namespace dpb::bench {

struct CollectiveOptions {
  std::vector<std::string> ops{"allreduce", "allgather", "reduce_scatter", "broadcast"};
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t factor = 2;
  int warmup = 5;
  int iters = 20;
  // Fault injection: this rank kills itself (SIGKILL) after `kill_after` collectives,
  // to see what the others report (-1: nobody).
  int kill_rank = -1;
  int64_t kill_after = 0;
};

const std::vector<std::string>& collective_names();
// busbw / algbw for `op` on `n` ranks.
double bus_factor(const std::string& op, int n);

// Runs the sweep on every rank; rank 0 prints the table on `out` and returns the rows
// ({op, bytes, count, time_us, algbw_gbps, busbw_gbps, wrong}); other ranks return [].
nlohmann::json run_collectives(comm::ProcessGroup& pg, Device device, const CollectiveOptions& o, std::ostream& out);

}  // namespace dpb::bench
