// The GPU idles because the host does not launch work fast enough: kernels shorter than
// the time it takes to launch them, or host-side work between launches. The idle
// breakdown says so: the next kernel's launch began only after the previous one ended.
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> gpu_starved_by_host(const Evidence& e) {
  const TimelineEvidence* worst = nullptr;
  for (const auto& t : e.timelines) {
    if (!t.launches_known || !t.breakdown.idle_share || !t.breakdown.idle_breakdown.host_wait) continue;
    if (*t.breakdown.idle_share < 0.2 || *t.breakdown.idle_breakdown.host_wait < 0.5) continue;
    if (!worst || *t.breakdown.idle_share > *worst->breakdown.idle_share) worst = &t;
  }
  if (!worst) return std::nullopt;
  const auto& t = *worst;
  const double idle = *t.breakdown.idle_share, host = *t.breakdown.idle_breakdown.host_wait;
  const std::string who = t.rank ? fmt::format("rank {} ({})", *t.rank, t.device) : t.device;
  Finding f;
  f.severity = Severity::warning;
  f.title = fmt::format("{} is starved by its host: idle {:.0f}% of the window, {:.0f}% of that waiting for the next "
                        "kernel to be launched",
                        who, 100 * idle, 100 * host);
  f.evidence = {{"device", who},
                {"idle_share", idle},
                {"host_wait_share_of_idle", host},
                {"median_launch_delay_s", figure(t.launches.median_launch_delay_s)},
                {"kernels_per_step", figure(t.launches.kernels_per_step)},
                {"short_kernel_share", figure(t.launches.short_kernel_share)},
                {"median_kernel_s", figure(t.launches.median_kernel_s)},
                {"step_time_s", figure(t.step_s)},
                {"time_source", trace::timeline_source_name(e.timeline_source)}};
  f.explanation = fmt::format(
      "The device finishes each kernel before the host has launched the next one: {} kernels a step of {} median, "
      "{} of them shorter than the call that launched them. The GPU then runs at the speed of the Python and launch "
      "overhead, not at its own.",
      t.launches.kernels_per_step ? fmt::format("{:.0f}", *t.launches.kernels_per_step) : "many",
      t.launches.median_kernel_s ? fmt::format("{:.1f} us", *t.launches.median_kernel_s * 1e6) : "short",
      t.launches.short_kernel_share ? fmt::format("{:.0f}%", 100 * *t.launches.short_kernel_share) : "many");
  f.fix = "give each kernel more work (a larger batch per step), launch the step as one graph (CUDA graphs: "
          "torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs; dpbench --cuda-graph), fuse small ops "
          "(torch.compile), remove host syncs from the step, and keep the input pipeline ahead (more DataLoader workers)";
  return f;
}

}  // namespace dpb::doctor::check
