// Optimizer updates as single fused loops over a parameter (PyTorch's formulas). They
// stream every parameter, its gradient and state once a step: built for AVX-512, AVX2 and
// the x86-64 baseline, the best the processor runs chosen when the program loads
// (the rest of the build targets the baseline, so that one binary runs everywhere).
#include <cmath>

#include "engine/backend/cpu/cpu_ops.h"

namespace dpb::cpu {

namespace {

#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define DPB_ISA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DPB_ISA_CLONES
#endif

// p -= lr * d with d = g + wd * p (and momentum), the branches hoisted out of the loops.
DPB_ISA_CLONES void sgd_plain(float* __restrict p, const float* __restrict g, int64_t n, float lr, float wd) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
}

DPB_ISA_CLONES void sgd_momentum(float* __restrict p, const float* __restrict g, float* __restrict b, int64_t n,
                                 float lr, float wd, float momentum, float keep, bool first, bool nesterov) {
  if (first) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
    for (int64_t i = 0; i < n; ++i) {
      const float d = g[i] + wd * p[i];
      b[i] = d;
      p[i] -= lr * (nesterov ? d + momentum * d : d);
    }
    return;
  }
  if (nesterov) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
    for (int64_t i = 0; i < n; ++i) {
      const float d = g[i] + wd * p[i];
      const float nb = momentum * b[i] + keep * d;
      b[i] = nb;
      p[i] -= lr * (d + momentum * nb);
    }
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    const float nb = momentum * b[i] + keep * (g[i] + wd * p[i]);
    b[i] = nb;
    p[i] -= lr * nb;
  }
}

}  // namespace

void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdHyper& h, bool first) {
  const int64_t n = param.numel();
  if (h.momentum == 0.0f) {
    sgd_plain(param.data(), grad.data(), n, h.lr, h.weight_decay);
    return;
  }
  sgd_momentum(param.data(), grad.data(), buf.data(), n, h.lr, h.weight_decay, h.momentum, 1.0f - h.dampening, first,
               h.nesterov);
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
