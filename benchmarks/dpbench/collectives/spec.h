#pragma once
// dpbench --bench=collectives, as nccl-tests: a harness (runner.cpp) and one small file
// per collective that plugs in through a spec. A spec says how to make the buffers for a
// size (nccl-tests' size column: all-gather the gathered output, reduce-scatter the
// scattered input, the others the buffer), how to issue the collective, how to check
// its result on known values, and its bus factor (busbw = algbw x F).
#include <memory>
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
  // Each rank keeps one compute thread busy while its collectives run, as DDP's backward
  // does, and measures how much the collectives slow that thread (--load).
  bool load = false;
  // --isolated N: per size, N collectives more, each timed alone after a pause with the
  // link idle (a DDP step's first bucket after compute); their median is the row's
  // isolated_us. 0: none.
  int isolated = 0;
  int64_t isolated_pause_us = 200;  // --isolated-pause-us
  // Fault injection: this rank kills itself (SIGKILL) after `kill_after` collectives,
  // to see what the others report (-1: nobody).
  int kill_rank = -1;
  int64_t kill_after = 0;
};

// One collective's buffers on one rank, filled with the known pattern.
struct CollectiveBuffers {
  Tensor in, out;
  int64_t in_count = 0, out_count = 0;  // per rank
  int64_t bytes = 0;                    // nccl-tests' size column
};

struct CollectiveSpec {
  const char* name;
  CollectiveBuffers (*make)(int64_t bytes, int rank, int ranks, Device device);
  std::shared_ptr<comm::Work> (*issue)(comm::ProcessGroup& pg, CollectiveBuffers& b);
  // Elements of this rank's result that differ from what the collective must produce.
  int64_t (*count_wrong)(const CollectiveBuffers& b, int rank, int ranks);
  double (*bus_factor)(int ranks);
};

const CollectiveSpec& allreduce_spec();
const CollectiveSpec& allgather_spec();
const CollectiveSpec& reduce_scatter_spec();
const CollectiveSpec& broadcast_spec();

// Every collective, in the order --ops lists them; the one named (a dpb::Error listing
// them otherwise).
const std::vector<const CollectiveSpec*>& collective_specs();
const CollectiveSpec& collective_spec(const std::string& name);

// The known values (shared by the specs): rank r's element i, exact in f32 and in sums
// over ranks.
float collective_pattern(int rank, int64_t i);
Tensor collective_filled(int rank, int64_t n, Device device);
// The buffers of an in-place collective (all-reduce, broadcast): one of `bytes`.
CollectiveBuffers in_place_buffers(int64_t bytes, int rank, int ranks, Device device);

}  // namespace dpb::bench
