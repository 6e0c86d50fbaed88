// Never "healthy" while a device idles a quarter of its window: when no other rule
// explains the idle time, say so, with the breakdown that the next person will need.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> unexplained_idle(const Evidence& e, const std::vector<Finding>& others) {
  const DeviceEvidence* worst = nullptr;
  for (const auto& d : e.device)
    if (!worst || d.busy < worst->busy) worst = &d;
  if (!worst || 1.0 - worst->busy < 0.25) return std::nullopt;
  for (const auto& f : others)
    if (f.severity != Severity::info) return std::nullopt;  // explained (or at least blamed)
  Finding f;
  f.severity = Severity::warning;
  f.title = fmt::format("{} idles {:.0f}% of the window and no rule explains why", worst->id, 100 * (1 - worst->busy));
  f.evidence = {{"device", worst->id},
                {"idle_share", 1 - worst->busy},
                {"time_source", trace::timeline_source_name(e.timeline_source)},
                {"per_device", device_table(e)}};
  if (!e.breakdown.empty()) f.evidence["breakdown"] = breakdown_table(e);
  for (const auto& t : e.timelines)
    if (t.device == worst->id || fmt::format("rank {} ({})", t.rank.value_or(-1), t.device) == worst->id) {
      const auto& ib = t.breakdown.idle_breakdown;
      f.evidence["idle_breakdown"] = {{"host_wait", figure(ib.host_wait)},
                                      {"kernel_wait", figure(ib.kernel_wait)},
                                      {"other", figure(ib.other)}};
    }
  f.explanation =
      "The device did nothing for a large share of the measured window, and none of the known causes (waiting for "
      "the input, for the host to launch, for host syncs, for communication, for another rank, pipeline bubbles, "
      "DataParallel's primary) accounts for it. The idle breakdown says whether the gaps came after the host launched "
      "late (host wait), between queued kernels (kernel wait), or elsewhere (other: dependencies on events or other "
      "streams, other processes on the device).";
  f.fix = "open the trace at the idle gaps (dpbench --trace, or the PyTorch trace, in ui.perfetto.dev): what runs on "
          "the host and on the other streams while this device waits is the cause";
  return f;
}

}  // namespace dpb::doctor::check
