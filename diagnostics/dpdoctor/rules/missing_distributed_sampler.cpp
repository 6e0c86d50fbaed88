// ddp (or fsdp) ranks that all read the same samples (no DistributedSampler): N times the
// compute for one rank's worth of data. Tensor-parallel ranks read the same batch by design.
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> missing_distributed_sampler(const Evidence& e) {
  if (e.ranks.size() < 2 || e.data_compared == 0 || !mode_info(e.mode).splits_batch) return std::nullopt;
  const double share = static_cast<double>(e.data_identical) / static_cast<double>(e.data_compared);
  if (share < 0.9) return std::nullopt;
  Finding f;
  f.severity = Severity::error;
  f.title = fmt::format("all {} ranks trained on the same samples in {} of {} measured steps", e.ranks.size(),
                        e.data_identical, e.data_compared);
  f.evidence = {{"ranks", e.ranks.size()}, {"identical_steps", e.data_identical}, {"compared_steps", e.data_compared}};
  f.explanation = fmt::format(
      "Each rank's batch held exactly the same dataset indices as every other rank's: the data loader was not sharded, "
      "so the {} ranks compute identical gradients and the job learns from 1/{} of the samples it pays for (an epoch "
      "is {} times longer than it needs to be).",
      e.ranks.size(), e.ranks.size(), e.ranks.size());
  f.fix = "use DistributedSampler(dataset, num_replicas=world_size, rank=rank) and call set_epoch each epoch (in "
          "dpbench --sampler=distributed)";
  return f;
}

}  // namespace dpb::doctor::check
