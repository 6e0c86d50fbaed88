#include "engine/backend/cuda/device_context.h"

#include <array>

#include "engine/backend/cuda/caching_allocator.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/device_info.h"

namespace dpb::cuda {

namespace {
constexpr int kMaxGpus = 64;

struct CurrentStreams {
  std::array<cudaStream_t, kMaxGpus> stream{};  // null: the device's compute stream
};
thread_local CurrentStreams t_current;
thread_local int t_device = -1;
}  // namespace

void set_device(int index) {
  const int n = cuda_logical_device_count();
  DPB_CHECK(index >= 0 && index < n) << "cuda:" << index << " is not available: this machine has " << n
                                     << " usable CUDA device(s)";
  const int gpu = cuda_physical_device(index);
  if (t_device == gpu) return;
  DPB_CUDA_CHECK(cudaSetDevice(gpu));
  t_device = gpu;
}

DeviceContext& DeviceContext::get(int index) {
  DPB_CHECK(index >= 0 && index < kMaxGpus) << "cuda:" << index << " out of range";
  static std::mutex mu;
  // Never destroyed: tensors in static objects may be freed during exit, and the CUDA
  // runtime may already be shutting down then.
  static auto* contexts = new std::array<std::unique_ptr<DeviceContext>, kMaxGpus>;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*contexts)[static_cast<size_t>(index)];
  if (!slot) slot.reset(new DeviceContext(index));
  return *slot;
}

DeviceContext::DeviceContext(int index) : index_(index) {
  set_device(index);
  const int gpu = cuda_physical_device(index);
  cudaDeviceProp p{};
  DPB_CUDA_CHECK(cudaGetDeviceProperties(&p, gpu));
  name_ = p.name;
  sm_major_ = p.major;
  sm_minor_ = p.minor;
  sm_count_ = p.multiProcessorCount;
  int clock = 0;
  if (cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, gpu) == cudaSuccess) clock_khz_ = clock;
  // Non-blocking: no implicit synchronisation with the legacy default stream, which
  // nothing in the engine uses.
  DPB_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  DPB_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
  DPB_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
}

DeviceContext::~DeviceContext() {
  for (auto& [s, r] : streams_) {
    if (r->cudnn) cudnnDestroy(r->cudnn);
    if (r->cublas) cublasDestroy(r->cublas);
    if (r->cublaslt) cublasLtDestroy(r->cublaslt);
  }
}

std::vector<cudaStream_t> DeviceContext::op_streams() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<cudaStream_t> out;
  for (const auto& [s, r] : streams_) out.push_back(s);
  return out;
}

StreamResources& DeviceContext::resources(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = streams_[stream];
  if (!slot) {
    set_device(index_);
    auto r = std::make_unique<StreamResources>();
    r->stream = stream;
    DPB_CUDNN_CHECK(cudnnCreate(&r->cudnn));
    DPB_CUDNN_CHECK(cudnnSetStream(r->cudnn, stream));
    DPB_CUBLAS_CHECK(cublasCreate(&r->cublas));
    DPB_CUBLAS_CHECK(cublasSetStream(r->cublas, stream));
    DPB_CUBLAS_CHECK(cublasLtCreate(&r->cublaslt));
    // cuBLAS's own scratch, from the caching allocator: without it cuBLAS allocates
    // internally, which a CUDA graph capture does not allow.
    constexpr size_t kBlasWorkspace = size_t{32} << 20;
    void* ws = cached_malloc(index_, kBlasWorkspace, stream);
    DPB_CUBLAS_CHECK(cublasSetWorkspace(r->cublas, ws, kBlasWorkspace));
    slot = std::move(r);
  }
  return *slot;
}

void* DeviceContext::workspace(cudaStream_t stream, size_t bytes) {
  StreamResources& r = resources(stream);
  if (bytes <= r.workspace_bytes) return r.workspace;
  DPB_CHECK(bytes <= workspace_limit_) << "cuda:" << index_ << ": an op asked for " << bytes
                                       << " bytes of workspace, over the limit of " << workspace_limit_;
  // The old block may still be in use by queued work on this stream; the allocator
  // hands it out again only in stream order, so freeing it now is safe.
  if (r.workspace) cached_free(index_, r.workspace);
  // Grow geometrically so a run settles after a few shapes.
  size_t grow = std::max(bytes, std::min(workspace_limit_, r.workspace_bytes * 2));
  r.workspace = cached_malloc(index_, grow, stream);
  r.workspace_bytes = grow;
  return r.workspace;
}

double DeviceContext::peak_flops(Precision precision) const {
  // Dense peaks from the datasheets of the GPUs this tool is used on most; otherwise
  // per-SM throughput per clock of the architecture times SMs times the clock.
  struct Known {
    const char* name;
    double fp32, tf32, bf16;  // TFLOP/s
  };
  static const Known known[] = {
      {"H100 80GB HBM3", 66.9, 494.7, 989.4}, {"H100 SXM", 66.9, 494.7, 989.4}, {"H200", 66.9, 494.7, 989.4},
      {"H100 NVL", 60.0, 417.5, 835.5},      {"H100 PCIe", 51.2, 378.0, 756.0}, {"A100", 19.5, 156.0, 312.0},
      {"L40S", 91.6, 183.0, 362.1},           {"A10", 31.2, 62.5, 125.0},
  };
  for (const auto& k : known) {
    if (name_.find(k.name) != std::string::npos) {
      const double t = precision == Precision::bf16 ? k.bf16 : precision == Precision::tf32 ? k.tf32 : k.fp32;
      return t * 1e12;
    }
  }
  double per_sm_clock = 0;  // FLOP per SM per clock, dense
  const bool bf16 = precision == Precision::bf16, tf32 = precision == Precision::tf32;
  if (sm_major_ == 9) per_sm_clock = bf16 ? 4096 : tf32 ? 2048 : 256;
  else if (sm_major_ == 8 && sm_minor_ == 0) per_sm_clock = bf16 ? 2048 : tf32 ? 1024 : 128;
  if (per_sm_clock == 0 || clock_khz_ == 0) return 0;
  return per_sm_clock * sm_count_ * clock_khz_ * 1e3;
}

cudaStream_t current_stream(int index) {
  DPB_CHECK(index >= 0 && index < kMaxGpus) << "cuda:" << index << " out of range";
  cudaStream_t s = t_current.stream[static_cast<size_t>(index)];
  return s ? s : DeviceContext::get(index).compute_stream();
}

StreamGuard::StreamGuard(int index, cudaStream_t stream) : index_(index) {
  DPB_CHECK(index >= 0 && index < kMaxGpus) << "cuda:" << index << " out of range";
  previous_ = t_current.stream[static_cast<size_t>(index)];
  t_current.stream[static_cast<size_t>(index)] = stream;
}

StreamGuard::~StreamGuard() { t_current.stream[static_cast<size_t>(index_)] = previous_; }

}  // namespace dpb::cuda
