#pragma once
// Finite-difference gradient checks for a Module: L = sum(forward(x) * R) for a fixed
// random R; the analytic gradients from backward(R) are compared with central
// differences of L on a sample of input and parameter elements.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/core/rng.h"
#include "engine/nn/module.h"

namespace dpb::testing {

inline Tensor random_tensor(const Shape& s, Generator& g, float scale = 1.0f) {
  Tensor t = Tensor::empty(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = scale * static_cast<float>(g.normal());
  return t;
}

// A random tensor in the layout of `like` (gradients must come in the output's
// layout), with any channel padding zero.
inline Tensor random_like(const Tensor& like, Generator& g) {
  return random_tensor(like.shape(), g).to_layout(like.layout());
}

// Sum of y * r over stored elements (both in the same layout).
inline double weighted_sum(const Tensor& y, const Tensor& r) {
  EXPECT_EQ(y.layout(), r.layout());
  double s = 0;
  for (int64_t i = 0; i < y.storage_numel(); ++i) s += static_cast<double>(y.data()[i]) * r.data()[i];
  return s;
}

struct GradCheckOptions {
  double eps = 5e-3;
  double tolerance = 2e-2;      // relative error of the sampled gradient vector
  int samples = 40;             // elements checked per tensor
  double max_skipped = 0.25;    // share of samples allowed to sit on a kink
  bool check_input = true;      // false: as a model's first layer (no input gradient)
};

// Relative error ||a - n|| / max(||n||, tiny) over the sampled elements of `target`.
// An element whose one-sided differences disagree sits on a kink (ReLU, max-pool)
// within eps and is skipped (at most max_skipped of the samples).
template <typename Loss>
double sampled_error(Tensor target, const Tensor& analytic, Loss&& loss, Generator& g, const GradCheckOptions& o) {
  double diff = 0, norm = 0;
  const int64_t n = target.numel();
  const int count = static_cast<int>(std::min<int64_t>(n, o.samples));
  const double l0 = loss();
  int skipped = 0;
  for (int k = 0; k < count; ++k) {
    const int64_t i = n <= o.samples ? k : static_cast<int64_t>(g.below(static_cast<uint64_t>(n)));
    float* p = target.data() + i;
    const float saved = *p;
    *p = saved + static_cast<float>(o.eps);
    const double lp = loss();
    *p = saved - static_cast<float>(o.eps);
    const double lm = loss();
    *p = saved;
    const double right = (lp - l0) / o.eps, left = (l0 - lm) / o.eps;
    if (std::fabs(right - left) > 0.1 * std::max(std::fabs(right), std::fabs(left)) + 0.05) {
      ++skipped;
      continue;
    }
    const double numeric = (lp - lm) / (2 * o.eps);
    const double a = analytic.data()[i];
    diff += (a - numeric) * (a - numeric);
    norm += numeric * numeric;
  }
  EXPECT_LE(skipped, static_cast<int>(o.max_skipped * count)) << "too many samples on kinks";
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-6);
}

inline void expect_gradients_match(Module& m, const Tensor& x, uint64_t seed, const GradCheckOptions& o = {}) {
  Generator g(seed);
  m.train();
  m.set_needs_input_grad(o.check_input);
  Tensor probe = m.forward(x.clone());
  Tensor r = random_like(probe, g);
  m.zero_grad();
  Tensor y = m.forward(x.clone());
  Tensor dx = m.backward(r.clone());
  if (o.check_input) {
    ASSERT_TRUE(dx.defined());
    ASSERT_EQ(dx.shape(), x.shape());
    ASSERT_EQ(dx.layout(), x.layout());
    Tensor xv = x.clone();
    auto loss_x = [&] { return weighted_sum(m.forward(xv.clone()), r); };
    EXPECT_LT(sampled_error(xv, dx, loss_x, g, o), o.tolerance) << m.type_name() << ": input gradient";
  }
  for (auto& [name, p] : m.named_parameters()) {
    ASSERT_FALSE(p->grad_is_zero()) << name << " got no gradient";
    Tensor grad = p->grad().clone();
    auto loss_p = [&] { return weighted_sum(m.forward(x.clone()), r); };
    EXPECT_LT(sampled_error(p->data(), grad, loss_p, g, o), o.tolerance) << m.type_name() << ": gradient of " << name;
  }
}

}  // namespace dpb::testing
