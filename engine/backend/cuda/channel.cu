// Per-channel kernels over (N, C, HW) tensors in plain or channels-last order: bias
// add and sum, global average pooling, BatchNorm with fixed statistics.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace dpb::cuda::k {

namespace {

// One block per channel.
template <typename T>
__global__ void channel_sum_kernel(const T* x, bool nhwc, int64_t N, int64_t C, int64_t HW, float* out,
                                   bool accumulate) {
  const int64_t c = blockIdx.x;
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < N * HW; i += blockDim.x) acc += load(x, at(nhwc, i / HW, c, i % HW, C, HW));
  acc = block_sum(acc);
  if (threadIdx.x == 0) out[c] = accumulate ? out[c] + acc : acc;
}

template <typename T>
__global__ void bias_add_kernel(T* y, bool nhwc, int64_t N, int64_t C, int64_t HW, const float* b) {
  DPB_GRID_STRIDE(i, N * C * HW) {
    const int64_t c = nhwc ? i % C : (i / HW) % C;
    store(y, i, load(y, i) + b[c]);
  }
}

// One thread per (n, c).
template <typename T>
__global__ void gap_forward_kernel(const T* x, T* y, bool nhwc, int64_t N, int64_t C, int64_t HW) {
  DPB_GRID_STRIDE(i, N * C) {
    const int64_t n = i / C, c = i % C;
    float acc = 0.0f;
    for (int64_t hw = 0; hw < HW; ++hw) acc += load(x, at(nhwc, n, c, hw, C, HW));
    store(y, i, acc / static_cast<float>(HW));
  }
}

template <typename T>
__global__ void gap_backward_kernel(const T* dy, T* dx, bool nhwc, int64_t N, int64_t C, int64_t HW) {
  DPB_GRID_STRIDE(i, N * C * HW) {
    const int64_t c = nhwc ? i % C : (i / HW) % C;
    const int64_t n = i / (C * HW);
    store(dx, i, load(dy, n * C + c) / static_cast<float>(HW));
  }
}

template <typename T>
__global__ void bn_fixed_forward_kernel(const T* x, T* y, bool nhwc, int64_t N, int64_t C, int64_t HW,
                                        const float* gamma, const float* beta, const float* mean, const float* var,
                                        float eps) {
  DPB_GRID_STRIDE(i, N * C * HW) {
    const int64_t c = nhwc ? i % C : (i / HW) % C;
    const float inv = rsqrtf(var[c] + eps);
    store(y, i, (load(x, i) - mean[c]) * inv * gamma[c] + beta[c]);
  }
}

// One block per channel: the two sums, then dx for the channel's elements.
template <typename T>
__global__ void bn_fixed_backward_kernel(const T* x, const T* dy, T* dx, bool nhwc, int64_t N, int64_t C, int64_t HW,
                                         const float* gamma, const float* mean, const float* var, float eps,
                                         float* dgamma, float* dbeta, bool accumulate) {
  const int64_t c = blockIdx.x;
  const float inv = rsqrtf(var[c] + eps), m = mean[c], g = gamma[c];
  float sdy = 0.0f, sdyx = 0.0f;
  for (int64_t i = threadIdx.x; i < N * HW; i += blockDim.x) {
    const int64_t o = at(nhwc, i / HW, c, i % HW, C, HW);
    const float d = load(dy, o);
    sdy += d;
    sdyx += d * (load(x, o) - m) * inv;
  }
  sdy = block_sum(sdy);
  sdyx = block_sum(sdyx);
  if (threadIdx.x == 0) {
    dbeta[c] = accumulate ? dbeta[c] + sdy : sdy;
    dgamma[c] = accumulate ? dgamma[c] + sdyx : sdyx;
  }
  if (dx)
    for (int64_t i = threadIdx.x; i < N * HW; i += blockDim.x) {
      const int64_t o = at(nhwc, i / HW, c, i % HW, C, HW);
      store(dx, o, load(dy, o) * g * inv);
    }
}

// One block per channel, two passes over the channel: the mean, then the sum of squared
// deviations from it (no cancellation when the mean is large against the spread).
template <typename T>
__global__ void bn_stats_kernel(const T* x, bool nhwc, int64_t N, int64_t C, int64_t HW, float* mean, float* m2) {
  const int64_t c = blockIdx.x;
  __shared__ float shared_mean;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < N * HW; i += blockDim.x) s += load(x, at(nhwc, i / HW, c, i % HW, C, HW));
  s = block_sum(s);
  if (threadIdx.x == 0) shared_mean = N * HW > 0 ? s / static_cast<float>(N * HW) : 0.0f;
  __syncthreads();
  const float m = shared_mean;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < N * HW; i += blockDim.x) {
    const float d = load(x, at(nhwc, i / HW, c, i % HW, C, HW)) - m;
    ss += d * d;
  }
  ss = block_sum(ss);
  if (threadIdx.x == 0) {
    mean[c] = m;
    m2[c] = ss;
  }
}

