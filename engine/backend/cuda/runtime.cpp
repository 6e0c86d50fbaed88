#include "engine/backend/cuda/runtime.h"

#include <cuda_runtime.h>

#include <atomic>

#include "engine/backend/cuda/caching_allocator.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_context.h"
#include "engine/backend/cuda/kernels.h"
#include "engine/backend/device_info.h"
#include "engine/tensor/device_backend.h"

namespace dpb::cuda {

std::string describe(cublasStatus_t s) { return cublasGetStatusString(s); }

std::string where_device() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) return "";
  return " on cuda:" + std::to_string(d);
}

void* device_malloc(int index, size_t bytes) {
  set_device(index);
  return cached_malloc(index, bytes, current_stream(index));
}

void device_free(int index, void* ptr) noexcept { cached_free(index, ptr); }

void* host_alloc_pinned(size_t bytes) {
  if (cuda_device_count() == 0) return nullptr;
  return pinned_malloc(bytes);
}

void host_free_pinned(void* ptr) noexcept { pinned_free(ptr); }

void synchronize(int index) {
  set_device(index);
  DPB_CUDA_CHECK(cudaStreamSynchronize(current_stream(index))) << "waiting for cuda:" << index;
}

void* record_event(int index) {
  set_device(index);
  cudaEvent_t e = nullptr;
  DPB_CUDA_CHECK(cudaEventCreate(&e)) << "a timing event on cuda:" << index;
  if (const cudaError_t r = cudaEventRecord(e, current_stream(index)); r != cudaSuccess) {
    cudaEventDestroy(e);
    DPB_CUDA_CHECK(r) << "recording a timing event on cuda:" << index;
  }
  return e;
}

float event_elapsed_ms(void* begin, void* end) {
  DPB_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(end))) << "waiting for a timing event";
  float ms = 0;
  DPB_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(begin), static_cast<cudaEvent_t>(end)))
      << "reading two timing events";
  return ms;
}

void destroy_event(void* event) noexcept {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void copy(const Device& dst_dev, void* dst, const Device& src_dev, const void* src, size_t bytes) {
  if (dst_dev.is_cuda() && src_dev.is_cuda() && dst_dev.index != src_dev.index) {
    // Between GPUs: after the source's queued work, then complete before returning
    // (the source block may be reused once we return).
    synchronize(src_dev.index);
    set_device(dst_dev.index);
    cudaStream_t s = current_stream(dst_dev.index);
    // Logical devices on the same GPU copy within it.
    const int dst_gpu = cuda_physical_device(dst_dev.index), src_gpu = cuda_physical_device(src_dev.index);
    DPB_CUDA_CHECK(dst_gpu == src_gpu ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s)
                                      : cudaMemcpyPeerAsync(dst, dst_gpu, src, src_gpu, bytes, s))
        << "copying " << bytes << " bytes " << src_dev << " -> " << dst_dev;
    DPB_CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  const int index = dst_dev.is_cuda() ? dst_dev.index : src_dev.index;
  set_device(index);
  cudaStream_t s = current_stream(index);
  DPB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s))
      << "copying " << bytes << " bytes " << src_dev << " -> " << dst_dev;
  if (dst_dev.is_cpu()) {
    DPB_CUDA_CHECK(cudaStreamSynchronize(s)) << "copying " << bytes << " bytes " << src_dev << " -> " << dst_dev;
  } else if (src_dev.is_cpu()) {
    if (is_pinned(src)) record_host_use(src, index, s);
    else DPB_CUDA_CHECK(cudaStreamSynchronize(s)) << "copying " << bytes << " bytes " << src_dev << " -> " << dst_dev;
  }
}

}  // namespace dpb::cuda

namespace dpb {

int cuda_device_count() {
  static const int n = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return count;
  }();
  return n;
}

namespace {
std::atomic<int>& placed_devices() {
  static std::atomic<int> n{0};
  return n;
}
}  // namespace

