#pragma once
// --verify: trains --verify-steps in --mode and in single mode from the same initial
// weights on the same batches and compares the parameters (docs/ARCHITECTURE.md §3's equivalence).
#include <iosfwd>
#include <string>

#include "benchmarks/dpbench/options.h"
#include "benchmarks/dpbench/setup.h"

namespace dpb::bench {

struct VerifyResult {
  // Per parameter ||theta_mode - theta_single|| / ||theta_single - theta_initial|| (L2):
  // the largest, which parameter, and the same over the whole model.
  double max_rel_diff = 0, model_rel_diff = 0;
  std::string worst_parameter;
  double max_abs_diff = 0;  // largest element difference
  // Over the tolerance only: the largest difference float rounding alone makes (the
  // reference again with each batch in two halves), relative as above; -1 when not measured.
  double noise_floor = -1;
  bool passed = false;
};

// With `rank` (DDP), every rank trains its shard; rank 0 also trains one device on the
// ranks' global batch, compares and reports (other ranks return passed).
VerifyResult run_verify(const BenchOptions& o, std::ostream& out, const RankContext* rank = nullptr);

}  // namespace dpb::bench
