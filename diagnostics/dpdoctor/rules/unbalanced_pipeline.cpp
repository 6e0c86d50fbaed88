// Pipeline stages with unequal work: the slowest stage sets the pace, the others idle.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> unbalanced_pipeline(const Evidence& e) {
  // With one micro-batch the schedule is the cause (naive-model-parallel), not the split.
  if (!e.has_pipeline || e.stage_busy.size() < 2 || e.micro_sizes.size() <= 1) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(e.stage_busy.begin(), e.stage_busy.end());
  if (*lo <= 0 || *hi / *lo < 1.3) return std::nullopt;
  const size_t slow = static_cast<size_t>(hi - e.stage_busy.begin()), fast = static_cast<size_t>(lo - e.stage_busy.begin());
  Finding f;
  f.evidence = {{"stage_busy", e.stage_busy}, {"split_by", e.split_by}, {"stage_units", e.stage_units}};
  f.title = fmt::format("unbalanced pipeline: stage {} is busy {:.0f}% of the step, stage {} {:.0f}%", slow,
                        100 * *hi, fast, 100 * *lo);
  if (e.split_by == "measured time" && !e.unit_costs.empty()) {
    // Already the best cut at layer granularity: what no split can fix.
    const double total = std::accumulate(e.unit_costs.begin(), e.unit_costs.end(), 0.0);
    const auto big = std::max_element(e.unit_costs.begin(), e.unit_costs.end());
    const std::string name = e.unit_names[static_cast<size_t>(big - e.unit_costs.begin())];
    // Nothing a split can fix; still a warning when a stage idles a quarter of the step.
    f.severity = *lo < 0.75 ? Severity::warning : Severity::info;
    f.evidence["largest_layer"] = name;
    f.evidence["largest_layer_share"] = total > 0 ? *big / total : 0;
    f.explanation = fmt::format(
        "The split was chosen by measured layer times and is already the most even cut between layers: layer {} "
        "alone takes {:.0f}% of a forward + backward, so {} stages cannot be equal and the others wait for the "
        "slowest.",
        name, total > 0 ? 100 * *big / total : 0, e.stage_busy.size());
    f.fix = "use fewer stages, or a model whose layers are more even; data parallelism (--mode=ddp) does not have "
            "this limit";
  } else {
    f.severity = Severity::warning;
    f.explanation = fmt::format(
        "Each micro-batch passes every stage, so the pipeline runs at the pace of its slowest stage: stage {} works "
        "{:.1f}x as long as stage {}, which idles for the difference every micro-batch.",
        slow, *hi / *lo, fast);
    f.fix = "balance the stages by measured time (drop --split: dpbench measures every layer and cuts for the "
            "smallest slowest stage), or move layers from stage " +
            std::to_string(slow) + " towards stage " + std::to_string(fast);
  }
  f.explains = claim_idle(e, [](const std::string&) { return true; });
  return f;
}

}  // namespace dpb::doctor::check
