// dp whose wrapped module was called directly (dp.module(x) in PyTorch): no scatter ever
// happened and only the primary device computed.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> forward_bypasses_scatter(const Evidence& e) {
  if (!e.has_dp || !e.samples_known || e.world < 2 || e.scatter_calls != 0 || e.device.size() < 2)
    return std::nullopt;
  for (size_t d = 1; d < e.device.size(); ++d)
    if (e.device[d].samples > 0 || e.device[d].busy > 0.02) return std::nullopt;
  Finding f;
  f.severity = Severity::error;
  f.title = fmt::format("DataParallel's scatter never ran: {} did all the work, the other {} device(s) idled",
                        e.device[0].id, e.world - 1);
  f.evidence = {{"scatter_calls", e.scatter_calls}, {"steps", e.steps}, {"per_device", device_table(e)}};
  f.explanation =
      "Every step ran the model on the primary device only: the forward went to the wrapped module itself (as "
      "dp.module(x) or a custom forward that calls self.module does in PyTorch), so the batch was never scattered and "
      "the replicas were never used.";
  f.explains = claim_idle(e, [&](const std::string& id) { return id != e.device[0].id; });
  f.fix = "call the DataParallel wrapper (dp(x), in dpbench --dp-forward=scatter), not its .module";
  // The primary's busy time split over the devices.
  const double busy = e.device[0].busy, n = static_cast<double>(e.world);
  f.predicted = scaled_step(
      e, 1 - busy * (1 - 1 / n),
      "work split: the primary's busy share of the step spread evenly over the devices; DataParallel's own work each "
      "step (replicating the module, scattering the input, gathering the output), which the bypass skips, is not "
      "added, so on a small model the fix can cost more than it gives",
      {{"primary_busy", figure(busy)}, {"devices", e.world}});
  return f;
}

}  // namespace dpb::doctor::check
