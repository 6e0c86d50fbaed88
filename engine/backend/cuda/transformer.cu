// The transformer's kernels: embeddings, layer norm, tanh GELU, the causal softmax and
// its backward, head (un)permutes for attention, and the sum of squares for gradient
// clipping. Activations are float or bfloat16 (math in float); parameters, their
// gradients and the saved statistics float.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace dpb::cuda::k {

namespace {

template <typename T>
__global__ void embedding_forward_kernel(const int32_t* tok, const float* table, T* y, int64_t rows, int64_t C,
                                         int64_t V, int64_t first) {
  DPB_GRID_STRIDE(i, rows * C) {
    const int64_t r = i / C, c = i % C;
    const int64_t t = tok[r] - first;
    // Tokens are checked on the host when batches are made; one out of range (or in
    // another rank's part of the vocabulary) reads nothing.
    store(y, i, t >= 0 && t < V ? table[t * C + c] : 0.0f);
  }
}

template <typename T>
__global__ void embedding_backward_kernel(const int32_t* tok, const T* dy, float* dtable, int64_t rows, int64_t C,
                                          int64_t V, int64_t first) {
  DPB_GRID_STRIDE(i, rows * C) {
    const int64_t r = i / C, c = i % C;
    const int64_t t = tok[r] - first;
    if (t >= 0 && t < V) atomicAdd(dtable + t * C + c, load(dy, i));
  }
}

template <typename T>
__global__ void position_forward_kernel(const T* x, const float* table, T* y, int64_t N, int64_t TC) {
  DPB_GRID_STRIDE(i, N * TC) store(y, i, load(x, i) + table[i % TC]);
}

// dtable[t, c] (+)= sum over n of dy[n, t, c]: one thread per (t, c).
template <typename T>
__global__ void position_backward_kernel(const T* dy, float* dtable, int64_t N, int64_t TC, bool accumulate) {
  DPB_GRID_STRIDE(i, TC) {
    float s = accumulate ? dtable[i] : 0.0f;
    for (int64_t n = 0; n < N; ++n) s += load(dy, n * TC + i);
    dtable[i] = s;
  }
}

// One block per row.
template <typename T>
__global__ void layernorm_forward_kernel(const T* x, const float* gamma, const float* beta, T* y, float* mean,
                                         float* rstd, int64_t C, float eps) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * C;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += load(xr, c);
  const float mu = block_sum(s) / static_cast<float>(C);
  float v = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = load(xr, c) - mu;
    v += d * d;
  }
  const float r = rsqrtf(block_sum(v) / static_cast<float>(C) + eps);
  T* yr = y + row * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) store(yr, c, (load(xr, c) - mu) * r * gamma[c] + beta[c]);
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
}

// dx, one block per row.
template <typename T>
__global__ void layernorm_backward_data_kernel(const T* x, const T* dy, const float* gamma, const float* mean,
                                               const float* rstd, T* dx, int64_t C) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * C;
  const T* gr = dy + row * C;
  const float mu = mean[row], r = rstd[row];
  float sd = 0.0f, sdx = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float dn = load(gr, c) * gamma[c];
    sd += dn;
    sdx += dn * (load(xr, c) - mu) * r;
  }
  sd = block_sum(sd) / static_cast<float>(C);
  sdx = block_sum(sdx) / static_cast<float>(C);
  T* o = dx + row * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (load(xr, c) - mu) * r;
    store(o, c, (load(gr, c) * gamma[c] - sd - xhat * sdx) * r);
  }
}

// dgamma, dbeta: one thread per column, over the rows (deterministic).
template <typename T>
__global__ void layernorm_backward_params_kernel(const T* x, const T* dy, const float* mean, const float* rstd,
                                                 float* dgamma, float* dbeta, int64_t M, int64_t C, bool accumulate) {
  DPB_GRID_STRIDE(c, C) {
    float sg = accumulate ? dgamma[c] : 0.0f, sb = accumulate ? dbeta[c] : 0.0f;
    for (int64_t m = 0; m < M; ++m) {
      const float g = load(dy, m * C + c);
      sg += g * (load(x, m * C + c) - mean[m]) * rstd[m];
      sb += g;
    }
    dgamma[c] = sg;
    dbeta[c] = sb;
  }
}

constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCube = 0.044715f;

template <typename T>
__global__ void gelu_forward_kernel(const T* x, T* y, int64_t n) {
  DPB_GRID_STRIDE(i, n) {
    const float v = load(x, i);
    store(y, i, 0.5f * v * (1.0f + tanhf(kGeluScale * (v + kGeluCube * v * v * v))));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, int64_t n) {
  DPB_GRID_STRIDE(i, n) {
    const float v = load(x, i);
    const float th = tanhf(kGeluScale * (v + kGeluCube * v * v * v));
    const float d = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * kGeluCube * v * v);
    store(dx, i, load(dy, i) * d);
  }
}

// qkv (N, T, 3C) -> q, k, v (N, H, T, D) each; and back (accumulate never needed).
template <typename T>
__global__ void split_heads_kernel(const T* qkv, T* q, T* k, T* v, int64_t N, int64_t T_, int64_t H, int64_t D) {
  const int64_t C = H * D;
  DPB_GRID_STRIDE(i, N * H * T_ * D) {
    const int64_t d = i % D, t = (i / D) % T_, h = (i / (D * T_)) % H, n = i / (D * T_ * H);
    const int64_t src = (n * T_ + t) * 3 * C + h * D + d;
    q[i] = qkv[src];
    k[i] = qkv[src + C];
    v[i] = qkv[src + 2 * C];
  }
}

template <typename T>
__global__ void merge_heads_kernel(const T* q, const T* k, const T* v, T* qkv, int64_t N, int64_t T_, int64_t H,
                                   int64_t D) {
  const int64_t C = H * D;
  DPB_GRID_STRIDE(i, N * H * T_ * D) {
    const int64_t d = i % D, t = (i / D) % T_, h = (i / (D * T_)) % H, n = i / (D * T_ * H);
    const int64_t dst = (n * T_ + t) * 3 * C + h * D + d;
    qkv[dst] = q[i];
    qkv[dst + C] = k[i];
    qkv[dst + 2 * C] = v[i];
  }
}

// y_h (N, H, T, D) -> y (N, T, C), or the reverse with kToHeads.
template <typename T, bool kToHeads>
__global__ void heads_layout_kernel(const T* src, T* dst, int64_t N, int64_t T_, int64_t H, int64_t D) {
  const int64_t C = H * D;
  DPB_GRID_STRIDE(i, N * H * T_ * D) {
    const int64_t d = i % D, t = (i / D) % T_, h = (i / (D * T_)) % H, n = i / (D * T_ * H);
    const int64_t flat = (n * T_ + t) * C + h * D + d;
    if constexpr (kToHeads) dst[i] = src[flat];
    else dst[flat] = src[i];
  }
}

// Causal softmax of rows of T scores in place, one warp per row: row r is query t = r % T.
template <typename T>
__global__ void causal_softmax_kernel(T* p, int64_t rows, int64_t T_) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; row < rows; row += warps) {
  const int64_t t = row % T_;
  T* x = p + row * T_;
  float mx = -INFINITY;
  for (int64_t j = lane; j <= t; j += 32) mx = fmaxf(mx, load(x, j));
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) sum += __expf(load(x, j) - mx);
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float inv = 1.0f / sum;
  for (int64_t j = lane; j < T_; j += 32) store(x, j, j <= t ? __expf(load(x, j) - mx) * inv : 0.0f);
  }
}

// dscores = p * (dp - sum_j p dp), in place of dp; zero above the diagonal.
template <typename T>
__global__ void causal_softmax_backward_kernel(const T* p, T* dp, int64_t rows, int64_t T_) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; row < rows; row += warps) {
  const int64_t t = row % T_;
  const T* pr = p + row * T_;
  T* dr = dp + row * T_;
  float dot = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) dot += load(pr, j) * load(dr, j);
  for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  for (int64_t j = lane; j < T_; j += 32) store(dr, j, j <= t ? load(pr, j) * (load(dr, j) - dot) : 0.0f);
  }
}