void place_cuda_devices(int n) {
  DPB_CHECK(n >= 0 && n <= 64) << "cannot place " << n << " CUDA devices (0..64)";
  DPB_CHECK(n == 0 || cuda_device_count() > 0) << "cannot place " << n << " CUDA devices: no GPU is usable";
  placed_devices().store(n);
}

int cuda_logical_device_count() {
  const int n = placed_devices().load();
  return n > 0 ? n : cuda_device_count();
}

int cuda_physical_device(int index) {
  const int gpus = cuda_device_count();
  return placed_devices().load() > 0 && gpus > 0 ? index % gpus : index;
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
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), i) != cudaSuccess) {
      (void)cudaGetLastError();
      bus[0] = '\0';
    }
    info.gpus.push_back({i, p.name, static_cast<int64_t>(p.totalGlobalMem),
                         std::to_string(p.major) + "." + std::to_string(p.minor), bus});
  }
  if (info.gpus.empty()) info.unavailable_reason = "no CUDA device visible";
  return info;
}

}  // namespace dpb

namespace dpb::cuda {

void fill(int index, void* x, bool bf16, float value, int64_t n) {
  set_device(index);
  k::fill(current_stream(index), x, bf16, value, n);
}

void cast(int index, const void* src, bool src_bf16, void* dst, bool dst_bf16, int64_t n) {
  set_device(index);
  k::cast(current_stream(index), src, src_bf16, dst, dst_bf16, n);
}

void convert_layout(int index, const void* src, void* dst, size_t elem, const std::vector<int64_t>& nchw,
                    bool to_nhwc) {
  DPB_CHECK(nchw.size() == 4) << "layout conversion of a " << nchw.size() << "-d tensor";
  set_device(index);
  DPB_CHECK(elem == 2 || elem == 4) << "layout conversion of " << elem << "-byte elements";
  // Same dtype both sides: 2-byte elements move as bf16, 4-byte ones as f32 (bit-exact).
  const bool bf16 = elem == 2;
  k::convert4d(current_stream(index), src, bf16, !to_nhwc, dst, bf16, to_nhwc, nchw[0], nchw[1], nchw[2], nchw[3]);
}

}  // namespace dpb::cuda

namespace dpb::cuda {

namespace {

// CUDA's memory for the tensor layer (engine/tensor/device_backend.h): registered when
// this file is linked in, which every program that can reach a GPU does (it holds
// cuda_device_count and the device placement).
class CudaMemoryBackend final : public DeviceMemoryBackend {
 public:
  void* allocate(int index, size_t bytes) override { return device_malloc(index, bytes); }
  void release(int index, void* ptr) noexcept override { device_free(index, ptr); }
  void* allocate_pinned(size_t bytes) override { return host_alloc_pinned(bytes); }
  void release_pinned(void* ptr) noexcept override { host_free_pinned(ptr); }
  int64_t cached_bytes(int index) override { return cache_stats(index).cached_bytes; }
  void empty_cache(int index) override { cuda::empty_cache(index); }
  void copy(const Device& dst_dev, void* dst, const Device& src_dev, const void* src, size_t bytes) override {
    cuda::copy(dst_dev, dst, src_dev, src, bytes);
  }
  void fill(int index, void* x, bool bf16, float value, int64_t n) override { cuda::fill(index, x, bf16, value, n); }
  void cast(int index, const void* src, bool src_bf16, void* dst, bool dst_bf16, int64_t n) override {
    cuda::cast(index, src, src_bf16, dst, dst_bf16, n);
  }
  void convert_layout(int index, const void* src, void* dst, size_t elem, const std::vector<int64_t>& nchw,
                      bool to_nhwc) override {
    cuda::convert_layout(index, src, dst, elem, nchw, to_nhwc);
  }
};

const bool kRegistered = [] {
  static CudaMemoryBackend backend;
  register_device_backend(DeviceKind::cuda, &backend);
  return true;
}();

}  // namespace

}  // namespace dpb::cuda
