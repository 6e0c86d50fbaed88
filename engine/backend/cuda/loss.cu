// Losses: softmax cross-entropy (one warp per row, log-sum-exp in fp32 whatever the
// logits' dtype; per-row results summed by one block in a fixed order, so the loss is
// the same bits on every run) and mean squared error. Totals go to a small device
// buffer the caller reads once, so a step synchronises once for its loss.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace dpb::cuda::k {

namespace {

// A warp's row of C logits: its max, the first column holding it, and the sum of
// exp(z - max), in every lane.
template <typename T>
__device__ void warp_row_stats(const T* z, int64_t C, int lane, float& mx, int64_t& arg, float& sum) {
  mx = -INFINITY;
  arg = 0;
  for (int64_t j = lane; j < C; j += 32) {
    const float v = load(z, j);
    if (v > mx) {
      mx = v;
      arg = j;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, mx, o);
    const int64_t oa = __shfl_xor_sync(0xffffffffu, arg, o);
    if (om > mx || (om == mx && oa < arg)) {
      mx = om;
      arg = oa;
    }
  }
  sum = 0.0f;
  for (int64_t j = lane; j < C; j += 32) sum += __expf(load(z, j) - mx);
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
}

// Per row: row_loss[row] and row_flag[row] = 1 correct, 0 wrong, 2 label out of range.
template <typename T>
__global__ void xent_kernel(const T* logits, const int32_t* labels, T* dlogits, int64_t N, int64_t C,
                            float* row_loss, int32_t* row_flag) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  if (row >= N) return;
  const T* z = logits + row * C;
  const int32_t y = labels[row];
  float mx = 0.0f, sum = 0.0f;
  int64_t arg = 0;
  warp_row_stats(z, C, lane, mx, arg, sum);
  const float log_sum = __logf(sum);
  const bool valid = y >= 0 && y < C;
  if (lane == 0) {
    row_loss[row] = valid ? log_sum - (load(z, y) - mx) : 0.0f;
    row_flag[row] = valid ? (arg == y ? 1 : 0) : 2;
  }
  if (dlogits) {
    const float inv_n = 1.0f / static_cast<float>(N);
    T* dz = dlogits + row * C;
    for (int64_t j = lane; j < C; j += 32) {
      const float p = __expf(load(z, j) - mx - log_sum);
      store(dz, j, (p - (valid && j == y ? 1.0f : 0.0f)) * inv_n);
    }
  }
}

// One block: out[0] = sum of row_loss, out_i[0] = correct rows, out_i[1] = bad labels.
__global__ void xent_total_kernel(const float* row_loss, const int32_t* row_flag, int64_t N, float* out,
                                  int32_t* out_i) {
  float loss = 0.0f, correct = 0.0f, bad = 0.0f;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    loss += row_loss[i];
    correct += row_flag[i] == 1 ? 1.0f : 0.0f;
    bad += row_flag[i] == 2 ? 1.0f : 0.0f;
  }
  loss = block_sum(loss);
  correct = block_sum(correct);
  bad = block_sum(bad);
  if (threadIdx.x == 0) {
    out[0] = loss;
    out_i[0] = static_cast<int32_t>(correct);
    out_i[1] = static_cast<int32_t>(bad);
  }
}

// One warp per row of this rank's part of the classes: max, sum of exp(z - max), the
// label's logit where the label is in the part (else 0) and the first argmax's class.
template <typename T>
__global__ void xent_part_stats_kernel(const T* logits, const int32_t* labels, int64_t N, int64_t C, int64_t first,
                                       float* stats) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  if (row >= N) return;
  const T* z = logits + row * C;
  float mx = 0.0f, sum = 0.0f;
  int64_t arg = 0;
  warp_row_stats(z, C, lane, mx, arg, sum);
  if (lane == 0) {
    const int64_t y = labels[row] - first;
    float* st = stats + row * 4;
    st[0] = mx;
    st[1] = sum;
    st[2] = y >= 0 && y < C ? load(z, y) : 0.0f;
    st[3] = static_cast<float>(first + arg);
  }
}