__global__ void sum_squares_kernel(const float* x, int64_t n, double* out) {
  float s = 0.0f;
  DPB_GRID_STRIDE(i, n) s += x[i] * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(out, static_cast<double>(s));
}

template <typename F>
void typed(bool bf16, F&& f) {
  with_type(bf16, [&](auto* t) { f(t); });
}

}  // namespace

void embedding_forward(cudaStream_t s, const int32_t* tokens, const float* table, void* y, bool bf16, int64_t rows,
                       int64_t C, int64_t V, int64_t first) {
  typed(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    embedding_forward_kernel<<<grid_for(rows * C), kBlock, 0, s>>>(tokens, table, static_cast<T*>(y), rows, C, V,
                                                                    first);
  });
  check_launch("embedding_forward");
}

void embedding_backward(cudaStream_t s, const int32_t* tokens, const void* dy, bool bf16, float* dtable, int64_t rows,
                        int64_t C, int64_t V, int64_t first, bool accumulate) {
  if (!accumulate) cudaMemsetAsync(dtable, 0, static_cast<size_t>(V * C) * sizeof(float), s);
  typed(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    embedding_backward_kernel<<<grid_for(rows * C), kBlock, 0, s>>>(tokens, static_cast<const T*>(dy), dtable, rows,
                                                                     C, V, first);
  });
  check_launch("embedding_backward");
}

void position_embedding_forward(cudaStream_t s, const void* x, const float* table, void* y, bool bf16, int64_t N,
                                int64_t TC) {
  typed(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    position_forward_kernel<<<grid_for(N * TC), kBlock, 0, s>>>(static_cast<const T*>(x), table, static_cast<T*>(y),
                                                                 N, TC);
  });
  check_launch("position_embedding_forward");
}

void position_embedding_backward(cudaStream_t s, const void* dy, bool bf16, float* dtable, int64_t N, int64_t TC,
                                 int64_t PC, bool accumulate) {
  if (!accumulate && PC > TC) cudaMemsetAsync(dtable + TC, 0, static_cast<size_t>(PC - TC) * sizeof(float), s);
  typed(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    position_backward_kernel<<<grid_for(TC), kBlock, 0, s>>>(static_cast<const T*>(dy), dtable, N, TC, accumulate);
  });
  check_launch("position_embedding_backward");
}

void layernorm_forward(cudaStream_t s, const void* x, const float* gamma, const float* beta, void* y, bool bf16,
                       float* mean, float* rstd, int64_t M, int64_t C, float eps) {
  if (M == 0) return;
  typed(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    layernorm_forward_kernel<<<static_cast<unsigned>(M), kBlock, 0, s>>>(static_cast<const T*>(x), gamma, beta,
                                                                          static_cast<T*>(y), mean, rstd, C, eps);
  });
  check_launch("layernorm_forward");
}

void layernorm_backward(cudaStream_t s, const void* x, const void* dy, bool bf16, const float* gamma,
                        const float* mean, const float* rstd, void* dx, float* dgamma, float* dbeta, int64_t M,
                        int64_t C, bool accumulate) {
  if (M == 0) return;
  typed(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    if (dx)
      layernorm_backward_data_kernel<<<static_cast<unsigned>(M), kBlock, 0, s>>>(
          static_cast<const T*>(x), static_cast<const T*>(dy), gamma, mean, rstd, static_cast<T*>(dx), C);
    layernorm_backward_params_kernel<<<grid_for(C), kBlock, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(dy), mean, rstd, dgamma, dbeta, M, C, accumulate);
  });
  check_launch("layernorm_backward");
}

