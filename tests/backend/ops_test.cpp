// The CPU ops against direct (naive) reference implementations.
#include "engine/backend/ops.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/winograd.h"
#include "engine/core/rng.h"

namespace dpb {
namespace {

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator g(seed);
  Tensor t = Tensor::empty(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(g.normal());
  return t;
}

// Within `tol` of the largest reference value: for algorithms whose rounding error scales
// with the values summed (Winograd's transforms), not with each result.
void expect_close_to_scale(const Tensor& a, const std::vector<double>& ref, double tol) {
  ASSERT_EQ(a.numel(), static_cast<int64_t>(ref.size()));
  double scale = 0, worst = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  const auto v = a.to_vector();
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(v[i] - ref[i]));
  EXPECT_LE(worst, tol * scale) << "largest difference " << worst << " against values up to " << scale;
}

void expect_close(const Tensor& a, const std::vector<double>& ref, double tol = 1e-4) {
  ASSERT_EQ(a.numel(), static_cast<int64_t>(ref.size()));
  const auto v = a.to_vector();
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(v[i], ref[i], tol * (1 + std::fabs(ref[i]))) << "element " << i;
}

std::vector<double> conv_ref(const Tensor& x, const Tensor& w, const Tensor& b, int stride, int pad) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), K = w.size(2);
  const int64_t Ho = (H + 2 * pad - K) / stride + 1, Wo = (W + 2 * pad - K) / stride + 1;
  std::vector<double> y(static_cast<size_t>(N * O * Ho * Wo));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          double s = b.defined() ? b.data()[o] : 0.0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t p = 0; p < K; ++p)
              for (int64_t q = 0; q < K; ++q) {
                const int64_t hi = i * stride - pad + p, wi = j * stride - pad + q;
                if (hi < 0 || hi >= H || wi < 0 || wi >= W) continue;
                s += static_cast<double>(x.data()[((n * C + c) * H + hi) * W + wi]) *
                     w.data()[((o * C + c) * K + p) * K + q];
              }
          y[static_cast<size_t>(((n * O + o) * Ho + i) * Wo + j)] = s;
        }
  return y;
}

TEST(Ops, Conv2dForwardMatchesDirectConvolution) {
  for (int64_t out : {4, 6, 16}) {  // blocked outputs, 6 with channel padding
    for (auto [stride, pad] : {std::pair{1, 0}, {1, 1}, {2, 1}}) {
      Tensor x = rnd({2, 3, 7, 7}, 1), w = rnd({out, 3, 3, 3}, 2), b = rnd({out}, 3);
      Tensor y = ops::conv2d_forward(x, w, b, {stride, pad});
      EXPECT_EQ(y.shape(), (Shape{2, out, ops::window_out(7, 3, stride, pad), ops::window_out(7, 3, stride, pad)}));
      expect_close(y, conv_ref(x, w, b, stride, pad));
    }
  }
}

// The gradients of a stride-1, padding-1 convolution of x (N, C, H, H) by w (O, C, K, K)
// for dy (N, O, H, H, plain order), by the direct formulas.
struct ConvGrads {
  std::vector<double> dw, dx, db;
};
ConvGrads conv_grads_ref(const Tensor& x, const Tensor& w, const std::vector<float>& dy) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), O = w.size(0), K = w.size(2);
  ConvGrads r;
  r.dw.assign(static_cast<size_t>(O * C * K * K), 0.0);
  r.dx.assign(static_cast<size_t>(N * C * H * H), 0.0);
  r.db.assign(static_cast<size_t>(O), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < H; ++j) {
          const double gy = dy[static_cast<size_t>(((n * O + o) * H + i) * H + j)];
          r.db[static_cast<size_t>(o)] += gy;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t p = 0; p < K; ++p)
              for (int64_t q = 0; q < K; ++q) {
                const int64_t hi = i - 1 + p, wi = j - 1 + q;
                if (hi < 0 || hi >= H || wi < 0 || wi >= H) continue;
                const auto xi = static_cast<size_t>(((n * C + c) * H + hi) * H + wi);
                const auto wk = static_cast<size_t>(((o * C + c) * K + p) * K + q);
                r.dw[wk] += gy * x.data()[xi];
                r.dx[xi] += gy * w.data()[wk];
              }
        }
  return r;
}

