// Element-wise kernels: fill, dtype and layout conversion, residual add, gradient
// accumulation, scaling.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace dpb::cuda::k {

namespace {

template <typename T>
__global__ void fill_kernel(T* x, float v, int64_t n) {
  DPB_GRID_STRIDE(i, n) store(x, i, v);
}

template <typename S, typename D>
__global__ void cast_kernel(const S* src, D* dst, int64_t n) {
  DPB_GRID_STRIDE(i, n) store(dst, i, load(src, i));
}

// One thread per element of the destination, in the destination's order; the source
// element is found in the source's layout; with kAcc the destination is added to.
template <typename S, typename D, bool kAcc, typename I>
__global__ void convert4d_kernel(const S* src, D* dst, I C, I HW, I total, bool src_nhwc, bool dst_nhwc) {
  for (I i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += static_cast<I>(gridDim.x) * blockDim.x) {
    I n, c, hw;
    if (dst_nhwc) {
      c = i % C;
      hw = (i / C) % HW;
      n = i / (C * HW);
    } else {
      hw = i % HW;
      c = (i / HW) % C;
      n = i / (C * HW);
    }
    const I si = src_nhwc ? (n * HW + hw) * C + c : (n * C + c) * HW + hw;
    float v = load(src, si);
    if constexpr (kAcc) v += load(dst, i);
    store(dst, i, v);
  }
}

template <typename S, typename D, bool kAcc>
void launch_convert4d(cudaStream_t s, const void* src, void* dst, int64_t C, int64_t HW, int64_t total, bool src_nhwc,
                      bool dst_nhwc) {
  if (total < (int64_t{1} << 31))
    convert4d_kernel<S, D, kAcc, uint32_t><<<grid_for(total), kBlock, 0, s>>>(
        static_cast<const S*>(src), static_cast<D*>(dst), static_cast<uint32_t>(C), static_cast<uint32_t>(HW),
        static_cast<uint32_t>(total), src_nhwc, dst_nhwc);
  else
    convert4d_kernel<S, D, kAcc, int64_t><<<grid_for(total), kBlock, 0, s>>>(
        static_cast<const S*>(src), static_cast<D*>(dst), C, HW, total, src_nhwc, dst_nhwc);
}

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  DPB_GRID_STRIDE(i, n) store(out, i, load(a, i) + load(b, i));
}

template <typename T>
__global__ void axpy_kernel(float alpha, const T* x, float* acc, int64_t n, bool overwrite) {
  DPB_GRID_STRIDE(i, n) acc[i] = overwrite ? alpha * load(x, i) : acc[i] + alpha * load(x, i);
}

__global__ void scale_kernel(float* x, float alpha, int64_t n) {
  DPB_GRID_STRIDE(i, n) x[i] *= alpha;
}

}  // namespace

void fill(cudaStream_t s, void* x, bool bf16, float value, int64_t n) {
  if (n == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    fill_kernel<<<grid_for(n), kBlock, 0, s>>>(static_cast<T*>(x), value, n);
  });
  check_launch("fill");
}

void cast(cudaStream_t s, const void* src, bool src_bf16, void* dst, bool dst_bf16, int64_t n) {
  if (n == 0) return;
  if (src_bf16 && !dst_bf16)
    cast_kernel<<<grid_for(n), kBlock, 0, s>>>(static_cast<const __nv_bfloat16*>(src), static_cast<float*>(dst), n);
  else if (!src_bf16 && dst_bf16)
    cast_kernel<<<grid_for(n), kBlock, 0, s>>>(static_cast<const float*>(src), static_cast<__nv_bfloat16*>(dst), n);
  else
    cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * (src_bf16 ? 2 : 4), cudaMemcpyDeviceToDevice, s);
  check_launch("cast");
}

void convert4d(cudaStream_t s, const void* src, bool src_bf16, bool src_nhwc, void* dst, bool dst_bf16, bool dst_nhwc,
               int64_t N, int64_t C, int64_t H, int64_t W, bool accumulate) {
  const int64_t total = N * C * H * W;
  if (total == 0) return;
  const int64_t HW = H * W;
  auto go = [&](auto* st, auto* dt) {
    using S = std::remove_pointer_t<decltype(st)>;
    using D = std::remove_pointer_t<decltype(dt)>;
    if (accumulate) launch_convert4d<S, D, true>(s, src, dst, C, HW, total, src_nhwc, dst_nhwc);
    else launch_convert4d<S, D, false>(s, src, dst, C, HW, total, src_nhwc, dst_nhwc);
  };
  with_type(src_bf16, [&](auto* st) { with_type(dst_bf16, [&](auto* dt) { go(st, dt); }); });
  check_launch("convert4d");
}

void add(cudaStream_t s, const void* a, const void* b, void* out, bool bf16, int64_t n) {
  if (n == 0) return;
  with_type(bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    add_kernel<<<grid_for(n), kBlock, 0, s>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                               static_cast<T*>(out), n);
  });
  check_launch("add");
}

void axpy(cudaStream_t s, float alpha, const void* x, bool x_bf16, float* acc, int64_t n, bool overwrite) {
  if (n == 0) return;
  with_type(x_bf16, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    axpy_kernel<<<grid_for(n), kBlock, 0, s>>>(alpha, static_cast<const T*>(x), acc, n, overwrite);
  });
  check_launch("axpy");
}

void scale(cudaStream_t s, float* x, float alpha, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kBlock, 0, s>>>(x, alpha, n);
  check_launch("scale");
}

}  // namespace dpb::cuda::k
