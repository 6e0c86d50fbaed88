#pragma once
// One function per rule (one file each); doctor.cpp lists them with their ids.
#include <optional>

#include "diagnostics/dpdoctor/evidence.h"
#include "reports/findings.h"

namespace dpb::doctor::check {

using reports::Finding;
using reports::Severity;

std::optional<Finding> batch_smaller_than_devices(const Evidence& e);
std::optional<Finding> uneven_scatter(const Evidence& e);
std::optional<Finding> forward_bypasses_scatter(const Evidence& e);
std::optional<Finding> non_tensor_input_replicated(const Evidence& e);
std::optional<Finding> fewer_devices_than_requested(const Evidence& e);
std::optional<Finding> ranks_share_device(const Evidence& e);
std::optional<Finding> missing_distributed_sampler(const Evidence& e);
std::optional<Finding> input_bound(const Evidence& e);
std::optional<Finding> primary_device_hotspot(const Evidence& e);
std::optional<Finding> naive_model_parallel(const Evidence& e);
std::optional<Finding> unbalanced_pipeline(const Evidence& e);
std::optional<Finding> communication_bound(const Evidence& e);
std::optional<Finding> straggler_rank(const Evidence& e);
std::optional<Finding> lr_not_scaled(const Evidence& e);
std::optional<Finding> small_batch_batchnorm(const Evidence& e);

// Shared by the rules.
nlohmann::json device_table(const Evidence& e);  // [{id, busy, samples}]
double mean_busy_except_first(const Evidence& e);

// The ddp rank that computes longest, against the others' median. `significant`: twice
// the others' compute and a quarter of the step or more, beyond the jitter of ranks that
// share a small machine. straggler-rank fires on it; communication-bound then stands
// aside, since the others' exposed wait is for that rank, not for the network.
struct SlowestRank {
  int rank = 0;
  double compute_s = 0, typical_compute_s = 0;
  bool significant = false;
};
std::optional<SlowestRank> slowest_rank(const Evidence& e);

}  // namespace dpb::doctor::check
