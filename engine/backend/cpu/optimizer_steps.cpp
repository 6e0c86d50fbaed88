// Optimizer updates as single fused loops over a parameter (PyTorch's formulas). They
// stream every parameter, its gradient and state once a step: each thread's share is a
// kernel built for AVX-512, AVX2 and the x86-64 baseline, the one to run chosen at run
// time (simd.h; the rest of the build targets the baseline, so that one binary runs
// everywhere).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/simd.h"

namespace dpb::cpu {

namespace {

// p -= lr * d with d = g + wd * p (and momentum), the branches hoisted out of the loops.
DPB_SIMD_INLINE void sgd_plain_body(float* __restrict p, const float* __restrict g, int64_t n, float lr, float wd) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
}
DPB_SIMD_KERNEL(void, sgd_plain, (float* __restrict p, const float* __restrict g, int64_t n, float lr, float wd),
                (p, g, n, lr, wd))

DPB_SIMD_INLINE void sgd_momentum_body(float* __restrict p, const float* __restrict g, float* __restrict b, int64_t n,
                                       float lr, float wd, float momentum, float keep, bool first, bool nesterov) {
  if (first) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float d = g[i] + wd * p[i];
      b[i] = d;
      p[i] -= lr * (nesterov ? d + momentum * d : d);
    }
    return;
  }
  if (nesterov) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float d = g[i] + wd * p[i];
      const float nb = momentum * b[i] + keep * d;
      b[i] = nb;
      p[i] -= lr * (d + momentum * nb);
    }
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float nb = momentum * b[i] + keep * (g[i] + wd * p[i]);
    b[i] = nb;
    p[i] -= lr * nb;
  }
}
DPB_SIMD_KERNEL(void, sgd_momentum,
                (float* __restrict p, const float* __restrict g, float* __restrict b, int64_t n, float lr, float wd,
                 float momentum, float keep, bool first, bool nesterov),
                (p, g, b, n, lr, wd, momentum, keep, first, nesterov))

// Adam and AdamW (decay = 1 - lr * weight_decay, the decoupled form; wd the coupled one):
// PyTorch's formulas, one pass over the parameter, its gradient and both moments.
DPB_SIMD_INLINE void adam_loop_body(float* __restrict p, const float* __restrict g, float* __restrict pm,
                                    float* __restrict pv, int64_t n, float decay, float wd, float beta1, float beta2,
                                    float step_size, float bc2_sqrt, float eps) {
#pragma omp simd
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
DPB_SIMD_KERNEL(void, adam_loop,
                (float* __restrict p, const float* __restrict g, float* __restrict pm, float* __restrict pv, int64_t n,
                 float decay, float wd, float beta1, float beta2, float step_size, float bc2_sqrt, float eps),
                (p, g, pm, pv, n, decay, wd, beta1, beta2, step_size, bc2_sqrt, eps))

// f(begin, count) over [0, n) in one contiguous share per thread (as schedule(static)
// splits a loop), on the calling thread alone below 32 Ki elements.
template <class F>
void in_shares(int64_t n, F&& f) {
  const int64_t threads = n > (1 << 15) ? omp_get_max_threads() : 1;
  const int64_t share = (n + threads - 1) / threads;
#pragma omp parallel for schedule(static) if (threads > 1)
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = t * share;
    if (begin < n) f(begin, std::min(share, n - begin));
  }
}

}  // namespace

void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdHyper& h, bool first) {
  const int64_t n = param.numel();
  if (h.momentum == 0.0f) {
    float *p = param.data();
    const float* g = grad.data();
    in_shares(n, [&](int64_t at, int64_t k) { sgd_plain(p + at, g + at, k, h.lr, h.weight_decay); });
    return;
  }
  float *p = param.data(), *b = buf.data();
  const float* g = grad.data();
  in_shares(n, [&](int64_t at, int64_t k) {
    sgd_momentum(p + at, g + at, b + at, k, h.lr, h.weight_decay, h.momentum, 1.0f - h.dampening, first, h.nesterov);
  });
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamHyper& h, int64_t step) {
  const float bc1 = 1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(step)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(step)));
  const float decay = h.decoupled ? 1.0f - h.lr * h.weight_decay : 1.0f, wd = h.decoupled ? 0.0f : h.weight_decay;
  float *p = param.data(), *pm = m.data(), *pv = v.data();
  const float* g = grad.data();
  in_shares(param.numel(), [&](int64_t at, int64_t k) {
    adam_loop(p + at, g + at, pm + at, pv + at, k, decay, wd, h.beta1, h.beta2, h.lr / bc1, std::sqrt(bc2), h.eps);
  });
}

}  // namespace dpb::cpu
