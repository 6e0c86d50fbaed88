#pragma once
// Helpers for the CUDA tests: whether a GPU is usable (each test skips with the reason
// when not), random tensors, the relative error of one result against another, and a
// scope that sets the math precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/backend/device_info.h"
#include "engine/backend/precision.h"
#include "engine/core/rng.h"
#include "engine/tensor/tensor.h"

namespace dpb::test {

// Empty when a GPU is usable, else why not.
inline std::string why_no_gpu() {
  const CudaInfo info = cuda_info();
  if (!info.built) return "CUDA backend not built: " + info.unavailable_reason;
  if (info.gpus.empty()) return "no GPU: " + info.unavailable_reason;
  return "";
}

#define DPB_REQUIRE_GPU()                                                                  \
  do {                                                                                     \
    if (const auto why = ::dpb::test::why_no_gpu(); !why.empty()) GTEST_SKIP() << why;     \
  } while (0)

inline Tensor random_tensor(const Shape& s, uint64_t seed, float scale = 1.0f) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = scale * static_cast<float>(g.normal());
  return Tensor::from_vector(s, v);
}

// max |got - want| / max(max |want|, 1e-6), in logical order, any device/dtype/layout.
inline double rel_error(const Tensor& got, const Tensor& want) {
  const auto a = got.to_vector(), b = want.to_vector();
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 1e-6;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// Cosine of the angle between two tensors' values: 1 for the same direction. Robust to
// the rounding noise of low precision where sums cancel, and still far from 1 for a
// gradient that is wrong.
inline double cosine(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector(), y = b.to_vector();
  double xy = 0, xx = 0, yy = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    xy += static_cast<double>(x[i]) * y[i];
    xx += static_cast<double>(x[i]) * x[i];
    yy += static_cast<double>(y[i]) * y[i];
  }
  return xx == 0 && yy == 0 ? 1.0 : xy / std::sqrt(std::max(xx * yy, 1e-300));
}

class PrecisionScope {
 public:
  explicit PrecisionScope(Precision p) : previous_(precision()) { set_precision(p); }
  ~PrecisionScope() { set_precision(previous_); }

 private:
  Precision previous_;
};

// Relative error bounds per precision: strict fp32 differs from the CPU only in the
// order of summation; TF32 keeps 10 mantissa bits, bf16 7.
inline double tolerance(Precision p, double fp32 = 1e-4) {
  switch (p) {
    case Precision::fp32:
      return fp32;
    case Precision::tf32:
      return 4e-3;
    case Precision::bf16:
      return 3e-2;
  }
  return fp32;
}

}  // namespace dpb::test
