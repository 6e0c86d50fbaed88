// The host blocks on the device inside the step (.item(), .cpu(), printing a tensor,
// torch.cuda.synchronize(), a blocking copy to pageable memory), and the device then
// idles while the host catches up with launching the next work.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> host_sync_stalls(const Evidence& e) {
  const TimelineEvidence* worst = nullptr;
  for (const auto& t : e.timelines) {
    if (!t.syncs.share || *t.syncs.share < 0.1) continue;
    // Blocking while the device is busy costs nothing; it matters when the device then idles.
    if (!t.breakdown.idle_share || *t.breakdown.idle_share < 0.15) continue;
    if (!worst || *t.syncs.share > *worst->syncs.share) worst = &t;
  }
  if (!worst) return std::nullopt;
  const auto& t = *worst;
  const std::string who = t.rank ? fmt::format("rank {} ({})", *t.rank, t.device) : t.device;
  const double steps = std::max(1, t.steps);
  nlohmann::json ops = nlohmann::json::array();
  std::string names;
  for (const auto& op : t.syncs.top_ops) {
    ops.push_back({{"op", op.name}, {"blocked_per_step_s", op.seconds / steps}, {"calls_per_step", op.calls / steps}});
    names += (names.empty() ? "" : ", ") + op.name;
  }
  Finding f;
  f.severity = Severity::warning;
  f.title = fmt::format("the host of {} blocks on the device {:.0f}% of the step ({})", who, 100 * *t.syncs.share, names);
  f.evidence = {{"device", who},
                {"blocked_share", *t.syncs.share},
                {"blocked_per_step_s", figure(t.syncs.per_step_s)},
                {"blocking_calls_per_step", t.syncs.calls / steps},
                {"idle_share", figure(t.breakdown.idle_share)},
                {"top_ops", ops},
                {"time_source", trace::timeline_source_name(e.timeline_source)}};
  f.explanation = fmt::format(
      "Each blocking call waits until the device has finished everything queued before it; only then does the host "
      "go on launching, and the device idles until the next kernels arrive ({:.0f}% of the window idle). The ops "
      "that blocked most: {}.",
      100 * *t.breakdown.idle_share, names);
  f.fix = "keep values on the device inside the step (accumulate the loss and metrics as tensors and read them every N "
          "steps), copy to pinned memory with non_blocking=True, and remove torch.cuda.synchronize() and prints of "
          "device tensors from the loop";
  return f;
}

}  // namespace dpb::doctor::check
