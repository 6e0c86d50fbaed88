#pragma once
// What the .cu files share: launch geometry, float/bfloat16 loads and stores, the
// launch check.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <stdexcept>
#include <string>

namespace dpb::cuda::k {

constexpr int kBlock = 256;

inline unsigned grid_for(int64_t n, int block = kBlock) {
  const int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 65535 * 64 ? (blocks > 0 ? blocks : 1) : 65535 * 64);
}

// Launch errors surface at the launch, with the kernel's name (the CHECK family lives in
// engine headers the .cu files do not include; the caller's DPB check adds the context).
inline void check_launch(const char* kernel) {
  const cudaError_t s = cudaPeekAtLastError();
  if (s != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(s) + " (" + cudaGetErrorString(s) +
                             ") launching " + kernel);
  }
}

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16(v); }

#define DPB_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// Calls f.template operator()<T>() with T = float or __nv_bfloat16.
template <typename F>
void with_type(bool bf16, F&& f) {
  if (bf16) f(static_cast<__nv_bfloat16*>(nullptr));
  else f(static_cast<float*>(nullptr));
}

}  // namespace dpb::cuda::k

namespace dpb::cuda::k {

// Sum of v over the block (all threads get it); blockDim.x a multiple of 32, <= 1024.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // partial may still be read from a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? partial[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Offset of element (n, c, hw) of an (N, C, HW) tensor in either layout.
__device__ __forceinline__ int64_t at(bool nhwc, int64_t n, int64_t c, int64_t hw, int64_t C, int64_t HW) {
  return nhwc ? (n * HW + hw) * C + c : (n * C + c) * HW + hw;
}

}  // namespace dpb::cuda::k
