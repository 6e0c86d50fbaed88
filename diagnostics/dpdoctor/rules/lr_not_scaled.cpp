// Advice from the configuration: a global batch much larger than the one the learning
// rate was tuned for, with a learning rate not scaled to match. The global batch is what
// one optimizer step really saw (every rank's batches, accumulation included); the rates
// are the configured and the effective one.
#include <fmt/format.h>

#include <cmath>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> lr_not_scaled(const Evidence& e) {
  if (e.base_batch <= 0 || e.lr <= 0 || e.global_batch < 2 * e.base_batch) return std::nullopt;
  const double wanted = static_cast<double>(e.global_batch) / static_cast<double>(e.base_batch);
  const double got = e.lr_effective / e.lr;
  if (got >= 0.5 * wanted) return std::nullopt;  // scaled (linearly, or at least half way)
  Finding f;
  f.severity = Severity::info;
  f.title = fmt::format("advice from the configuration: the global batch is {:.0f}x the batch the learning rate was "
                        "tuned for, and the learning rate was scaled {:.2g}x",
                        wanted, got);
  f.evidence = {{"global_batch", e.global_batch},
                {"base_batch", e.base_batch},
                {"lr", e.lr},
                {"lr_effective", e.lr_effective},
                {"lr_scale", e.lr_scale},
                {"evidence", "configuration"}};
  f.explanation = fmt::format(
      "Data parallelism multiplies the batch per optimizer step; with the same learning rate each sample's gradient "
      "weighs {:.0f}x less per epoch, which usually slows convergence (Goyal et al., 2017: scale the rate with the "
      "batch, with a warm-up). This rests on the configuration, not on a measurement.",
      wanted);
  f.fix = fmt::format("scale the learning rate linearly to {:.4g} with a warm-up (--lr-scale=linear --base-batch={}), "
                      "or confirm convergence at this batch",
                      e.lr * wanted, e.base_batch);
  return f;
}

}  // namespace dpb::doctor::check
