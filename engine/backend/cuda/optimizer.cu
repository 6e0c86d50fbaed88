// Fused optimizer steps (one kernel reads the gradient and updates parameter and state
// in one pass), with PyTorch's update rules (torch.optim.SGD, Adam, AdamW).
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace dpb::cuda::k {

namespace {

__global__ void sgd_kernel(float* p, const float* g, float* buf, int64_t n, SgdArgs a) {
  DPB_GRID_STRIDE(i, n) {
    float d = g[i];
    if (a.weight_decay != 0.0f) d += a.weight_decay * p[i];
    if (a.momentum != 0.0f) {
      const float b = a.first ? d : a.momentum * buf[i] + (1.0f - a.dampening) * d;
      buf[i] = b;
      d = a.nesterov ? d + a.momentum * b : b;
    }
    p[i] -= a.lr * d;
  }
}

__global__ void adam_kernel(float* p, const float* g, float* m, float* v, int64_t n, AdamArgs a) {
  DPB_GRID_STRIDE(i, n) {
    float d = g[i];
    if (a.weight_decay != 0.0f) {
      if (a.decoupled) p[i] *= 1.0f - a.lr * a.weight_decay;
      else d += a.weight_decay * p[i];
    }
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * d;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * d * d;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / sqrtf(a.bias_correction2) + a.eps;
    p[i] -= (a.lr / a.bias_correction1) * mi / denom;
  }
}

}  // namespace

void sgd(cudaStream_t s, float* param, const float* grad, float* buf, int64_t n, const SgdArgs& a) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n), kBlock, 0, s>>>(param, grad, buf, n, a);
  check_launch("sgd");
}

void adam(cudaStream_t s, float* param, const float* grad, float* m, float* v, int64_t n, const AdamArgs& a) {
  if (n == 0) return;
  adam_kernel<<<grid_for(n), kBlock, 0, s>>>(param, grad, m, v, n, a);
  check_launch("adam");
}

}  // namespace dpb::cuda::k
