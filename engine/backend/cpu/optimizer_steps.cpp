// Optimizer updates as single fused loops over a parameter (PyTorch's formulas).
#include <cmath>

#include "engine/backend/cpu/cpu_ops.h"

namespace dpb::cpu {

void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdHyper& h, bool first) {
  const int64_t n = param.numel();
  float* p = param.data();
  const float* g = grad.data();
  float* b = h.momentum != 0.0f ? buf.data() : nullptr;
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i] + h.weight_decay * p[i];
    if (b) {
      b[i] = first ? d : h.momentum * b[i] + (1.0f - h.dampening) * d;
      d = h.nesterov ? d + h.momentum * b[i] : b[i];
    }
    p[i] -= h.lr * d;
  }
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamHyper& h, int64_t step) {
  const int64_t n = param.numel();
  float* p = param.data();
  const float* g = grad.data();
  float* pm = m.data();
  float* pv = v.data();
  const float bc1 = 1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(step)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(step)));
  const float step_size = h.lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    if (h.decoupled) {
      p[i] *= 1.0f - h.lr * h.weight_decay;
    } else {
      gi += h.weight_decay * p[i];
    }
    pm[i] = h.beta1 * pm[i] + (1.0f - h.beta1) * gi;
    pv[i] = h.beta2 * pv[i] + (1.0f - h.beta2) * gi * gi;
    const float denom = std::sqrt(pv[i]) / bc2_sqrt + h.eps;
    p[i] -= step_size * pm[i] / denom;
  }
}

}  // namespace dpb::cpu
