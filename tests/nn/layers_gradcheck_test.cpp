// Every layer's backward against finite differences (inputs and parameters).
#include <gtest/gtest.h>

#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/ops.h"
#include "engine/nn/basic_block.h"
#include "engine/nn/bottleneck.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/flatten.h"
#include "engine/nn/global_avg_pool2d.h"
#include "engine/nn/linear.h"
#include "engine/nn/pool2d.h"
#include "engine/nn/relu.h"
#include "engine/nn/sequential.h"
#include "tests/nn/gradcheck.h"

namespace dpb {
namespace {

using testing::expect_gradients_match;
using testing::random_tensor;

// In a residual block every weight reaches every output through BatchNorm and two
// ReLUs, so a perturbation crosses ReLU kinks far more often than in a single layer:
// a smaller step, and up to half the samples may be skipped as kinks.
testing::GradCheckOptions residual_options() {
  testing::GradCheckOptions o;
  o.eps = 1e-3;
  o.tolerance = 3e-2;
  o.max_skipped = 0.5;
  return o;
}


TEST(GradCheck, Linear) {
  Generator g(1);
  Linear l(7, 5, true, &g);
  expect_gradients_match(l, random_tensor({4, 7}, g), 11);
}

TEST(GradCheck, LinearWithoutBias) {
  Generator g(2);
  Linear l(6, 3, false, &g);
  expect_gradients_match(l, random_tensor({3, 6}, g), 12);
}

TEST(GradCheck, Conv2dPaddedWithBias) {
  Generator g(3);
  Conv2d c(3, 4, 3, 1, 1, true, &g);
  expect_gradients_match(c, random_tensor({2, 3, 6, 6}, g), 13);
}

TEST(GradCheck, Conv2dStridedNoBias) {
  Generator g(4);
  Conv2d c(2, 3, 3, 2, 1, false, &g);
  expect_gradients_match(c, random_tensor({2, 2, 7, 7}, g), 14);
}

TEST(GradCheck, Conv2d5x5Unpadded) {
  Generator g(5);
  Conv2d c(1, 2, 5, 1, 0, true, &g);
  expect_gradients_match(c, random_tensor({2, 1, 8, 8}, g), 15);
}

TEST(GradCheck, Conv2d1x1Strided) {
  Generator g(6);
  Conv2d c(4, 3, 1, 2, 0, false, &g);
  expect_gradients_match(c, random_tensor({2, 4, 6, 6}, g), 16);
}

// Outputs with channels divisible by the CPU's block are channel-blocked: the same
// checks on blocked activations (conv -> bn -> relu -> pool -> flatten -> linear).
TEST(GradCheck, BlockedLayoutChain) {
  Generator g(30);
  Sequential s;
  s.add("conv", std::make_unique<Conv2d>(16, 16, 3, 1, 1, true, &g));
  s.add("relu", std::make_unique<ReLU>(true));
  s.add("pool", MaxPool2d(2, 2));
  s.add("conv2", std::make_unique<Conv2d>(16, 16, 3, 2, 1, false, &g));
  s.add("bn", std::make_unique<BatchNorm2d>(16));
  s.add("relu2", std::make_unique<ReLU>(true));
  s.add("flatten", std::make_unique<Flatten>());
  s.add("fc", std::make_unique<Linear>(16 * 2 * 2, 5, true, &g));
  Tensor x = random_tensor({2, 16, 8, 8}, g).to_layout(cpu::blocked_layout());
  EXPECT_EQ(s.layer(0).forward(x.clone()).layout(), x.layout());
  testing::GradCheckOptions o;
  o.max_skipped = 0.4;
  o.tolerance = 3e-2;
  expect_gradients_match(s, x, 31, o);
}

// LeNet's shapes: 6 channels fill no channel block, so the first convolution writes
// channels-last (oneDNN has optimised kernels for it on AVX2 and AVX-512) and ReLU,
// pooling and the second convolution run on that layout.
TEST(GradCheck, ChannelsLastLayoutChain) {
  Generator g(34);
  Sequential s;
  s.add("conv1", std::make_unique<Conv2d>(1, 6, 5, 1, 2, true, &g));
  s.add("relu1", std::make_unique<ReLU>(true));
  s.add("pool1", MaxPool2d(2, 2));
  s.add("conv2", std::make_unique<Conv2d>(6, 16, 5, 1, 0, true, &g));
  s.add("relu2", std::make_unique<ReLU>(true));
  s.add("pool2", MaxPool2d(2, 2));
  s.add("flatten", std::make_unique<Flatten>());
  s.add("fc", std::make_unique<Linear>(16, 3, true, &g));
  s.set_needs_input_grad(false);
  Tensor x = random_tensor({2, 1, 12, 12}, g);
  EXPECT_EQ(s.layer(0).forward(x.clone()).layout(), Layout::nhwc);
  testing::GradCheckOptions o;
  o.max_skipped = 0.4;
  o.check_input = false;
  o.eps = 2e-3;
  expect_gradients_match(s, x, 35, o);
}

TEST(GradCheck, BlockedResidualBlock) {
  Generator g(32);
  BasicBlock b(8, 16, 2, &g);
  expect_gradients_match(b, random_tensor({2, 8, 6, 6}, g), 33, residual_options());
}

TEST(GradCheck, BatchNorm2dTrainMode) {
  Generator g(7);
  BatchNorm2d bn(3);
  // Non-trivial affine parameters so both gradients are exercised.
  for (int c = 0; c < 3; ++c) {
    bn.named_parameters()[0].second->data().data()[c] = 0.5f + 0.3f * static_cast<float>(c);
    bn.named_parameters()[1].second->data().data()[c] = -0.2f * static_cast<float>(c);
  }
  expect_gradients_match(bn, random_tensor({4, 3, 3, 3}, g), 17);
}

TEST(GradCheck, BatchNorm2dFrozen) {
  Generator g(36);
  BatchNorm2d bn(3);
  bn.set_frozen(true);
  auto buffers = bn.named_buffers();
  for (int c = 0; c < 3; ++c) {
    buffers[0].second->data()[c] = 0.3f * static_cast<float>(c);         // running_mean
    buffers[1].second->data()[c] = 0.5f + 0.4f * static_cast<float>(c);  // running_var
    bn.named_parameters()[0].second->data().data()[c] = 1.5f - 0.5f * static_cast<float>(c);
  }
  const auto before = buffers[0].second->to_vector();
  expect_gradients_match(bn, random_tensor({4, 3, 3, 3}, g), 37);
  EXPECT_EQ(buffers[0].second->to_vector(), before) << "a frozen BatchNorm keeps its running statistics";
}

TEST(GradCheck, ReLU) {
  Generator g(8);
  ReLU r;
  expect_gradients_match(r, random_tensor({3, 10}, g), 18);
}

TEST(GradCheck, ReLUInPlace) {
  Generator g(9);
  ReLU r(true);
  expect_gradients_match(r, random_tensor({2, 3, 4, 4}, g), 19);
}

TEST(GradCheck, MaxPool2d) {
  Generator g(10);
  auto p = MaxPool2d(2, 2);
  expect_gradients_match(*p, random_tensor({2, 3, 6, 6}, g), 20);
}

TEST(GradCheck, MaxPool2dOverlappingPadded) {
  Generator g(11);
  auto p = MaxPool2d(3, 2, 1);
  expect_gradients_match(*p, random_tensor({2, 2, 7, 7}, g), 21);
}

TEST(GradCheck, AvgPool2d) {
  Generator g(12);
  auto p = AvgPool2d(2, 2);
  expect_gradients_match(*p, random_tensor({2, 3, 6, 6}, g), 22);
}

TEST(GradCheck, AvgPool2dPaddedCountsPadding) {
  Generator g(13);
  auto p = AvgPool2d(3, 2, 1);
  expect_gradients_match(*p, random_tensor({1, 2, 5, 5}, g), 23);
}

TEST(GradCheck, GlobalAvgPool2d) {
  Generator g(14);
  GlobalAvgPool2d p;
  expect_gradients_match(p, random_tensor({3, 4, 3, 3}, g), 24);
}

TEST(GradCheck, Flatten) {
  Generator g(15);
  Flatten f;
  expect_gradients_match(f, random_tensor({2, 3, 2, 2}, g), 25);
}

TEST(GradCheck, BasicBlockIdentityShortcut) {
  Generator g(16);
  BasicBlock b(4, 4, 1, &g);
  expect_gradients_match(b, random_tensor({3, 4, 5, 5}, g), 26, residual_options());
}

TEST(GradCheck, BasicBlockDownsampleShortcut) {
  Generator g(17);
  BasicBlock b(3, 6, 2, &g);
  expect_gradients_match(b, random_tensor({3, 3, 6, 6}, g), 27, residual_options());
}

TEST(GradCheck, BottleneckIdentityShortcut) {
  Generator g(18);
  Bottleneck b(8, 2, 1, &g);
  expect_gradients_match(b, random_tensor({3, 8, 5, 5}, g), 28, residual_options());
}

TEST(GradCheck, BottleneckDownsampleShortcut) {
  Generator g(19);
  Bottleneck b(4, 3, 2, &g);
  expect_gradients_match(b, random_tensor({2, 4, 6, 6}, g), 29, residual_options());
}

// The block's backward equals the composition of its layers' backwards, exactly.
TEST(GradCheck, BasicBlockEqualsItsComposition) {
  Generator g(16), g2(16);
  BasicBlock b(4, 4, 1, &g);
  Sequential s;
  s.add("conv1", std::make_unique<Conv2d>(4, 4, 3, 1, 1, false, &g2));
  s.add("bn1", std::make_unique<BatchNorm2d>(4));
  s.add("relu", std::make_unique<ReLU>(true));
  s.add("conv2", std::make_unique<Conv2d>(4, 4, 3, 1, 1, false, &g2));
  s.add("bn2", std::make_unique<BatchNorm2d>(4));
  s.set_needs_input_grad(true);
  b.set_needs_input_grad(true);
  Tensor x = random_tensor({3, 4, 5, 5}, g);
  Tensor yb = b.forward(x.clone());
  Tensor ys = s.forward(x.clone());
  ops::add(ys, x.to_layout(ys.layout()), ys);
  ReLU out_relu;
  ys = out_relu.forward(ys);
  EXPECT_EQ(yb.to_vector(), ys.to_vector());
  Tensor dy = testing::random_like(yb, g);
  Tensor dxb = b.backward(dy.clone());
  Tensor gs = out_relu.backward(dy.clone());
  Tensor dxs = s.backward(gs.clone());
  ops::add(dxs, gs.to_layout(dxs.layout()), dxs);
  EXPECT_EQ(dxb.to_vector(), dxs.to_vector());
  auto pb = b.named_parameters(), ps = s.named_parameters();
  ASSERT_EQ(pb.size(), ps.size());
  for (size_t i = 0; i < pb.size(); ++i) {
    EXPECT_EQ(pb[i].first, ps[i].first);
    EXPECT_EQ(pb[i].second->grad().to_vector(), ps[i].second->grad().to_vector()) << pb[i].first;
  }
}

TEST(GradCheck, SequentialConvNet) {
  Generator g(18);
  Sequential s;
  s.add("conv", std::make_unique<Conv2d>(2, 3, 3, 1, 1, true, &g));
  s.add("relu", std::make_unique<ReLU>(true));
  s.add("pool", MaxPool2d(2, 2));
  s.add("flatten", std::make_unique<Flatten>());
  s.add("fc", std::make_unique<Linear>(3 * 3 * 3, 4, true, &g));
  expect_gradients_match(s, random_tensor({2, 2, 6, 6}, g), 28);
}

// An MLP's front: Flatten has no parameters, so when the model's input needs no gradient
// neither does the first Linear's (the largest matmul of its backward is skipped, as
// autograd skips it); the parameter gradients are those of the full backward, and asking
// for the input gradient turns it back on for every layer.
TEST(GradCheck, ParameterFreeFrontSkipsTheFirstInputGradient) {
  Generator g(19);
  Sequential s;
  s.add("flatten", std::make_unique<Flatten>());
  s.add("fc1", std::make_unique<Linear>(12, 5, true, &g));
  s.add("relu", std::make_unique<ReLU>(true));
  s.add("fc2", std::make_unique<Linear>(5, 3, true, &g));
  auto full = s.clone();
  full->set_needs_input_grad(true);
  s.set_needs_input_grad(false);
  EXPECT_FALSE(s.layer(0).needs_input_grad());
  EXPECT_FALSE(s.layer(1).needs_input_grad());
  EXPECT_TRUE(s.layer(2).needs_input_grad());
  EXPECT_TRUE(s.layer(3).needs_input_grad());

  Tensor x = random_tensor({4, 3, 2, 2}, g);
  Tensor y = s.forward(x.clone());
  EXPECT_EQ(y.to_vector(), full->forward(x.clone()).to_vector());
  Tensor dy = testing::random_like(y, g);
  EXPECT_FALSE(s.backward(dy.clone()).defined());
  Tensor dx = full->backward(dy.clone());
  ASSERT_TRUE(dx.defined());
  EXPECT_EQ(dx.shape(), x.shape());
  auto mine = s.named_parameters(), theirs = full->named_parameters();
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i)
    EXPECT_EQ(mine[i].second->grad().to_vector(), theirs[i].second->grad().to_vector()) << mine[i].first;

  testing::GradCheckOptions o;
  o.check_input = false;
  expect_gradients_match(s, x, 29, o);
}

}  // namespace
}  // namespace dpb