// One warp per row: the whole row's max, log-sum-exp and argmax from every rank's stats
// (W, N, 4); row_loss/row_flag as xent_kernel's; the gradient of this rank's columns.
template <typename T>
__global__ void xent_part_finish_kernel(const T* logits, const int32_t* labels, int64_t N, int64_t C, int64_t first,
                                        int64_t classes, const float* stats, int64_t W, T* dlogits, float* row_loss,
                                        int32_t* row_flag) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  if (row >= N) return;
  float mx = stats[row * 4];
  float arg = stats[row * 4 + 3];
  float label_logit = 0.0f;
  for (int64_t w = 0; w < W; ++w) {
    const float* st = stats + (w * N + row) * 4;
    if (st[0] > mx) {
      mx = st[0];
      arg = st[3];
    }
    label_logit += st[2];
  }
  float sum = 0.0f;
  for (int64_t w = 0; w < W; ++w) {
    const float* st = stats + (w * N + row) * 4;
    sum += st[1] * __expf(st[0] - mx);
  }
  const float log_sum = __logf(sum);
  const int32_t y = labels[row];
  const bool valid = y >= 0 && y < classes;
  if (lane == 0) {
    row_loss[row] = valid ? log_sum - (label_logit - mx) : 0.0f;
    row_flag[row] = valid ? (static_cast<int64_t>(arg) == y ? 1 : 0) : 2;
  }
  if (dlogits) {
    const float inv_n = 1.0f / static_cast<float>(N);
    const T* z = logits + row * C;
    T* dz = dlogits + row * C;
    for (int64_t j = lane; j < C; j += 32) {
      const float p = __expf(load(z, j) - mx - log_sum);
      store(dz, j, (p - (valid && first + j == y ? 1.0f : 0.0f)) * inv_n);
    }
  }
}

template <typename T>
__global__ void mse_kernel(const T* pred, const float* target, T* dpred, int64_t n, float* out) {
  float acc = 0.0f;
  const float g = 2.0f / static_cast<float>(n);
  DPB_GRID_STRIDE(i, n) {
    const float d = load(pred, i) - target[i];
    acc += d * d;
    if (dpred) store(dpred, i, g * d);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) atomicAdd(out, acc);
}

}  // namespace

void softmax_cross_entropy(cudaStream_t s, const void* logits, bool bf16, const int32_t* labels, void* dlogits,
                           int64_t N, int64_t C, float* out, int32_t* out_i, float* scratch) {
  if (N == 0) return;
  float* row_loss = scratch;
  auto* row_flag = reinterpret_cast<int32_t*>(scratch + N);
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    xent_kernel<<<grid_for(N * 32), kBlock, 0, s>>>(static_cast<const T*>(logits), labels, static_cast<T*>(dlogits),
                                                     N, C, row_loss, row_flag);
  });
  xent_total_kernel<<<1, kBlock, 0, s>>>(row_loss, row_flag, N, out, out_i);
  check_launch("softmax_cross_entropy");
}

void cross_entropy_part_stats(cudaStream_t s, const void* logits, bool bf16, const int32_t* labels, int64_t N,
                              int64_t C, int64_t first, float* stats) {
  if (N == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    xent_part_stats_kernel<<<grid_for(N * 32), kBlock, 0, s>>>(static_cast<const T*>(logits), labels, N, C, first,
                                                                stats);
  });
  check_launch("cross_entropy_part_stats");
}

void cross_entropy_part_finish(cudaStream_t s, const void* logits, bool bf16, const int32_t* labels, int64_t N,
                               int64_t C, int64_t first, int64_t classes, const float* all_stats, int64_t W,
                               void* dlogits, float* out, int32_t* out_i, float* scratch) {
  if (N == 0) return;
  float* row_loss = scratch;
  auto* row_flag = reinterpret_cast<int32_t*>(scratch + N);
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    xent_part_finish_kernel<<<grid_for(N * 32), kBlock, 0, s>>>(static_cast<const T*>(logits), labels, N, C, first,
                                                                 classes, all_stats, W, static_cast<T*>(dlogits),
                                                                 row_loss, row_flag);
  });
  xent_total_kernel<<<1, kBlock, 0, s>>>(row_loss, row_flag, N, out, out_i);
  check_launch("cross_entropy_part_finish");
}

void mse(cudaStream_t s, const void* pred, bool bf16, const float* target, void* dpred, int64_t n, float* out) {
  if (n == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    mse_kernel<<<grid_for(n), kBlock, 0, s>>>(static_cast<const T*>(pred), target, static_cast<T*>(dpred), n, out);
  });
  check_launch("mse");
}

}  // namespace dpb::cuda::k