// Channel counts that fit no channel block run channels-last (nhwc) where oneDNN has
// optimised kernels for it: LeNet's 1 -> 6 and 6 -> 16 convolutions. Forward, weight
// and input gradients against the direct formulas, from a plain and a blocked input.
TEST(Ops, Conv2dInChannelsLastMatchesDirectFormulas) {
  const int64_t N = 2, C = 6, H = 7, O = 6, K = 3;
  for (Layout in : {Layout::plain, Layout::nChw8c}) {
    Tensor x = rnd({N, C, H, H}, 21), w = rnd({O, C, K, K}, 22), b = rnd({O}, 23);
    const Tensor xin = x.to_layout(in);
    Tensor y = ops::conv2d_forward(xin, w, b, {1, 1});
    expect_close(y, conv_ref(x, w, b, 1, 1));
    Tensor dy = rnd(y.shape(), 24).to_layout(y.layout());
    Tensor dw = Tensor::empty(w.shape()), db = Tensor::empty(b.shape());
    ops::conv2d_backward_weights(xin, dy, dw, db, {1, 1}, false);
    Tensor dx = Tensor::empty(x.shape(), Device::cpu(), DType::f32, in);
    ops::conv2d_backward_data(dy, w, dx, {1, 1});
    EXPECT_EQ(dx.layout(), in) << "the input gradient comes back in the input's layout";
    const ConvGrads r = conv_grads_ref(x, w, dy.to_vector());
    expect_close(dw, r.dw, 1e-3);
    expect_close(db, r.db, 1e-3);
    expect_close(dx, r.dx, 1e-3);
  }
}

// 3x3 stride-1 convolutions with outputs of 7x7 or more run Winograd where oneDNN has its
// kernels (AVX-512: blocked by 16), others direct (without them, AVX2, our own Winograd
// takes 32 channels or more: not these 16). Every pass against the direct formulas.
TEST(Ops, Conv2dWinogradWhereTheShapeCallsForItMatchesDirectFormulas) {
  const Layout blocked = cpu::blocked_layout();
  const bool avx512 = blocked == Layout::nChw16c;
  const int64_t N = 2, C = 16, O = 16, K = 3;
  for (int64_t H : {10, 4}) {
    Tensor x = rnd({N, C, H, H}, 31), w = rnd({O, C, K, K}, 32), b = rnd({O}, 33);
    const Tensor xin = x.to_layout(blocked);
    const std::string impl = cpu::conv2d_forward_impl(xin, w, true, {1, 1});
    if (H >= 7 && avx512)
      EXPECT_EQ(impl.rfind("jit_wino", 0), 0u) << impl;
    else
      EXPECT_EQ(impl.find("wino"), std::string::npos) << H << "x" << H << ": " << impl;
    Tensor y = ops::conv2d_forward(xin, w, b, {1, 1});
    expect_close(y, conv_ref(x, w, b, 1, 1));
    Tensor dy = rnd(y.shape(), 34).to_layout(y.layout());
    Tensor dw = Tensor::empty(w.shape()), db = Tensor::empty(b.shape());
    ops::conv2d_backward_weights(xin, dy, dw, db, {1, 1}, false);
    Tensor dx = Tensor::empty(x.shape(), Device::cpu(), DType::f32, blocked);
    ops::conv2d_backward_data(dy, w, dx, {1, 1});
    const ConvGrads r = conv_grads_ref(x, w, dy.to_plain().to_vector());
    expect_close(dw, r.dw);
    expect_close(db, r.db);
    expect_close(dx.to_plain(), r.dx);
  }
}

