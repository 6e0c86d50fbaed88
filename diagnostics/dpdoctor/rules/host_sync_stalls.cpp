// The host blocks on the device inside the step (.item(), .cpu(), printing a tensor,
// torch.cuda.synchronize(), a blocking copy to pageable memory): the device drains while
// the host waits, then idles until the host has launched again. A sync costs that refill
// and only that: one that returns while the device still has queued work (NCCL kernels
// running, hundreds of ops in the queue) is not why the device idles, so the rule counts
// the idle time of gaps that began while the host was blocked, not the time it blocked.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> host_sync_stalls(const Evidence& e) {
  const auto [t, share] = worst(e, [](const TimelineEvidence& x) { return x.share(trace::IdleCause::host_sync); });
  // Below 10% of the window, advice: the budget charges the time to the syncs.
  if (!t || share < 0.01) return std::nullopt;
  const double steps = std::max(1, t->steps);
  nlohmann::json ops = nlohmann::json::array();
  std::string names;
  for (const auto& op : t->idle.sync_ops) {
    ops.push_back({{"op", op.name}, {"idle_after_s", figure(op.ns * 1e-9)}, {"gaps", op.count}});
    names += (names.empty() ? "" : ", ") + op.name;
  }
  Finding f;
  f.severity = share >= 0.10 ? Severity::warning : Severity::info;
  f.title = fmt::format("{} idles {:.0f}% of the window after its host blocked on it ({})", t->who(), 100 * share,
                        names.empty() ? "synchronize calls" : names);
  f.evidence = {{"device", t->who()},
                {"idle_after_syncs_share", figure(share)},
                {"blocked_share_of_steps", figure(t->syncs.share)},
                {"blocking_calls_per_step", t->syncs.calls / steps},
                {"idle_share", figure(t->breakdown.idle_share)},
                {"ops", ops},
                {"time_source", trace::timeline_source_name(e.timeline_source)}};
  f.explanation = fmt::format(
      "Each blocking call waits until the device has finished everything queued before it; the device then has "
      "nothing to do until the host has gone on and launched the next work. Gaps that began while the host was "
      "blocked so hold {:.0f}% of the window. The ops that blocked: {}.",
      100 * share, names.empty() ? "synchronize calls outside any op" : names);
  f.fix = "keep values on the device inside the step (accumulate the loss and metrics as tensors and read them every N "
          "steps), copy to pinned memory with non_blocking=True, and remove torch.cuda.synchronize() and prints of "
          "device tensors from the loop";
  for (const auto& x : e.timelines) f.explains.push_back(claim(x, x.share(trace::IdleCause::host_sync)));
  return f;
}

}  // namespace dpb::doctor::check
