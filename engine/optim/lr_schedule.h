#pragma once
// Learning-rate schedules as functions of the optimizer step (0-based):
// constant, step (x gamma every step_size steps), cosine (to min_lr over total
// steps), each optionally preceded by a linear warm-up from lr/warmup to lr.
#include <memory>
#include <string>
#include <string_view>

namespace dpb {

enum class LrScheduleKind { constant, step, cosine };
const char* lr_schedule_name(LrScheduleKind k);
// "constant", "step", "cosine"; throws dpb::Error naming them otherwise.
LrScheduleKind parse_lr_schedule(std::string_view name);

// The linear-scaling rule (Goyal et al., 2017): none, or linear (lr x global batch /
// base batch, with a warm-up).
enum class LrScaling { none, linear };
const char* lr_scaling_name(LrScaling s);
LrScaling parse_lr_scaling(std::string_view name);

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::constant;
  float base_lr = 0.01f;
  int64_t total_steps = 1;
  int64_t warmup_steps = 0;
  int64_t step_size = 30;  // step: decay period
  float gamma = 0.1f;      // step: decay factor
  float min_lr = 0.0f;     // cosine: final value
};

class LrSchedule {
 public:
  explicit LrSchedule(LrScheduleOptions o);
  float lr_at(int64_t step) const;
  const LrScheduleOptions& options() const { return o_; }

 private:
  LrScheduleOptions o_;
};

}  // namespace dpb