// Our own Winograd F(4x4, 3x3), which runs where oneDNN has no Winograd kernels: every
// pass against the direct formulas, on sizes that fill their 4x4 blocks (8) and that
// leave them part-empty at the image's edge (9, 10), with more output than input
// channels; the weight gradients added to what they hold when accumulating.
TEST(CpuWinograd, EveryPassMatchesTheDirectFormulas) {
  if (!cpu::winograd::processor_supported()) GTEST_SKIP() << "no AVX2 with FMA on this processor";
  const int64_t N = 2, C = 16, O = 24;
  for (int64_t H : {8, 9, 10}) {
    SCOPED_TRACE(H);
    Tensor x = rnd({N, C, H, H}, 41), w = rnd({O, C, 3, 3}, 42), b = rnd({O}, 43), dy = rnd({N, O, H, H}, 44);
    const Tensor xb = x.to_layout(Layout::nChw8c), dyb = dy.to_layout(Layout::nChw8c);
    Tensor y = Tensor::empty({N, O, H, H}, Device::cpu(), DType::f32, Layout::nChw8c);
    cpu::winograd::forward(xb.data(), w.data(), b.data(), y.data(), N, C, H, H, O);
    expect_close_to_scale(y.to_plain(), conv_ref(x, w, b, 1, 1), 1e-5);
    const ConvGrads r = conv_grads_ref(x, w, dy.to_vector());
    Tensor dx = Tensor::empty(x.shape(), Device::cpu(), DType::f32, Layout::nChw8c);
    cpu::winograd::backward_data(dyb.data(), w.data(), dx.data(), N, C, H, H, O);
    expect_close_to_scale(dx.to_plain(), r.dx, 1e-5);
    Tensor dw = Tensor::full(w.shape(), 7.0f), db = Tensor::full(b.shape(), 7.0f);
    cpu::winograd::backward_weights(xb.data(), dyb.data(), dw.data(), db.data(), N, C, H, H, O, false);
    expect_close_to_scale(dw, r.dw, 1e-5);
    expect_close_to_scale(db, r.db, 1e-5);
    cpu::winograd::backward_weights(xb.data(), dyb.data(), dw.data(), db.data(), N, C, H, H, O, true);
    std::vector<double> twice_w(r.dw), twice_b(r.db);
    for (auto& v : twice_w) v *= 2;
    for (auto& v : twice_b) v *= 2;
    expect_close_to_scale(dw, twice_w, 1e-5);
    expect_close_to_scale(db, twice_b, 1e-5);
  }
}

TEST(Ops, Conv2dBackwardWeightsAccumulates) {
  Tensor x = rnd({2, 2, 5, 5}, 4), dy = rnd({2, 3, 5, 5}, 5);
  Tensor dw = Tensor::empty({3, 2, 3, 3}), db = Tensor::empty({3});
  ops::conv2d_backward_weights(x, dy, dw, db, {1, 1}, false);
  const auto once_w = dw.to_vector();
  const auto once_b = db.to_vector();
  ops::conv2d_backward_weights(x, dy, dw, db, {1, 1}, true);
  for (size_t i = 0; i < once_w.size(); ++i) EXPECT_NEAR(dw.data()[i], 2 * once_w[i], 1e-4);
  for (size_t i = 0; i < once_b.size(); ++i) EXPECT_NEAR(db.data()[i], 2 * once_b[i], 1e-4);
  // db is the sum of dy over N, H, W.
  for (int64_t o = 0; o < 3; ++o) {
    double s = 0;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t k = 0; k < 25; ++k) s += dy.data()[(n * 3 + o) * 25 + k];
    EXPECT_NEAR(once_b[static_cast<size_t>(o)], s, 1e-4);
  }
}

