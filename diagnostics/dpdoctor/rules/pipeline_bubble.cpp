// A pipeline whose stages idle a quarter of each step or more, without one stage being
// the cause (unbalanced-pipeline) or the schedule being naive (naive-model-parallel):
// the bubble of filling and draining the pipeline, (p-1)/(m+p-1), and what each
// micro-batch's handoffs add to it.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> pipeline_bubble(const Evidence& e) {
  if (!e.has_pipeline || e.stage_busy.size() < 2 || e.micro_sizes.size() <= 1) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(e.stage_busy.begin(), e.stage_busy.end());
  if (*lo > 0 && *hi / *lo >= 1.3) return std::nullopt;  // unbalanced-pipeline's case
  // A stage idle a quarter of the step is a warning; from 2% the bubble is still where the
  // stages' idle time goes, said as advice so that the budget charges it to the schedule.
  if (*lo > 0.98) return std::nullopt;
  const size_t p = e.stage_busy.size(), m = e.micro_sizes.size();
  Finding f;
  f.severity = *lo <= 0.75 ? Severity::warning : Severity::info;
  f.title = fmt::format("the pipeline's stages idle {:.0f}% of each step (bubble; {:.0f}% in theory with {} stages and "
                        "{} micro-batches)",
                        100 * e.bubble, 100 * e.bubble_theory, p, m);
  f.evidence = {{"stage_busy", e.stage_busy},
                {"bubble_measured", e.bubble},
                {"bubble_theory", e.bubble_theory},
                {"stages", p},
                {"micro_batches", m},
                {"micro_batch_sizes", e.micro_sizes},
                {"per_device", device_table(e)}};
  f.explanation = fmt::format(
      "With {} stages each micro-batch's forward starts only after the previous stage's, and the backwards drain in "
      "reverse: of every step, (p-1)/(m+p-1) = {:.0f}% is filling and draining the pipeline. The measured {:.0f}% adds "
      "what each micro-batch costs beyond its compute (sending activations and gradients between devices, small "
      "micro-batches running below the devices' speed).",
      p, 100 * e.bubble_theory, 100 * e.bubble);
  f.fix = "use more micro-batches (the bubble falls as 1/m; --micro-batches), keep them large enough to run efficiently, "
          "use fewer stages, or data parallelism (--mode=ddp) for a model that fits on one device";
  f.explains = claim_idle(e, [](const std::string&) { return true; });
  // Twice the micro-batches: the fill and drain fall from (m+p-1)/m to (2m+p-1)/(2m) of the
  // work.
  const double md = static_cast<double>(m), pd = static_cast<double>(p);
  f.predicted = scaled_step(e, (2 * md + pd - 1) / (2 * md) / ((md + pd - 1) / md),
                            "pipeline model: the step scales as (m + p - 1) / m with m micro-batches over p stages, here "
                            "for twice the micro-batches; each smaller micro-batch's own costs (its handoffs, its "
                            "products below the device's speed) are not in one run, so the gain is at most this",
                            {{"stages", p}, {"micro_batches", m}, {"micro_batches_fixed", 2 * m}});
  return f;
}

}  // namespace dpb::doctor::check
