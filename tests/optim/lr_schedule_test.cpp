#include "engine/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"

namespace dpb {
namespace {

TEST(LrSchedule, ConstantStepCosineAndWarmup) {
  LrScheduleOptions o;
  o.base_lr = 0.1f;
  EXPECT_FLOAT_EQ(LrSchedule(o).lr_at(100), 0.1f);
  o.kind = LrScheduleKind::step;
  o.step_size = 10;
  o.gamma = 0.5f;
  EXPECT_FLOAT_EQ(LrSchedule(o).lr_at(9), 0.1f);
  EXPECT_FLOAT_EQ(LrSchedule(o).lr_at(10), 0.05f);
  EXPECT_FLOAT_EQ(LrSchedule(o).lr_at(25), 0.025f);
  o.kind = LrScheduleKind::cosine;
  o.total_steps = 100;
  EXPECT_FLOAT_EQ(LrSchedule(o).lr_at(0), 0.1f);
  EXPECT_NEAR(LrSchedule(o).lr_at(50), 0.05f, 1e-6);
  EXPECT_NEAR(LrSchedule(o).lr_at(100), 0.0f, 1e-7);
  o.warmup_steps = 4;
  EXPECT_FLOAT_EQ(LrSchedule(o).lr_at(0), 0.025f);
  EXPECT_FLOAT_EQ(LrSchedule(o).lr_at(3), 0.1f);
  EXPECT_FLOAT_EQ(LrSchedule(o).lr_at(4), 0.1f);
}

TEST(LrSchedule, NamesRoundTripAndUnknownNamesAreErrors) {
  for (auto k : {LrScheduleKind::constant, LrScheduleKind::step, LrScheduleKind::cosine})
    EXPECT_EQ(parse_lr_schedule(lr_schedule_name(k)), k);
  try {
    parse_lr_schedule("linear");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid: constant, step, cosine"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_lr_scaling("linear"), LrScaling::linear);
  EXPECT_THROW(parse_lr_scaling("sqrt"), Error);
}

}  // namespace
}  // namespace dpb
