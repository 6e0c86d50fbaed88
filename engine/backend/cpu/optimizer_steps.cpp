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

// Adam and AdamW (decay = 1 - lr * weight_decay, the decoupled form; wd the coupled one):
// PyTorch's formulas, one pass over the parameter, its gradient and both moments.
DPB_ISA_CLONES void adam_loop(float* __restrict p, const float* __restrict g, float* __restrict pm,
                              float* __restrict pv, int64_t n, float decay, float wd, float beta1, float beta2,
                              float step_size, float bc2_sqrt, float eps) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i] * decay;
    const float gi = g[i] + wd * pi;
    const float mi = beta1 * pm[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * pv[i] + (1.0f - beta2) * gi * gi;
    pm[i] = mi;
    pv[i] = vi;
    p[i] = pi - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
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
  const float bc1 = 1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(step)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(step)));
  adam_loop(param.data(), grad.data(), m.data(), v.data(), param.numel(), h.decoupled ? 1.0f - h.lr * h.weight_decay : 1.0f,
            h.decoupled ? 0.0f : h.weight_decay, h.beta1, h.beta2, h.lr / bc1, std::sqrt(bc2), h.eps);
}

}  // namespace dpb::cpu
