// Advisory: a global batch much larger than the one the learning rate was tuned for,
// with the learning rate left as it was.
#include <fmt/format.h>

#include <cmath>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> lr_not_scaled(const Evidence& e) {
  if (e.base_batch <= 0 || e.global_batch < 2 * e.base_batch || e.lr <= 0) return std::nullopt;
  if (std::fabs(e.lr_effective - e.lr) > 1e-9 * e.lr) return std::nullopt;  // it was scaled
  const double ratio = static_cast<double>(e.global_batch) / static_cast<double>(e.base_batch);
  Finding f;
  f.severity = Severity::info;
  f.title = fmt::format("the global batch is {:.0f}x the batch the learning rate was tuned for, and the learning rate "
                        "was not scaled",
                        ratio);
  f.evidence = {{"global_batch", e.global_batch}, {"base_batch", e.base_batch}, {"lr", e.lr}, {"lr_scale", e.lr_scale}};
  f.explanation = fmt::format(
      "Data parallelism multiplies the batch per optimizer step; with the same learning rate each sample's gradient "
      "weighs {:.0f}x less per epoch, which usually slows convergence (Goyal et al., 2017: scale the rate with the "
      "batch, with a warm-up).",
      ratio);
  f.fix = fmt::format("scale the learning rate linearly to {:.4g} with a warm-up (--lr-scale=linear --base-batch={}), "
                      "or confirm convergence at this batch",
                      e.lr * ratio, e.base_batch);
  return f;
}

}  // namespace dpb::doctor::check
