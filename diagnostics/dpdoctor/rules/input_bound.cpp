// The training loop waits for batches: the input pipeline, not the devices, sets the pace.
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> input_bound(const Evidence& e) {
  if (e.data_wait_share < 0.3) return std::nullopt;
  Finding f;
  f.severity = Severity::warning;
  const double wait_per_step = e.step_s > 0 ? e.data_wait_share / (1 - e.data_wait_share) * e.step_s : 0;
  f.title = fmt::format("the training loop waited for data {:.0f}% of the time", 100 * e.data_wait_share);
  f.evidence = {{"data_wait_share", e.data_wait_share},
                {"step_time_s", e.step_s},
                {"wait_per_step_s", wait_per_step},
                {"per_device", device_table(e)}};
  f.explanation = fmt::format(
      "Between steps the devices idled about {:.1f} ms waiting for the next batch, against {:.1f} ms of step: "
      "loading and augmenting runs behind the compute, so faster devices or more of them would not help.",
      wait_per_step * 1e3, e.step_s * 1e3);
  f.fix = "load ahead in parallel (DataLoader num_workers > 0 with prefetch, pin_memory; in dpbench --workers=N), cache "
          "decoded data, or move augmentation to the device";
  return f;
}

}  // namespace dpb::doctor::check
