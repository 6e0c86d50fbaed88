// Model parallelism without micro-batches: the stages take turns, one busy at a time.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> naive_model_parallel(const Evidence& e) {
  // What ran: stages that (almost) never worked at once, with one micro-batch per step
  // (where the source says how many: a profiler trace does not).
  if (!e.has_pipeline || e.stage_busy.size() < 2 || e.micro_sizes.size() > 1 || e.concurrency < 0 ||
      e.concurrency > 0.05)
    return std::nullopt;
  Finding f;
  f.severity = Severity::warning;
  const size_t p = e.stage_busy.size();
  f.title = fmt::format("one pipeline stage busy at a time: the {} stages overlapped {:.0f}% of the step", p,
                        100 * e.concurrency);
  f.evidence = {{"stages", p},
                {"micro_batches", e.micro_batches},
                {"schedule", e.schedule},
                {"two_or_more_stages_busy_share", e.concurrency},
                {"bubble_measured", e.bubble},
                {"bubble_theory", e.bubble_theory},
                {"per_device", device_table(e)}};
  f.explanation = fmt::format(
      "With the whole batch as one micro-batch each stage waits for the previous one's forward and the next one's "
      "backward: {} devices do the work of one, each idle about {:.0f}% of the step ((p-1)/p).",
      p, 100.0 * static_cast<double>(p - 1) / static_cast<double>(p));
  f.fix = "split the batch into micro-batches and pipeline them (GPipe or 1F1B, e.g. --schedule=1f1b "
          "--micro-batches=4 or more; the bubble is (p-1)/(m+p-1))";
  f.explains = claim_idle(e, [](const std::string&) { return true; });
  // The prescribed 4 micro-batches over p stages, as balanced as the busiest stage is now:
  // the step becomes that stage's work times (m + p - 1) / m.
  constexpr int kMicro = 4;
  const double busiest = *std::max_element(e.stage_busy.begin(), e.stage_busy.end());
  const double fill = static_cast<double>(kMicro + p - 1) / kMicro;
  f.predicted = scaled_step(e, std::min(1.0, busiest * fill),
                            "pipeline model: with m = 4 micro-batches over p stages the step is the busiest stage's "
                            "work times (m + p - 1) / m; what each micro-batch adds (sending activations, smaller "
                            "products running below the device's speed) is not in one naive run, so the gain is at "
                            "most this",
                            {{"busiest_stage_busy", figure(busiest)}, {"stages", p}, {"micro_batches", kMicro}});
  return f;
}

}  // namespace dpb::doctor::check