TEST(Ops, LinearForwardAndBackward) {
  Tensor x = rnd({3, 5}, 6), w = rnd({4, 5}, 7), b = rnd({4}, 8), dy = rnd({3, 4}, 9);
  Tensor y = Tensor::empty({3, 4});
  ops::linear_forward(x, w, b, y);
  std::vector<double> ref(12), dx_ref(15), dw_ref(20);
  for (int n = 0; n < 3; ++n)
    for (int o = 0; o < 4; ++o) {
      double s = b.data()[o];
      for (int i = 0; i < 5; ++i) s += static_cast<double>(x.data()[n * 5 + i]) * w.data()[o * 5 + i];
      ref[static_cast<size_t>(n * 4 + o)] = s;
    }
  expect_close(y, ref);
  for (int n = 0; n < 3; ++n)
    for (int i = 0; i < 5; ++i) {
      double s = 0;
      for (int o = 0; o < 4; ++o) s += static_cast<double>(dy.data()[n * 4 + o]) * w.data()[o * 5 + i];
      dx_ref[static_cast<size_t>(n * 5 + i)] = s;
    }
  for (int o = 0; o < 4; ++o)
    for (int i = 0; i < 5; ++i) {
      double s = 0;
      for (int n = 0; n < 3; ++n) s += static_cast<double>(dy.data()[n * 4 + o]) * x.data()[n * 5 + i];
      dw_ref[static_cast<size_t>(o * 5 + i)] = s;
    }
  Tensor dx = Tensor::empty({3, 5}), dw = Tensor::empty({4, 5}), db = Tensor::empty({4});
  ops::linear_backward_data(dy, w, dx);
  ops::linear_backward_weights(x, dy, dw, db, false);
  expect_close(dx, dx_ref);
  expect_close(dw, dw_ref);
  ops::linear_backward_weights(x, dy, dw, db, true);
  for (auto& v : dw_ref) v *= 2;
  expect_close(dw, dw_ref);
}

TEST(Ops, BatchNormTrainNormalisesAndUpdatesRunningStats) {
  Tensor x = rnd({4, 2, 3, 3}, 10);
  Tensor gamma = Tensor::from_vector({2}, {2.0f, 0.5f}), beta = Tensor::from_vector({2}, {1.0f, -1.0f});
  Tensor rm = Tensor::zeros({2}), rv = Tensor::full({2}, 1.0f), y = Tensor::empty(x.shape());
  ops::BatchNormSaved saved;
  ops::batchnorm_forward_train(x, gamma, beta, y, saved, rm, rv, 0.1f, 1e-5f);
  for (int c = 0; c < 2; ++c) {
    double mean = 0, var = 0;
    for (int n = 0; n < 4; ++n)
      for (int k = 0; k < 9; ++k) mean += x.data()[(n * 2 + c) * 9 + k];
    mean /= 36;
    for (int n = 0; n < 4; ++n)
      for (int k = 0; k < 9; ++k) var += std::pow(x.data()[(n * 2 + c) * 9 + k] - mean, 2);
    var /= 36;
    EXPECT_NEAR(saved.mean.data()[c], mean, 1e-5);
    EXPECT_NEAR(saved.var.data()[c], var, 1e-4);
    EXPECT_NEAR(rm.data()[c], 0.1 * mean, 1e-5);
    EXPECT_NEAR(rv.data()[c], 0.9 + 0.1 * var * 36.0 / 35.0, 1e-4);  // unbiased, as PyTorch
    for (int n = 0; n < 4; ++n)
      for (int k = 0; k < 9; ++k) {
        const int i = (n * 2 + c) * 9 + k;
        EXPECT_NEAR(y.data()[i], gamma.data()[c] * (x.data()[i] - mean) / std::sqrt(var + 1e-5) + beta.data()[c],
                    1e-4);
      }
  }
  Tensor ye = Tensor::empty(x.shape());
  ops::batchnorm_forward_eval(x, gamma, beta, ye, rm, rv, 1e-5f);
  const int i = 5;  // channel 0
  EXPECT_NEAR(ye.data()[i], 2.0 * (x.data()[i] - rm.data()[0]) / std::sqrt(rv.data()[0] + 1e-5) + 1.0, 1e-4);
}

