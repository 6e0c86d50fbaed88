#pragma once
// exp and tanh for the CPU kernels' inner loops, written so that `#pragma omp simd`
// vectorizes them (no calls into libm, whose scalar expf/tanhf would run one element at
// a time): Cody-Waite range reduction and a degree-6 polynomial (Cephes' expf
// coefficients), within 2 ulp of expf over the float range; tanh from exp, within a
// few ulp away from zero and exact to first order near it.
#include <cstdint>
#include <cstring>

// The hot element-wise loops that use these are written once and compiled for AVX-512,
// AVX2 and the baseline, the one to run chosen at run time (simd.h); they vectorize
// because the CPU kernels build with -fno-trapping-math.
#include "engine/backend/cpu/simd.h"

namespace dpb::cpu {

DPB_SIMD_INLINE float fast_exp(float x) {
  x = x < -87.33654f ? -87.33654f : x;
  x = x > 88.72283f ? 88.72283f : x;
  // round(x / ln 2) to nearest with the 1.5 x 2^23 trick (vectorizes without SSE4.1)
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;                               // ln 2, split for exactness
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

DPB_SIMD_INLINE float fast_tanh(float x) {
  // tanh(x) = 1 - 2 / (exp(2x) + 1); for small |x| the series, where that cancels.
  const float ax = __builtin_fabsf(x);
  const float x2 = x * x;
  const float small = x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315))));
  const float big = __builtin_copysignf(1.0f - 2.0f / (fast_exp(2.0f * ax) + 1.0f), x);
  return ax < 0.125f ? small : big;
}

}  // namespace dpb::cpu
