#include "engine/optim/optimizer.h"

#include <gtest/gtest.h>

namespace dpb {
namespace {

TEST(Optimizer, SkipsParametersWithoutGradient) {
  Parameter a(Tensor::full({2}, 1.0f)), b(Tensor::full({2}, 1.0f));
  OptimizerOptions o;
  o.lr = 0.5f;
  o.momentum = 0;
  auto opt = make_optimizer(o, {&a, &b});
  a.begin_grad();
  a.grad().fill(1.0f);
  opt->step();
  EXPECT_EQ(a.data().to_vector(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(b.data().to_vector(), (std::vector<float>{1.0f, 1.0f}));
}

// torch.nn.utils.clip_grad_norm_: the norm over every gradient written since zero_grad,
// scaling by max_norm / (norm + 1e-6) only when that is below 1.
TEST(Optimizer, ClipGradNormScalesOnlyAboveTheLimit) {
  Parameter a(Tensor::zeros({2})), b(Tensor::zeros({1})), untouched(Tensor::zeros({1}));
  a.begin_grad();
  a.grad().copy_from(Tensor::from_vector({2}, {3.0f, 0.0f}));
  b.begin_grad();
  b.grad().copy_from(Tensor::from_vector({1}, {4.0f}));
  EXPECT_NEAR(clip_grad_norm({&a, &b, &untouched}, 10.0), 5.0, 1e-9);  // under the limit: unchanged
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{3.0f, 0.0f}));
  EXPECT_NEAR(clip_grad_norm({&a, &b, &untouched}, 1.0), 5.0, 1e-9);
  const float coef = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_FLOAT_EQ(a.grad().to_vector()[0], 3.0f * coef);
  EXPECT_FLOAT_EQ(b.grad().to_vector()[0], 4.0f * coef);
  EXPECT_TRUE(untouched.grad_is_zero());
  EXPECT_THROW(clip_grad_norm({&a}, 0.0), Error);
}

// A weight-decay mask leaves the unmasked parameters undecayed (AdamW's decoupled decay
// with a zero gradient moves only the decayed one).
TEST(Optimizer, DecayMaskSelectsParameters) {
  Parameter a(Tensor::full({1}, 1.0f)), b(Tensor::full({1}, 1.0f));
  OptimizerOptions o;
  o.kind = OptimizerKind::adamw;
  o.lr = 0.1f;
  o.weight_decay = 0.5f;
  auto opt = make_optimizer(o, {&a, &b});
  opt->set_decay_mask({true, false});
  for (Parameter* p : {&a, &b}) {
    p->begin_grad();
    p->grad().fill(0.0f);
  }
  opt->step();
  EXPECT_FLOAT_EQ(a.data().item(), 1.0f - 0.1f * 0.5f);
  EXPECT_FLOAT_EQ(b.data().item(), 1.0f);
  EXPECT_THROW(opt->set_decay_mask({true}), Error);
}

TEST(Optimizer, GradientsAccumulateUntilZeroGrad) {
  Parameter p(Tensor::full({1}, 0.0f));
  EXPECT_FALSE(p.begin_grad());
  p.grad().fill(1.0f);
  EXPECT_TRUE(p.begin_grad());
  p.zero_grad();
  EXPECT_TRUE(p.grad_is_zero());
  EXPECT_FALSE(p.begin_grad());
}

TEST(Optimizer, GradReadyHooksFire) {
  Parameter p(Tensor::full({1}, 0.0f));
  int fired = 0;
  p.add_grad_ready_hook([&](Parameter& q) {
    EXPECT_EQ(&q, &p);
    ++fired;
  });
  p.mark_grad_ready();
  p.mark_grad_ready();
  EXPECT_EQ(fired, 2);
}

TEST(Optimizer, NamesAndDefaults) {
  Parameter p(Tensor::full({1}, 1.0f));
  OptimizerOptions o;
  o.kind = OptimizerKind::adamw;
  EXPECT_EQ(make_optimizer(o, {&p})->name(), "adamw");
  for (auto k : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw})
    EXPECT_EQ(parse_optimizer(optimizer_name(k)), k);
  try {
    parse_optimizer("rmsprop");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid: sgd, adam, adamw"), std::string::npos);
  }
}

TEST(Optimizer, SgdMomentumStateIsExposed) {
  Parameter p(Tensor::full({3}, 1.0f));
  OptimizerOptions o;
  auto opt = make_optimizer(o, {&p});
  EXPECT_TRUE(opt->state().empty());
  p.begin_grad();
  p.grad().fill(1.0f);
  opt->step();
  ASSERT_EQ(opt->state().size(), 1u);
  EXPECT_EQ(opt->state()[0].key, "momentum_buffer");
  EXPECT_EQ(opt->state()[0].param, 0u);
}

}  // namespace
}  // namespace dpb
