#pragma once
// What one GPU owns: its streams, the cuDNN and cuBLAS handles and the scratch
// workspace of each stream that runs ops, and the cache of convolution algorithms.
//
// Streams: every op runs on the calling thread's *current stream* of its device
// (StreamGuard sets it), by default the device's compute stream. Several logical
// devices placed on one GPU, or a DataParallel replica thread, each use a stream of
// their own; library handles and workspaces are kept per (device, stream), so two
// threads never share a handle or scratch memory. The communication stream (DDP's
// all-reduce) and the copy stream (prefetched host-to-device batches) are separate,
// so their work overlaps with compute; cross-stream use goes through events.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend/precision.h"

namespace dpb::cuda {

// Per-stream resources: handles bound to the stream and a workspace that grows on
// demand up to the device's workspace limit.
struct StreamResources {
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublaslt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

class DeviceContext {
 public:
  // The context of GPU `index`, created on first use and kept until exit.
  static DeviceContext& get(int index);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int index() const { return index_; }
  cudaStream_t compute_stream() const { return compute_; }
  cudaStream_t comm_stream() const { return comm_; }
  cudaStream_t copy_stream() const { return copy_; }

  // Handles and workspace for `stream` (created on first use).
  StreamResources& resources(cudaStream_t stream);
  // Scratch memory of at least `bytes` for `stream`; valid until the next call on the
  // same stream. Fails naming the limit when `bytes` is over it.
  void* workspace(cudaStream_t stream, size_t bytes);
  // Every stream that has run ops (has handles), the compute stream among them.
  std::vector<cudaStream_t> op_streams();
  size_t workspace_limit() const { return workspace_limit_; }
  void set_workspace_limit(size_t bytes) { workspace_limit_ = bytes; }

  // Cached per-shape choices (convolution algorithms), keyed by a descriptive string.
  template <typename T>
  bool find_cached(const std::string& key, T* out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = algo_cache_.find(key);
    if (it == algo_cache_.end()) return false;
    *out = *static_cast<const T*>(it->second.get());
    return true;
  }
  template <typename T>
  void store_cached(const std::string& key, const T& value) {
    std::lock_guard<std::mutex> lock(mu_);
    algo_cache_[key] = std::make_shared<T>(value);
  }
  // Peak FLOP/s of this GPU for dense math in `precision` ("fp32", "tf32", "bf16"),
  // 0 when unknown (for MFU).
  double peak_flops(Precision precision) const;
  const std::string& name() const { return name_; }

 private:
  explicit DeviceContext(int index);

  int index_;
  std::string name_;
  int sm_major_ = 0, sm_minor_ = 0, sm_count_ = 0, clock_khz_ = 0;
  cudaStream_t compute_ = nullptr, comm_ = nullptr, copy_ = nullptr;
  size_t workspace_limit_ = size_t{512} << 20;
  std::mutex mu_;
  std::map<cudaStream_t, std::unique_ptr<StreamResources>> streams_;
  std::unordered_map<std::string, std::shared_ptr<void>> algo_cache_;
};

// Makes `index` the calling thread's CUDA device (cudaSetDevice, skipped when it
// already is) after checking it exists.
void set_device(int index);

// The calling thread's current stream on device `index` (the compute stream unless a
// StreamGuard says otherwise).
cudaStream_t current_stream(int index);

// Sets the calling thread's current stream of a device for its lifetime.
class StreamGuard {
 public:
  StreamGuard(int index, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int index_;
  cudaStream_t previous_;
};

}  // namespace dpb::cuda
