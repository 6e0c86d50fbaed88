// Never "healthy" while a device idles a quarter of its window, or while a sweep loses
// 15% of its scaling efficiency, without a warning that says where the time went: when
// the other findings leave a large share of a device's window unexplained, say so, with
// the breakdown the next person will need.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> unexplained_idle(const Evidence& e, const std::vector<Finding>& others,
                                        const std::vector<reports::RankBudget>& budget) {
  const bool warned =
      std::any_of(others.begin(), others.end(), [](const Finding& f) { return f.severity != Severity::info; });
  // The row with the most unexplained time, and the one that lost the most.
  const reports::RankBudget* gap = nullptr;
  const reports::RankBudget* idlest = nullptr;
  auto lost = [](const reports::RankBudget& b) { return b.idle_share + b.exposed_comm_share; };
  for (const auto& b : budget) {
    if (!gap || b.unexplained_share > gap->unexplained_share) gap = &b;
    if (!idlest || lost(b) > lost(*idlest)) idlest = &b;
  }
  // The verdict follows the budget: more than 10 points of a window that no finding
  // explains is a problem; so is a quarter of a window lost
  // with no warning at all. A sweep's lost efficiency is named here only where its own
  // budget (the sweep row) leaves more than 10 points of it unexplained, or no warning
  // says where it went.
  // Beside other warnings, only where the idle time was charged to causes (device
  // timelines): on host timelines the idle time has no causes of its own, and the
  // warnings there stand for it; without any warning it is a problem everywhere.
  const bool attributed = std::any_of(e.timelines.begin(), e.timelines.end(),
                                      [](const TimelineEvidence& t) { return t.launches_known && t.idle.window_ns > 0; });
  const bool unexplained = gap && gap->unexplained_share > 0.10 && (attributed || !warned);
  const bool idle_unwarned = !warned && idlest && lost(*idlest) >= 0.25;
  // A sweep whose budget says where its efficiency went (scaling-efficiency) is explained
  // unless its parts leave more than 10 points they cannot account for.
  bool sweep_unexplained = true;
  if (e.sweep_budget)
    for (const auto& r : e.sweep_budget->ranks) sweep_unexplained = sweep_unexplained && std::abs(r.residual) > 0.10;
  const bool efficiency_lost = !warned && e.scaling_efficiency && *e.scaling_efficiency < 0.85 && sweep_unexplained;
  if (!unexplained && !idle_unwarned && !efficiency_lost) return std::nullopt;
  const reports::RankBudget* row = unexplained ? gap : idlest;
  const std::string who = row ? (row->rank ? fmt::format("rank {} ({})", *row->rank, row->device) : row->device) : "";
  Finding f;
  f.severity = Severity::warning;
  if (unexplained || idle_unwarned)
    f.title = fmt::format("{} loses {:.0f}% of the window and no finding explains {:.0f}% of it", who,
                          100 * lost(*row), 100 * row->unexplained_share);
  else
    f.title = fmt::format("the sweep's scaling efficiency is {:.2f} at {} devices and no finding says where the "
                          "rest went",
                          *e.scaling_efficiency, e.world);
  f.evidence = {{"time_source", trace::timeline_source_name(e.timeline_source)}, {"per_device", device_table(e)}};
  if (row) {
    f.evidence["device"] = who;
    f.evidence["idle_share"] = figure(row->idle_share);
    f.evidence["unexplained_share"] = figure(row->unexplained_share);
  }
  if (e.scaling_efficiency) f.evidence["scaling_efficiency"] = figure(*e.scaling_efficiency);
  if (!e.breakdown.empty()) f.evidence["breakdown"] = breakdown_table(e);
  for (const auto& t : e.timelines)
    if (row && t.who() == who) {
      nlohmann::json causes = nlohmann::json::object();
      for (size_t c = 0; c < trace::kIdleCauses; ++c)
        if (t.idle.ns[c] > 0) causes[trace::idle_cause_name(static_cast<trace::IdleCause>(c))] = figure(t.share(t.idle.ns[c]));
      f.evidence["idle_causes"] = causes;
    }
  f.explanation =
      "The device did nothing for a large share of the measured window, and the known causes (waiting for the input, "
      "for the host to launch, for host syncs, for set-up, for communication, for another rank, pipeline bubbles, "
      "DataParallel's primary) do not account for it. Where the gaps' causes are known (idle_causes): device_wait is "
      "work that was queued but waited on another stream or event; unknown is work whose launch the trace did not "
      "record.";
  f.fix = "open the trace at the idle gaps (dpbench --trace, or the PyTorch trace, in ui.perfetto.dev): what runs on "
          "the host and on the other streams while this device waits is the cause";
  if (row) f.explains.push_back({row->rank, row->device, row->unexplained_share});
  return f;
}

}  // namespace dpb::doctor::check