void gelu_forward(cudaStream_t s, const void* x, void* y, bool bf16, int64_t n) {
  if (n == 0) return;
  typed(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    gelu_forward_kernel<<<grid_for(n), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
  });
  check_launch("gelu_forward");
}

void gelu_backward(cudaStream_t s, const void* x, const void* dy, void* dx, bool bf16, int64_t n) {
  if (n == 0) return;
  typed(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    gelu_backward_kernel<<<grid_for(n), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(dy),
                                                         static_cast<T*>(dx), n);
  });
  check_launch("gelu_backward");
}

void split_heads(cudaStream_t s, const void* qkv, void* q, void* k, void* v, bool bf16, int64_t N, int64_t T,
                 int64_t H, int64_t D) {
  typed(bf16, [&](auto* t) {
    using E = std::remove_pointer_t<decltype(t)>;
    split_heads_kernel<<<grid_for(N * H * T * D), kBlock, 0, s>>>(static_cast<const E*>(qkv), static_cast<E*>(q),
                                                                   static_cast<E*>(k), static_cast<E*>(v), N, T, H, D);
  });
  check_launch("split_heads");
}

void merge_heads(cudaStream_t s, const void* q, const void* k, const void* v, void* qkv, bool bf16, int64_t N,
                 int64_t T, int64_t H, int64_t D) {
  typed(bf16, [&](auto* t) {
    using E = std::remove_pointer_t<decltype(t)>;
    merge_heads_kernel<<<grid_for(N * H * T * D), kBlock, 0, s>>>(static_cast<const E*>(q), static_cast<const E*>(k),
                                                                   static_cast<const E*>(v), static_cast<E*>(qkv), N, T,
                                                                   H, D);
  });
  check_launch("merge_heads");
}

void heads_to_rows(cudaStream_t s, const void* heads, void* rows, bool bf16, int64_t N, int64_t T, int64_t H,
                   int64_t D) {
  typed(bf16, [&](auto* t) {
    using E = std::remove_pointer_t<decltype(t)>;
    heads_layout_kernel<E, false><<<grid_for(N * H * T * D), kBlock, 0, s>>>(static_cast<const E*>(heads),
                                                                              static_cast<E*>(rows), N, T, H, D);
  });
  check_launch("heads_to_rows");
}

void rows_to_heads(cudaStream_t s, const void* rows, void* heads, bool bf16, int64_t N, int64_t T, int64_t H,
                   int64_t D) {
  typed(bf16, [&](auto* t) {
    using E = std::remove_pointer_t<decltype(t)>;
    heads_layout_kernel<E, true><<<grid_for(N * H * T * D), kBlock, 0, s>>>(static_cast<const E*>(rows),
                                                                             static_cast<E*>(heads), N, T, H, D);
  });
  check_launch("rows_to_heads");
}

void causal_softmax(cudaStream_t s, void* p, bool bf16, int64_t rows, int64_t T) {
  const int64_t threads = rows * 32;
  typed(bf16, [&](auto* t) {
    using E = std::remove_pointer_t<decltype(t)>;
    causal_softmax_kernel<<<grid_for(threads), kBlock, 0, s>>>(static_cast<E*>(p), rows, T);
  });
  check_launch("causal_softmax");
}

void causal_softmax_backward(cudaStream_t s, const void* p, void* dp, bool bf16, int64_t rows, int64_t T) {
  const int64_t threads = rows * 32;
  typed(bf16, [&](auto* t) {
    using E = std::remove_pointer_t<decltype(t)>;
    causal_softmax_backward_kernel<<<grid_for(threads), kBlock, 0, s>>>(static_cast<const E*>(p),
                                                                        static_cast<E*>(dp), rows, T);
  });
  check_launch("causal_softmax_backward");
}

void sum_squares(cudaStream_t s, const float* x, int64_t n, double* out) {
  cudaMemsetAsync(out, 0, sizeof(double), s);
  if (n > 0) sum_squares_kernel<<<grid_for(n), kBlock, 0, s>>>(x, n, out);
  check_launch("sum_squares");
}

}  // namespace dpb::cuda::k