template <typename T>
__global__ void bn_sync_correction_kernel(const T* x, T* dx, bool nhwc, int64_t N, int64_t C, int64_t HW,
                                          const float* mean, const float* var, float eps, const float* gamma,
                                          const float* mdy, const float* mdyx) {
  DPB_GRID_STRIDE(i, N * C * HW) {
    const int64_t c = nhwc ? i % C : (i / HW) % C;
    const float inv = rsqrtf(var[c] + eps);
    const float xhat = (load(x, i) - mean[c]) * inv;
    store(dx, i, load(dx, i) - gamma[c] * inv * (mdy[c] + xhat * mdyx[c]));
  }
}

__global__ void invstd_to_var_kernel(float* v, int64_t C, float eps) {
  DPB_GRID_STRIDE(i, C) v[i] = 1.0f / (v[i] * v[i]) - eps;
}

}  // namespace

void channel_sum(cudaStream_t s, const void* x, bool bf16, bool nhwc, int64_t N, int64_t C, int64_t HW, float* out,
                 bool accumulate) {
  if (C == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    channel_sum_kernel<<<static_cast<unsigned>(C), kBlock, 0, s>>>(static_cast<const T*>(x), nhwc, N, C, HW, out,
                                                                    accumulate);
  });
  check_launch("channel_sum");
}

void channel_bias_add(cudaStream_t s, void* y, bool bf16, bool nhwc, int64_t N, int64_t C, int64_t HW,
                      const float* b) {
  if (N * C * HW == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    bias_add_kernel<<<grid_for(N * C * HW), kBlock, 0, s>>>(static_cast<T*>(y), nhwc, N, C, HW, b);
  });
  check_launch("channel_bias_add");
}

void global_avgpool_forward(cudaStream_t s, const void* x, void* y, bool bf16, bool nhwc, int64_t N, int64_t C,
                            int64_t HW) {
  if (N * C == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    gap_forward_kernel<<<grid_for(N * C), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), nhwc, N, C,
                                                          HW);
  });
  check_launch("global_avgpool_forward");
}

void global_avgpool_backward(cudaStream_t s, const void* dy, void* dx, bool bf16, bool nhwc, int64_t N, int64_t C,
                             int64_t HW) {
  if (N * C * HW == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    gap_backward_kernel<<<grid_for(N * C * HW), kBlock, 0, s>>>(static_cast<const T*>(dy), static_cast<T*>(dx), nhwc,
                                                                N, C, HW);
  });
  check_launch("global_avgpool_backward");
}

void bn_fixed_forward(cudaStream_t s, const void* x, void* y, bool bf16, bool nhwc, int64_t N, int64_t C, int64_t HW,
                      const float* gamma, const float* beta, const float* mean, const float* var, float eps) {
  if (N * C * HW == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    bn_fixed_forward_kernel<<<grid_for(N * C * HW), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                     nhwc, N, C, HW, gamma, beta, mean, var, eps);
  });
  check_launch("bn_fixed_forward");
}

void bn_fixed_backward(cudaStream_t s, const void* x, const void* dy, void* dx, bool bf16, bool nhwc, int64_t N,
                       int64_t C, int64_t HW, const float* gamma, const float* mean, const float* var, float eps,
                       float* dgamma, float* dbeta, bool accumulate) {
  if (C == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    bn_fixed_backward_kernel<<<static_cast<unsigned>(C), kBlock, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx), nhwc, N, C, HW, gamma, mean, var,
        eps, dgamma, dbeta, accumulate);
  });
  check_launch("bn_fixed_backward");
}

void bn_stats(cudaStream_t s, const void* x, bool bf16, bool nhwc, int64_t N, int64_t C, int64_t HW, float* mean,
              float* m2) {
  if (C == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    bn_stats_kernel<<<static_cast<unsigned>(C), kBlock, 0, s>>>(static_cast<const T*>(x), nhwc, N, C, HW, mean, m2);
  });
  check_launch("bn_stats");
}

void bn_sync_correction(cudaStream_t s, const void* x, void* dx, bool bf16, bool nhwc, int64_t N, int64_t C,
                        int64_t HW, const float* mean, const float* var, float eps, const float* gamma,
                        const float* mean_dy, const float* mean_dy_xhat) {
  if (N * C * HW == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    bn_sync_correction_kernel<<<grid_for(N * C * HW), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(dx),
                                                                       nhwc, N, C, HW, mean, var, eps, gamma, mean_dy,
                                                                       mean_dy_xhat);
  });
  check_launch("bn_sync_correction");
}

void invstd_to_var(cudaStream_t s, float* v, int64_t C, float eps) {
  if (C == 0) return;
  invstd_to_var_kernel<<<grid_for(C), kBlock, 0, s>>>(v, C, eps);
  check_launch("invstd_to_var");
}

}  // namespace dpb::cuda::k
