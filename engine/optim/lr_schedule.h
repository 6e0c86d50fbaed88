#pragma once
// Learning-rate schedules as functions of the optimizer step (0-based):
// constant, step (x gamma every step_size steps), cosine (to min_lr over total
// steps), each optionally preceded by a linear warm-up from lr/warmup to lr.
#include <memory>
#include <string>

namespace dpb {

struct LrScheduleOptions {
  std::string name = "constant";  // constant | step | cosine
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
