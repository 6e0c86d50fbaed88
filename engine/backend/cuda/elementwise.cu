// Element-wise kernels: residual add, gradient accumulation, scaling.
#include <cuda_runtime.h>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/runtime.h"

namespace dpb::cuda {

namespace {
constexpr int kBlock = 256;

inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < 65535 * 32 ? blocks : 65535 * 32);
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void axpy_kernel(float alpha, const float* x, float* acc, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc[i] += alpha * x[i];
}

__global__ void scale_kernel(float* x, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= alpha;
}
}  // namespace

void add(int index, const float* a, const float* b, float* out, int64_t n) {
  if (n == 0) return;
  DPB_CUDA_CHECK(cudaSetDevice(index));
  add_kernel<<<grid_for(n), kBlock>>>(a, b, out, n);
  DPB_CUDA_CHECK_LAUNCH();
}

void axpy(int index, float alpha, const float* x, float* acc, int64_t n) {
  if (n == 0) return;
  DPB_CUDA_CHECK(cudaSetDevice(index));
  axpy_kernel<<<grid_for(n), kBlock>>>(alpha, x, acc, n);
  DPB_CUDA_CHECK_LAUNCH();
}

void scale(int index, float* x, float alpha, int64_t n) {
  if (n == 0) return;
  DPB_CUDA_CHECK(cudaSetDevice(index));
  scale_kernel<<<grid_for(n), kBlock>>>(x, alpha, n);
  DPB_CUDA_CHECK_LAUNCH();
}

}  // namespace dpb::cuda
