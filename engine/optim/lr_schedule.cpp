#include "engine/optim/lr_schedule.h"

#include <cmath>

#include "engine/core/error.h"

namespace dpb {

LrSchedule::LrSchedule(LrScheduleOptions o) : o_(std::move(o)) {
  DPB_CHECK(o_.name == "constant" || o_.name == "step" || o_.name == "cosine")
      << "unknown lr schedule '" << o_.name << "' (valid: constant, step, cosine)";
  DPB_CHECK(o_.base_lr >= 0) << "learning rate must be non-negative, got " << o_.base_lr;
  DPB_CHECK(o_.warmup_steps >= 0 && o_.total_steps >= 1 && o_.step_size >= 1)
      << "lr schedule: warm-up must be >= 0, total steps and step size >= 1";
}

float LrSchedule::lr_at(int64_t step) const {
  if (step < o_.warmup_steps) return o_.base_lr * static_cast<float>(step + 1) / static_cast<float>(o_.warmup_steps);
  const int64_t t = step - o_.warmup_steps;
  if (o_.name == "step") return o_.base_lr * std::pow(o_.gamma, static_cast<float>(t / o_.step_size));
  if (o_.name == "cosine") {
    const int64_t span = std::max<int64_t>(1, o_.total_steps - o_.warmup_steps);
    const double progress = std::min(1.0, static_cast<double>(t) / static_cast<double>(span));
    return o_.min_lr + static_cast<float>(0.5 * (1.0 + std::cos(M_PI * progress))) * (o_.base_lr - o_.min_lr);
  }
  return o_.base_lr;
}

}  // namespace dpb