TEST(Ops, BatchNormOnPaddedBlockedAndChannelsLastLayouts) {
  for (Layout layout : {Layout::nChw8c, Layout::nhwc}) {
    SCOPED_TRACE(layout_name(layout));
    Tensor x = rnd({4, 6, 3, 3}, 12);
    Tensor gamma = rnd({6}, 13), beta = rnd({6}, 14);
    Tensor rm = Tensor::zeros({6}), rv = Tensor::full({6}, 1.0f), rm2 = rm.clone(), rv2 = rv.clone();
    Tensor y = Tensor::empty(x.shape());
    ops::BatchNormSaved saved, saved2;
    ops::batchnorm_forward_train(x, gamma, beta, y, saved, rm, rv, 0.1f, 1e-5f);
    Tensor xb = x.to_layout(layout), yb = Tensor::empty_like(xb);
    ops::batchnorm_forward_train(xb, gamma, beta, yb, saved2, rm2, rv2, 0.1f, 1e-5f);
    const auto yv = y.to_vector();
    expect_close(yb, std::vector<double>(yv.begin(), yv.end()));
    Tensor dy = rnd(x.shape(), 15), dx = Tensor::empty(x.shape()), dg = Tensor::empty({6}), db = Tensor::empty({6});
    ops::batchnorm_backward(x, dy, gamma, saved, dx, dg, db, 1e-5f, false);
    Tensor dyb = dy.to_layout(layout), dxb = Tensor::empty_like(xb), dg2 = Tensor::empty({6}),
           db2 = Tensor::empty({6});
    ops::batchnorm_backward(xb, dyb, gamma, saved2, dxb, dg2, db2, 1e-5f, false);
    const auto dxv = dx.to_vector();
    expect_close(dxb, std::vector<double>(dxv.begin(), dxv.end()), 1e-3);
    const auto dgv = dg.to_vector();
    expect_close(dg2, std::vector<double>(dgv.begin(), dgv.end()), 1e-3);
    Tensor sm = Tensor::empty({6}), sv = Tensor::empty({6}), bm = Tensor::empty({6}), bv = Tensor::empty({6});
    ops::batchnorm_stats(x, sm, sv);
    ops::batchnorm_stats(xb, bm, bv);
    const auto smv = sm.to_vector(), svv = sv.to_vector();
    expect_close(bm, std::vector<double>(smv.begin(), smv.end()));
    expect_close(bv, std::vector<double>(svv.begin(), svv.end()));
  }
}

TEST(Ops, PoolingMatchesDefinition) {
  Tensor x = rnd({1, 2, 4, 4}, 11), y = Tensor::empty({1, 2, 2, 2}), ws;
  ops::pool2d_forward(ops::PoolKind::max, x, y, ws, {2, 2, 0});
  Tensor ya = Tensor::empty({1, 2, 2, 2});
  ops::pool2d_forward(ops::PoolKind::avg, x, ya, ws, {2, 2, 0});
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        float mx = -1e30f;
        double sum = 0;
        for (int p = 0; p < 2; ++p)
          for (int q = 0; q < 2; ++q) {
            const float v = x.data()[(c * 4 + 2 * i + p) * 4 + 2 * j + q];
            mx = std::max(mx, v);
            sum += v;
          }
        EXPECT_FLOAT_EQ(y.data()[(c * 2 + i) * 2 + j], mx);
        EXPECT_NEAR(ya.data()[(c * 2 + i) * 2 + j], sum / 4, 1e-6);
      }
  Tensor g = Tensor::empty({1, 2});
  ops::global_avgpool_forward(x, g);
  double s0 = 0;
  for (int k = 0; k < 16; ++k) s0 += x.data()[k];
  EXPECT_NEAR(g.data()[0], s0 / 16, 1e-6);
}

