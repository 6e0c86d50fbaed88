#pragma once
// What one optimizer step did: its loss, its timestamps and the wait for its batch, the
// samples each device ran, and what the parallel mode recorded (DDP's buckets, the
// pipeline's stage events). The harness turns these into metrics.
#include <cstdint>
#include <vector>

#include "engine/parallel/pipeline.h"
#include "engine/parallel/reducer.h"

namespace dpb {

// FSDP and tensor parallelism: one kind of collective over a step's batches: how many, the bytes of this
// rank's inputs, the time they ran (where the backend tells: `timed`) and the time the
// training thread waited for them.
struct CollectiveTotals {
  int64_t count = 0, bytes = 0, ran_ns = 0, waited_ns = 0;
  bool timed = true;
};

struct StepRecord {
  int64_t step = 0;       // global optimizer step (0-based)
  int64_t epoch = 0;
  uint64_t data_hash = 0;  // of the sorted dataset indices of the step's batches (which data it saw)
  bool warmup = false;
  double loss = 0;
  int64_t correct = 0;
  int64_t samples = 0;
  float lr = 0;
  int64_t data_ns = 0;    // how long the loop waited for this batch
  int64_t begin_ns = 0;   // step start (forward)
  int64_t end_ns = 0;     // step end (after the optimizer)
  std::vector<int64_t> device_samples;  // per device: samples it ran forward
  // DDP: the last backward's interval and what each gradient bucket did (steady-clock ns).
  int64_t backward_begin_ns = 0, backward_end_ns = 0;
  std::vector<BucketRecord> buckets;
  // FSDP: the step's all-gathers and reduce-scatters; tensor parallelism: its
  // all-reduces (the layers') and all-gathers (the loss's).
  CollectiveTotals all_gathers, reduce_scatters, all_reduces;
  // Model parallelism: what every stage did (bubble measured and in theory).
  PipelineStepRecord pipeline;
  double seconds() const { return static_cast<double>(end_ns - begin_ns) * 1e-9; }
};

}  // namespace dpb
