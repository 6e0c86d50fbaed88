// More devices asked for than exist: the run silently used fewer.
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> fewer_devices_than_requested(const Evidence& e) {
  if (is_distributed(e.mode) || e.requested <= e.world) return std::nullopt;
  Finding f;
  f.severity = Severity::error;
  f.title = fmt::format("{} devices were requested but only {} exist: the run used {}", e.requested, e.world, e.world);
  f.evidence = {{"requested", e.requested}, {"visible", e.visible}, {"used", e.world}, {"per_device", device_table(e)}};
  f.explanation =
      "The machine (or CUDA_VISIBLE_DEVICES, or --visible-devices) exposes fewer devices than the job asked for; "
      "torch.nn.DataParallel(model) spreads over the visible ones, so the job runs on fewer devices than planned and "
      "its throughput and batch per device are not what the configuration says.";
  f.fix = fmt::format("request --gpus={} (what exists), or make the other devices visible (CUDA_VISIBLE_DEVICES)",
                      e.world);
  return f;
}

}  // namespace dpb::doctor::check
