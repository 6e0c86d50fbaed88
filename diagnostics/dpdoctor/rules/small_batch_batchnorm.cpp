// BatchNorm statistics over a handful of samples per device: noisy normalisation.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> small_batch_batchnorm(const Evidence& e) {
  if (!e.batchnorm) return std::nullopt;
  // The samples one BatchNorm normalises over, as the run split them.
  int64_t per = e.batch_per_device;
  std::string where = "per device";
  if (e.mode == ParallelMode::ddp && e.sync_bn) {
    per = e.batch_per_device * static_cast<int64_t>(std::max<size_t>(1, e.ranks.size()));
    where = "across all ranks (SyncBatchNorm)";
  } else if (e.has_dp && !e.chunks.empty()) {
    per = *std::min_element(e.chunks.begin(), e.chunks.end());
    where = "in the smallest DataParallel chunk";
  } else if (e.has_pipeline && !e.micro_sizes.empty()) {
    per = *std::min_element(e.micro_sizes.begin(), e.micro_sizes.end());
    where = "per micro-batch";
  } else if (e.mode == ParallelMode::ddp) {
    where = "per rank";
  }
  if (per <= 0 || per > 8) return std::nullopt;
  Finding f;
  f.severity = Severity::warning;
  f.title = fmt::format("BatchNorm normalises over {} sample(s) {}", per, where);
  f.evidence = {{"samples_per_normalisation", per}, {"mode", parallel_mode_name(e.mode)}, {"sync_bn", e.sync_bn}, {"model", e.model}};
  f.explanation = fmt::format(
      "Each BatchNorm layer computes its mean and variance from the {} sample(s) it sees {}; with so few, the "
      "statistics are noisy, training becomes unstable and accuracy drops, and the running statistics used at "
      "evaluation differ from those in training.",
      per, where);
  f.fix = e.mode == ParallelMode::ddp && e.sync_bn
              ? "raise the per-rank batch: SyncBatchNorm already normalises over every rank's samples"
          : e.mode == ParallelMode::ddp
              ? "convert to SyncBatchNorm (torch.nn.SyncBatchNorm.convert_sync_batchnorm; in dpbench --sync-bn) so the "
                "statistics span all ranks, or raise the per-rank batch to 16 or more"
          : e.mode == ParallelMode::pipeline ? "use fewer, larger micro-batches (16+ samples each), or GroupNorm"
                           : "raise the batch per device to 16 or more, use DistributedDataParallel with "
                             "SyncBatchNorm, or GroupNorm";
  return f;
}

}  // namespace dpb::doctor::check
