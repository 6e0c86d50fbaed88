// BatchNorm statistics over a handful of samples per device: noisy normalisation. Only
// where the parallel split made the per-device batches small (a single device's batch is
// its user's choice), judged on a full step's split (not an epoch's partial last batch).
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> small_batch_batchnorm(const Evidence& e) {
  if (!e.batchnorm) return std::nullopt;
  // The samples one BatchNorm normalises over, as the run split them; measured where
  // the run counted them.
  int64_t per = 0;
  bool measured = false;
  std::string where;
  if (is_distributed(e.mode) && e.world >= 2) {
    double samples = 0;
    for (const auto& r : e.ranks) samples = samples == 0 ? r.samples_per_step : std::min(samples, r.samples_per_step);
    measured = samples > 0;
    per = measured ? static_cast<int64_t>(samples + 0.5) : e.batch_per_device;
    where = "per rank";
    if (e.sync_bn) {
      per *= static_cast<int64_t>(std::max<size_t>(1, e.ranks.size()));
      where = "across all ranks (SyncBatchNorm)";
    }
  } else if (e.has_dp && e.world >= 2 && !e.chunks.empty()) {
    per = *std::min_element(e.chunks.begin(), e.chunks.end());
    measured = true;
    where = "in the smallest DataParallel chunk";
  } else if (e.has_pipeline && e.micro_sizes.size() > 1) {
    per = *std::min_element(e.micro_sizes.begin(), e.micro_sizes.end());
    measured = true;
    where = "per micro-batch";
  } else {
    return std::nullopt;  // one device, or one whole batch per device: nothing the split did
  }
  if (per <= 0 || per > 8) return std::nullopt;
  Finding f;
  f.severity = measured ? Severity::warning : Severity::info;
  f.title = fmt::format("BatchNorm normalises over {} sample(s) {}{}", per, where,
                        measured ? "" : " (from the configuration)");
  f.evidence = {{"samples_per_normalisation", per},
                {"mode", parallel_mode_name(e.mode)},
                {"sync_bn", e.sync_bn},
                {"model", e.model},
                {"evidence", measured ? "measured split" : "configuration"}};
  f.explanation = fmt::format(
      "Each BatchNorm layer computes its mean and variance from the {} sample(s) it sees {}; with so few, the "
      "statistics are noisy, training becomes unstable and accuracy drops, and the running statistics used at "
      "evaluation differ from those in training.",
      per, where);
  f.fix = mode_info(e.mode).all_reduces_gradients && e.sync_bn
              ? "raise the per-rank batch: SyncBatchNorm already normalises over every rank's samples"
          : is_distributed(e.mode)
              ? "convert to SyncBatchNorm (torch.nn.SyncBatchNorm.convert_sync_batchnorm; in dpbench --sync-bn) so the "
                "statistics span all ranks, or raise the per-rank batch to 16 or more"
          : mode_info(e.mode).pipelines
              ? "use fewer, larger micro-batches (16+ samples each), or GroupNorm"
              : "raise the batch per device to 16 or more, use DistributedDataParallel with SyncBatchNorm, or GroupNorm";
  return f;
}

}  // namespace dpb::doctor::check
