#include "engine/backend/cuda/runtime.h"

#include <cuda_runtime.h>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/device_info.h"

namespace dpb::cuda {

std::string describe(cublasStatus_t s) { return cublasGetStatusString(s); }

std::string where_device() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) return "";
  return " on cuda:" + std::to_string(d);
}

namespace {
void use_device(int index) {
  const int n = cuda_device_count();
  DPB_CHECK(index >= 0 && index < n) << "cuda:" << index << " is not available: this machine has " << n
                                     << " usable CUDA device(s)";
  DPB_CUDA_CHECK(cudaSetDevice(index));
}
}  // namespace

void* device_malloc(int index, size_t bytes) {
  use_device(index);
  void* p = nullptr;
  const cudaError_t s = cudaMalloc(&p, bytes);
  if (s == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    DPB_FAIL() << "CUDA out of memory on cuda:" << index << ": asked for " << bytes << " bytes, "
               << free_b << " of " << total_b << " bytes free (try a smaller --batch, or bf16 precision)";
  }
  DPB_CUDA_CHECK(s) << "allocating " << bytes << " bytes";
  return p;
}

void device_free(int index, void* ptr) noexcept {
  if (!ptr) return;
  DPB_CUDA_CHECK_NOTHROW(cudaSetDevice(index));
  DPB_CUDA_CHECK_NOTHROW(cudaFree(ptr));
}

void* host_alloc_pinned(size_t bytes) {
  if (cuda_device_count() == 0) return nullptr;
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

void host_free_pinned(void* ptr) noexcept { DPB_CUDA_CHECK_NOTHROW(cudaFreeHost(ptr)); }

void copy(const Device& dst_dev, void* dst, const Device& src_dev, const void* src, size_t bytes) {
  if (dst_dev.is_cuda()) use_device(dst_dev.index);
  else if (src_dev.is_cuda()) use_device(src_dev.index);
  DPB_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault))
      << "copying " << bytes << " bytes " << src_dev << " -> " << dst_dev;
}

}  // namespace dpb::cuda

namespace dpb {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

CudaInfo cuda_info() {
  CudaInfo info;
  info.built = true;
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  int rt = 0, drv = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) info.runtime_version = version(rt);
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) info.driver_version = version(drv);
  const size_t cudnn = cudnnGetVersion();
  info.cudnn_version = std::to_string(cudnn / 10000) + "." + std::to_string((cudnn % 10000) / 100) + "." +
                       std::to_string(cudnn % 100);
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)
    info.nccl_version = std::to_string(nccl / 10000) + "." + std::to_string((nccl % 10000) / 100) + "." +
                        std::to_string(nccl % 100);
  int n = 0;
  const cudaError_t s = cudaGetDeviceCount(&n);
  if (s != cudaSuccess) {
    info.unavailable_reason = cudaGetErrorString(s);
    (void)cudaGetLastError();
    return info;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    info.gpus.push_back({i, p.name, static_cast<int64_t>(p.totalGlobalMem),
                         std::to_string(p.major) + "." + std::to_string(p.minor)});
  }
  if (info.gpus.empty()) info.unavailable_reason = "no CUDA device visible";
  return info;
}

}  // namespace dpb
