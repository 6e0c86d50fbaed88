#include "engine/optim/lr_schedule.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/core/text.h"

namespace dpb {

const char* lr_schedule_name(LrScheduleKind k) {
  switch (k) {
    case LrScheduleKind::constant:
      return "constant";
    case LrScheduleKind::step:
      return "step";
    case LrScheduleKind::cosine:
      return "cosine";
  }
  return "?";
}

LrScheduleKind parse_lr_schedule(std::string_view name) {
  if (name == "constant") return LrScheduleKind::constant;
  if (name == "step") return LrScheduleKind::step;
  if (name == "cosine") return LrScheduleKind::cosine;
  DPB_FAIL() << "unknown lr schedule '" << escape_untrusted(name) << "' (valid: constant, step, cosine)";
}

const char* lr_scaling_name(LrScaling s) { return s == LrScaling::linear ? "linear" : "none"; }

LrScaling parse_lr_scaling(std::string_view name) {
  if (name == "none") return LrScaling::none;
  if (name == "linear") return LrScaling::linear;
  DPB_FAIL() << "unknown lr scaling '" << escape_untrusted(name) << "' (valid: none, linear)";
}

LrSchedule::LrSchedule(LrScheduleOptions o) : o_(std::move(o)) {
  DPB_CHECK(o_.base_lr >= 0) << "learning rate must be non-negative, got " << o_.base_lr;
  DPB_CHECK(o_.warmup_steps >= 0 && o_.total_steps >= 1 && o_.step_size >= 1)
      << "lr schedule: warm-up must be >= 0, total steps and step size >= 1";
}

float LrSchedule::lr_at(int64_t step) const {
  if (step < o_.warmup_steps) return o_.base_lr * static_cast<float>(step + 1) / static_cast<float>(o_.warmup_steps);
  const int64_t t = step - o_.warmup_steps;
  if (o_.kind == LrScheduleKind::step) return o_.base_lr * std::pow(o_.gamma, static_cast<float>(t / o_.step_size));
  if (o_.kind == LrScheduleKind::cosine) {
    const int64_t span = std::max<int64_t>(1, o_.total_steps - o_.warmup_steps);
    const double progress = std::min(1.0, static_cast<double>(t) / static_cast<double>(span));
    return o_.min_lr + static_cast<float>(0.5 * (1.0 + std::cos(M_PI * progress))) * (o_.base_lr - o_.min_lr);
  }
  return o_.base_lr;
}

}  // namespace dpb
