#pragma once
// One function per rule (one file each); doctor.cpp lists them with their ids.
#include <optional>
#include <vector>

#include "diagnostics/dpdoctor/evidence.h"
#include "reports/findings.h"

namespace dpb::doctor::check {

using reports::Finding;
using reports::Severity;

std::optional<Finding> batch_smaller_than_devices(const Evidence& e);
std::optional<Finding> uneven_scatter(const Evidence& e);
std::optional<Finding> forward_bypasses_scatter(const Evidence& e);
std::optional<Finding> non_tensor_input_replicated(const Evidence& e);
std::optional<Finding> dataparallel_idle_gpus(const Evidence& e);
std::optional<Finding> fewer_devices_than_requested(const Evidence& e);
std::optional<Finding> ranks_share_device(const Evidence& e);
std::optional<Finding> missing_distributed_sampler(const Evidence& e);
std::optional<Finding> input_bound(const Evidence& e);
std::optional<Finding> gpu_starved_by_host(const Evidence& e);
std::optional<Finding> host_sync_stalls(const Evidence& e);
std::optional<Finding> pageable_copies(const Evidence& e);
std::optional<Finding> primary_device_hotspot(const Evidence& e);
std::optional<Finding> naive_model_parallel(const Evidence& e);
std::optional<Finding> unbalanced_pipeline(const Evidence& e);
std::optional<Finding> pipeline_bubble(const Evidence& e);
std::optional<Finding> exposed_communication(const Evidence& e);
std::optional<Finding> straggler_rank(const Evidence& e);
std::optional<Finding> lr_not_scaled(const Evidence& e);
std::optional<Finding> small_batch_batchnorm(const Evidence& e);
// Runs last: a device idle a quarter of its window or more, and no finding so far that
// is a warning or an error to explain it.
std::optional<Finding> unexplained_idle(const Evidence& e, const std::vector<Finding>& others);

// Shared by the rules.
nlohmann::json device_table(const Evidence& e);  // [{id, busy, samples}]
double mean_busy_except_first(const Evidence& e);
nlohmann::json breakdown_table(const Evidence& e);  // [{rank, device, idle, compute, comm, memory}]
// A figure, or null when it was not measured.
nlohmann::json figure(const std::optional<double>& v);

// The ddp rank that holds the others back, of either kind:
//   slow device  its device computes longer per step than the others' median;
//   host side    its device computes as long, but idles longer waiting for its host.
// `significant`: 15% beyond the others' median and 10% of the step or more, beyond the
// jitter of ranks that share a small machine; then straggler-rank fires on it, and
// exposed-communication stands aside (the others' wait is for that rank, not the network).
struct SlowestRank {
  enum Kind { slow_device, host_side } kind = slow_device;
  int rank = 0;
  double seconds = 0, typical_s = 0;  // its compute (or host wait) per step, the others' median
  bool significant = false;
};
std::optional<SlowestRank> slowest_rank(const Evidence& e);

}  // namespace dpb::doctor::check