// Max (ResNet's 3x3 / 2 padded, LeNet's 2x2 / 2 over an odd size) and average pooling,
// forward and backward, give the same values in the blocked and channels-last layouts
// as in plain order.
TEST(Ops, PoolingAgreesAcrossLayouts) {
  Tensor x = rnd({2, 6, 7, 7}, 31);
  for (auto [kind, p] : {std::pair{ops::PoolKind::max, ops::Pool2dParams{3, 2, 1}},
                         {ops::PoolKind::avg, ops::Pool2dParams{3, 2, 1}},
                         {ops::PoolKind::max, ops::Pool2dParams{2, 2, 0}}}) {
    const int64_t o = ops::window_out(7, p.kernel, p.stride, p.padding);
    Tensor dy = rnd({2, 6, o, o}, 32);
    Tensor y = Tensor::empty({2, 6, o, o}), ws, dx = Tensor::empty(x.shape());
    ops::pool2d_forward(kind, x, y, ws, p);
    ops::pool2d_backward(kind, x, y, dy, ws, dx, p);
    const auto yv = y.to_vector(), dxv = dx.to_vector();
    for (Layout l : {Layout::nChw8c, Layout::nhwc}) {
      SCOPED_TRACE(layout_name(l));
      Tensor xl = x.to_layout(l), yl = Tensor::empty(y.shape(), Device::cpu(), DType::f32, l), wsl;
      Tensor dxl = Tensor::empty(x.shape(), Device::cpu(), DType::f32, l);
      ops::pool2d_forward(kind, xl, yl, wsl, p);
      ops::pool2d_backward(kind, xl, yl, dy.to_layout(l), wsl, dxl, p);
      expect_close(yl, std::vector<double>(yv.begin(), yv.end()), 1e-6);
      expect_close(dxl, std::vector<double>(dxv.begin(), dxv.end()), 1e-6);
    }
  }
}

// 2x2 max pooling: the gradient goes to the first maximum of each window, nowhere
// else (a last odd row and column get none), and NaN propagates as in PyTorch.
TEST(Ops, MaxPoolGradientGoesToTheFirstMaximumAndNanPropagates) {
  const float nan = std::nanf("");
  // 1 x 1 x 3 x 5: windows {0,1,5,6} and {2,3,7,8}; row 2 and column 4 are outside.
  Tensor x = Tensor::from_vector({1, 1, 3, 5}, {1, 4, 2, nan, 9,  //
                                                4, 3, 5, 5, 9,    //
                                                9, 9, 9, 9, 9});
  Tensor y = Tensor::empty({1, 1, 1, 2}), ws, dx = Tensor::full(x.shape(), 7.0f);
  ops::pool2d_forward(ops::PoolKind::max, x, y, ws, {2, 2, 0});
  EXPECT_EQ(y.to_vector()[0], 4.0f);
  EXPECT_TRUE(std::isnan(y.to_vector()[1]));
  ops::pool2d_backward(ops::PoolKind::max, x, y, Tensor::from_vector({1, 1, 1, 2}, {10, 20}), ws, dx, {2, 2, 0});
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0, 10, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(Ops, ReluAndAdd) {
  Tensor x = Tensor::from_vector({4}, {-1, 2, 0, 3}), y = Tensor::empty({4});
  ops::relu_forward(x, y);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 2, 0, 3}));
  Tensor dy = Tensor::from_vector({4}, {1, 1, 1, 1}), dx = Tensor::empty({4});
  ops::relu_backward(y, dy, dx);
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0, 1, 0, 1}));
  ops::add(x, y, y);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{-1, 4, 0, 6}));
  ops::axpy(0.5f, x, y);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{-1.5f, 5, 0, 7.5f}));
  ops::scale(y, 2);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{-3, 10, 0, 15}));
}

TEST(Ops, SoftmaxCrossEntropyValueGradientAndAccuracy) {
  Tensor z = Tensor::from_vector({2, 3}, {1, 2, 3, 0, 0, 5});
  Tensor labels = Tensor::from_labels({2, 0});
  Tensor dz = Tensor::empty({2, 3});
  int64_t correct = -1;
  const float loss = ops::softmax_cross_entropy(z, labels, dz, &correct);
  const double l0 = std::log(std::exp(1) + std::exp(2) + std::exp(3)) - 3;
  const double l1 = std::log(2 + std::exp(5)) - 0;
  EXPECT_NEAR(loss, (l0 + l1) / 2, 1e-6);
  EXPECT_EQ(correct, 1);
  const double p02 = std::exp(3) / (std::exp(1) + std::exp(2) + std::exp(3));
  EXPECT_NEAR(dz.data()[2], (p02 - 1) / 2, 1e-6);
  double row = 0;
  for (int j = 0; j < 3; ++j) row += dz.data()[3 + j];
  EXPECT_NEAR(row, 0, 1e-6);
  Tensor bad = Tensor::from_labels({3, 0});
  EXPECT_THROW(ops::softmax_cross_entropy(z, bad, dz), Error);
}

