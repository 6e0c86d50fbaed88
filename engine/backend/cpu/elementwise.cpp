// Element-wise loops over stored elements (residual add, gradient accumulation,
// scaling; operands share a layout, zero padding stays zero). Each runs on the
// calling thread's OpenMP budget, i.e. the logical device's threads.
#include "engine/backend/cpu/cpu_ops.h"

namespace dpb::cpu {

namespace {
constexpr int64_t kParallelThreshold = 1 << 15;
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = a.storage_numel();
  const float* pa = a.data();
  const float* pb = b.data();
  float* po = out.data();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
}

void axpy(float alpha, const Tensor& x, Tensor& acc) {
  const int64_t n = x.storage_numel();
  const float* px = x.data();
  float* pa = acc.data();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) pa[i] += alpha * px[i];
}

void scale(Tensor& x, float alpha) {
  const int64_t n = x.storage_numel();
  float* p = x.data();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) p[i] *= alpha;
}

double sum_squares(const Tensor& x) {
  const int64_t n = x.storage_numel();
  const float* p = x.data();
  double s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(p[i]) * p[i];
  return s;
}

}  // namespace dpb::cpu
