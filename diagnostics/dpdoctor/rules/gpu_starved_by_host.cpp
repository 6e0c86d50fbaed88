// The GPU idles because the host does not launch work fast enough: between launches the
// host runs framework and Python work (dispatch, autograd, the optimizer's loop over
// parameters) that takes longer than the kernels it launches. The gaps' attribution says
// so: short gaps (under 10 ms) that end when the host issues the next work, with the
// launching thread in ops or unrecorded Python meanwhile, not loading data, allocating
// or blocked on the device.
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> gpu_starved_by_host(const Evidence& e) {
  using trace::IdleCause;
  const auto [t, share] = worst(e, [](const TimelineEvidence& x) {
    return x.launches_known ? x.share(IdleCause::launch_overhead) : 0.0;
  });
  // Advice from 1% of the window, a warning from 15%: the budget charges the time to the
  // launch gaps either way.
  if (!t || share < 0.01) return std::nullopt;
  const auto& c = t->idle;
  const double idle = t->breakdown.idle_share.value_or(0);
  const double small = c.idle_ns > 0 ? static_cast<double>(c.small_gap_ns) / static_cast<double>(c.idle_ns) : 0.0;
  Finding f;
  f.severity = share >= 0.15 ? Severity::warning : Severity::info;
  f.title = fmt::format("{} is launch-bound: it idles {:.0f}% of the window between launches while its host runs "
                        "framework and Python work ({:.0f}% of its idle time is in gaps under 10 ms)",
                        t->who(), 100 * share, 100 * small);
  f.evidence = {{"device", t->who()},
                {"idle_share", figure(idle)},
                {"launch_overhead_share", figure(share)},
                {"optimizer_share", figure(t->share(c.optimizer_ns))},
                {"small_gaps_share_of_idle", figure(small)},
                {"median_launch_delay_s", figure(t->launches.median_launch_delay_s)},
                {"kernels_per_step", figure(t->launches.kernels_per_step)},
                {"short_kernel_share", figure(t->launches.short_kernel_share)},
                {"median_kernel_s", figure(t->launches.median_kernel_s)},
                {"step_time_s", figure(t->step_s)},
                {"profiler_start_s", figure(c.lead_in_ns * 1e-9)},
                {"time_source", trace::timeline_source_name(e.timeline_source)}};
  const double median_kernel = t->launches.median_kernel_s.value_or(0);
  f.explanation = fmt::format(
      "The device finishes its work before the host has issued the next: {} kernels{} of {} median{}. Between "
      "launches the host runs dispatch, autograd and Python{}; the GPU then runs at the speed of that overhead, not "
      "at its own.{}",
      t->launches.kernels_per_step ? fmt::format("{:.0f}", *t->launches.kernels_per_step) : "its",
      t->launches.kernels_per_step ? " a step" : "", duration_text(median_kernel),
      t->launches.short_kernel_share
          ? fmt::format(", {:.0f}% of them shorter than the call that launched them", 100 * *t->launches.short_kernel_share)
          : "",
      c.optimizer_ns > 0 ? fmt::format(" (the optimizer's step {:.0f}% of the window)", 100 * t->share(c.optimizer_ns))
                         : "",
      c.lead_in_ns > 0 ? fmt::format(" Outside the window, the profiled steps began {} before the first kernel (the "
                                     "profiler starting).",
                                     duration_text(c.lead_in_ns * 1e-9))
                       : "");
  f.fix = "give each kernel more work (a larger batch per step), launch the step as one graph (CUDA graphs: "
          "torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs; dpbench --cuda-graph), fuse small ops "
          "(torch.compile), use the fused or foreach optimizer (torch.optim.AdamW(fused=True)), and remove host syncs "
          "from the step";
  for (const auto& x : e.timelines)
    if (x.launches_known) f.explains.push_back(claim(x, x.share(IdleCause::launch_overhead)));
  return f;
}

}  // namespace dpb::doctor::check