TEST(Ops, MseLoss) {
  Tensor p = Tensor::from_vector({2, 2}, {1, 2, 3, 4}), t = Tensor::from_vector({2, 2}, {1, 1, 1, 1});
  Tensor d = Tensor::empty({2, 2});
  EXPECT_NEAR(ops::mse_loss(p, t, d), (0 + 1 + 4 + 9) / 4.0, 1e-6);
  EXPECT_EQ(d.to_vector(), (std::vector<float>{0, 0.5f, 1, 1.5f}));
}

TEST(Ops, ShapeErrorsAreClear) {
  Tensor x = rnd({2, 3, 5, 5}, 1), w = rnd({4, 2, 3, 3}, 2);
  try {
    ops::conv2d_forward(x, w, Tensor(), {1, 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input has 3 channels, weight expects 2"), std::string::npos) << e.what();
  }
  Tensor a = Tensor::empty({2, 3}, Device::cpu(0)), b = Tensor::empty({2, 3}, Device::cpu(1)), o = Tensor::empty({2, 3});
  EXPECT_THROW(ops::add(a, b, o), Error);
}

TEST(Ops, OptimizerStepsFollowPyTorchFormulas) {
  // SGD with momentum 0.9, weight decay 0.1, two steps.
  Tensor p = Tensor::from_vector({1}, {1.0f}), g = Tensor::from_vector({1}, {0.5f}), buf = Tensor::empty({1});
  ops::SgdHyper h;
  h.lr = 0.1f;
  h.momentum = 0.9f;
  h.weight_decay = 0.1f;
  ops::sgd_step(p, g, buf, h, true);
  double d = 0.5 + 0.1 * 1.0, b = d, pv = 1.0 - 0.1 * b;
  EXPECT_NEAR(p.data()[0], pv, 1e-6);
  ops::sgd_step(p, g, buf, h, false);
  d = 0.5 + 0.1 * pv;
  b = 0.9 * b + d;
  pv -= 0.1 * b;
  EXPECT_NEAR(p.data()[0], pv, 1e-6);
  // Nesterov.
  Tensor pn = Tensor::from_vector({1}, {1.0f}), bn = Tensor::empty({1});
  h.weight_decay = 0;
  h.nesterov = true;
  ops::sgd_step(pn, g, bn, h, true);
  EXPECT_NEAR(pn.data()[0], 1.0 - 0.1 * (0.5 + 0.9 * 0.5), 1e-6);
  // Adam, first step moves by lr * sign(g) (bias-corrected), AdamW decays first.
  Tensor pa = Tensor::from_vector({1}, {1.0f}), m = Tensor::zeros({1}), v = Tensor::zeros({1});
  ops::AdamHyper ah;
  ah.lr = 0.01f;
  ops::adam_step(pa, g, m, v, ah, 1);
  EXPECT_NEAR(pa.data()[0], 1.0 - 0.01 * 0.5 / (0.5 + 1e-8), 1e-6);
  Tensor pw = Tensor::from_vector({1}, {1.0f}), mw = Tensor::zeros({1}), vw = Tensor::zeros({1});
  ah.decoupled = true;
  ah.weight_decay = 0.1f;
  ops::adam_step(pw, g, mw, vw, ah, 1);
  EXPECT_NEAR(pw.data()[0], 1.0 * (1 - 0.01 * 0.1) - 0.01, 1e-6);
}

}  // namespace
}  // namespace dpb
