#pragma once
// One function per rule (one file each); doctor.cpp lists them with their ids.
//
// A rule that explains lost time says which: its finding's `explains` holds, per rank or
// device, the share of the window it accounts for. Causes are disjoint (the trace
// analysis charges each idle gap to one cause, communication is split into waiting for a
// late rank and the rest), so findings add up, and one finding silences another only by
// explaining the same time. A rule that sees its cause but below its warning threshold
// may still say so as info: the budget then shows where small losses went.
#include <optional>
#include <string>
#include <vector>

#include "diagnostics/dpdoctor/evidence.h"
#include "reports/findings.h"

namespace dpb::doctor::check {

using reports::Claim;
using reports::Finding;
using reports::Prediction;
using reports::Severity;

std::optional<Finding> batch_smaller_than_devices(const Evidence& e);
std::optional<Finding> uneven_scatter(const Evidence& e);
std::optional<Finding> forward_bypasses_scatter(const Evidence& e);
std::optional<Finding> non_tensor_input_replicated(const Evidence& e);
std::optional<Finding> dataparallel_idle_gpus(const Evidence& e);
std::optional<Finding> fewer_devices_than_requested(const Evidence& e);
std::optional<Finding> ranks_share_device(const Evidence& e);
std::optional<Finding> missing_distributed_sampler(const Evidence& e);
std::optional<Finding> cold_start(const Evidence& e);
std::optional<Finding> long_host_gaps(const Evidence& e);
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
std::optional<Finding> exposed_allgather(const Evidence& e);
std::optional<Finding> fsdp_unit_too_large(const Evidence& e);
std::optional<Finding> tp_across_slow_link(const Evidence& e);
std::optional<Finding> small_batch_batchnorm(const Evidence& e);
std::optional<Finding> scaling_efficiency(const Evidence& e);
// Runs last, over the budget the other findings leave: a device idle a quarter of its
// window or more that no warning explains, or a sweep whose efficiency is lost without
// a warning that says where.
std::optional<Finding> unexplained_idle(const Evidence& e, const std::vector<Finding>& others,
                                        const std::vector<reports::RankBudget>& budget);

// Shared by the rules.
nlohmann::json device_table(const Evidence& e);  // [{id, busy, samples}]
double mean_busy_except_first(const Evidence& e);
nlohmann::json breakdown_table(const Evidence& e);  // [{rank, device, idle, compute, comm, memory}]
// A figure to 4 significant digits (14.0 us stays 1.4e-05), or null when it was not measured.
nlohmann::json figure(const std::optional<double>& v);
// The run's step scaled by `factor` as a fix's prediction (reports::Prediction), by a
// model of the fix that `method` states, with what it read; null with the reason where the
// run measured no step.
Prediction scaled_step(const Evidence& e, double factor, std::string method, nlohmann::json inputs);
// The same share of every rank's (or device's) window: a cause that holds all of them
// alike (the loop waiting for data, for instance).
std::vector<Claim> claim_all(const Evidence& e, double share);
Claim claim(const TimelineEvidence& t, double share);
// Each rank's (device's) whole idle share, for the devices `which` selects (by id): what a
// structural cause (a pipeline schedule, DataParallel's idle replicas) accounts for.
template <typename F>
std::vector<Claim> claim_idle(const Evidence& e, F which) {
  std::vector<Claim> out;
  for (const auto& b : e.breakdown)
    if (which(b.device)) out.push_back({b.rank, b.device, b.idle_share.value_or(0)});
  return out;
}
// The timeline with the largest value of `f`, and that value (nullptr, 0 without timelines).
template <typename F>
std::pair<const TimelineEvidence*, double> worst(const Evidence& e, F f) {
  const TimelineEvidence* w = nullptr;
  double most = 0;
  for (const auto& t : e.timelines) {
    const double v = f(t);
    if (!w || v > most) {
      w = &t;
      most = v;
    }
  }
  return {w, most};
}
// Milliseconds, for titles: "7.62 ms", "14.0 us".
std::string duration_text(double seconds);
// Evidence tables of a trace's idle attribution: calls with their time in the gaps, and
// the longest gaps (offset from the window's start, length, cause, what the host did).
nlohmann::json calls_table(const std::vector<trace::NamedTime>& calls);
nlohmann::json gaps_table(const TimelineEvidence& t, bool cold);
// The host ops an idle cause was charged to ([{op, idle_s, gaps}]), and the first `most`
// of them as text ("aten::randn 41.0 ms, aten::normal_ 3.2 ms").
nlohmann::json ops_table(const std::vector<trace::NamedTime>& ops);
std::string ops_text(const std::vector<trace::NamedTime>& ops, size_t most = 3);

// The ddp rank that holds the others back, of either kind:
//   slow device  its device computes longer per step than the others' median;
//   host side    its device computes as long, but idles longer waiting for its host.
// `significant`: 15% beyond the others' median and 10% of the step or more, beyond the
// jitter of ranks that share a small machine; then straggler-rank fires on it.
struct SlowestRank {
  enum Kind { slow_device, host_side } kind = slow_device;
  int rank = 0;
  double seconds = 0, typical_s = 0;  // its compute (or host wait) per step, the others' median
  bool significant = false;
};
std::optional<SlowestRank> slowest_rank(const Evidence& e);
// DataParallel: the device whose replica computes longest (`rank`: its place in
// e.device), by the same test; the primary and the other replicas wait for it at the
// gather and the gradient sum.
std::optional<SlowestRank> slowest_replica(const Evidence& e);

// Ranks that reach the collectives late (profiler traces whose ranks' clocks agree): the
// others' communication kernels wait for them. `significant` when some rank waits 10% of
// its window or more; straggler-rank then names the late ranks and claims the waiting,
// and exposed-communication claims only the rest.
struct LateArrivals {
  double worst_wait_share = 0;  // the largest share of a window spent waiting
  bool significant = false;
};
std::optional<LateArrivals> late_arrivals(const Evidence& e);

}  // namespace dpb::doctor::check
