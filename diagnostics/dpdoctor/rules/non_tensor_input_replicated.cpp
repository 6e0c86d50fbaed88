// dp given the batch as a list of samples rather than one tensor: DataParallel cannot
// split it and hands every device the whole batch.
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> non_tensor_input_replicated(const Evidence& e) {
  // No scatter counted (the input was not split) yet every device ran samples: each got
  // the whole batch.
  if (!e.has_dp || !e.samples_known || e.world < 2 || e.steps == 0 || e.device.size() < 2) return std::nullopt;
  const int64_t whole = e.steps * e.global_batch;
  for (const auto& d : e.device)
    if (d.samples != whole) return std::nullopt;
  Finding f;
  f.severity = Severity::error;
  f.title = fmt::format("every device ran the whole batch: the input was replicated {} times, not scattered", e.world);
  f.evidence = {{"batch", e.global_batch},
                {"steps", e.steps},
                {"samples_expected_per_device", whole / e.world},
                {"per_device", device_table(e)}};
  f.explanation = fmt::format(
      "Each of the {} devices processed all {} samples of each step instead of 1/{} of them: DataParallel scatters "
      "tensors, but an input it cannot split (a list of samples, a dict of non-tensors) is copied whole to every "
      "replica, so the devices redo the same work and the gathered output holds every sample {} times.",
      e.world, e.global_batch, e.world, e.world);
  f.fix = "stack the samples into one tensor (torch.stack / a default collate) before calling the wrapper (in dpbench "
          "--dp-input=tensor)";
  // Every device's per-sample work falls to its 1/N of the batch.
  const double n = static_cast<double>(e.world);
  f.predicted = scaled_step(e, 1 / n,
                            "work split: every device's per-sample work (its forward and backward, its input's copy, "
                            "its part of the gathered output) falls to 1/N; the module's replication each step stays, "
                            "so the gain is at most this",
                            {{"devices", e.world}});
  return f;
}

}  // namespace dpb::doctor::check
