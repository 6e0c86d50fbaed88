// A layer profile's total comes from the run's median step (benchmarks/dpbench/layer_profile.h):
// layers timed one at a time that add up to more are scaled to it, keeping their shares;
// ones that add up to less leave the rest as other_s.
#include "benchmarks/dpbench/layer_profile.h"

#include <gtest/gtest.h>

namespace dpb::bench {
namespace {

reports::LayerProfile timed(double fc1_fwd, double fc1_bwd, double fc2_fwd, double fc2_bwd, double optimizer) {
  reports::LayerProfile p;
  p.model = "mlp";
  p.batch = 64;
  p.evidence = "timed";
  p.layers = {{"fc1", fc1_fwd, fc1_bwd, 0, 0, {}}, {"fc2", fc2_fwd, fc2_bwd, 0, 0, {}}};
  p.optimizer_s = optimizer;
  return p;
}

TEST(LayerProfile, LayersThatAddUpToMoreThanTheStepAreScaledToIt) {
  // 10 ms of layers and 1 ms of optimizer against a 9 ms median step: 8 ms for the layers.
  reports::LayerProfile p = timed(0.002, 0.003, 0.001, 0.004, 0.001);
  fit_layers_to_step(p, 0.009);
  EXPECT_NEAR(p.compute_s(), 0.008, 1e-12);
  EXPECT_NEAR(p.step_s(), 0.009, 1e-12);
  EXPECT_EQ(p.other_s, 0.0);
  EXPECT_NEAR(p.layers[0].forward_s, 0.0016, 1e-12);  // shares kept: 2 of 10
  EXPECT_NEAR(p.layers[1].backward_s, 0.0032, 1e-12);
  EXPECT_NEAR(p.optimizer_s, 0.001, 1e-12) << "the optimizer is measured on its own and stays";
  EXPECT_NE(p.evidence.find("scaled by 0.800"), std::string::npos) << p.evidence;
  EXPECT_NE(p.evidence.find("10.000 ms"), std::string::npos) << p.evidence;
}

TEST(LayerProfile, LayersThatAddUpToLessLeaveTheRestAsOther) {
  reports::LayerProfile p = timed(0.002, 0.003, 0.001, 0.004, 0.001);
  fit_layers_to_step(p, 0.0125);
  EXPECT_NEAR(p.compute_s(), 0.010, 1e-12);
  EXPECT_NEAR(p.other_s, 0.0015, 1e-12);
  EXPECT_EQ(p.evidence.find("scaled"), std::string::npos) << p.evidence;
  // A step no longer than the optimizer alone says nothing about the layers: kept as timed.
  reports::LayerProfile q = timed(0.002, 0.003, 0.001, 0.004, 0.001);
  fit_layers_to_step(q, 0.0005);
  EXPECT_NEAR(q.compute_s(), 0.010, 1e-12);
  EXPECT_EQ(q.other_s, 0.0);
}

}  // namespace
}  // namespace dpb::bench
