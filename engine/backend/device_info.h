#pragma once
// What the CUDA side of this build can see: whether it was built with CUDA, the
// runtime/driver/cuDNN/NCCL versions and the visible GPUs (empty without a GPU).
#include <cstdint>
#include <string>
#include <vector>

namespace dpb {

struct GpuInfo {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  std::string compute_capability;
  std::string pci_bus_id;  // domain:bus:device.function: the same GPU whatever index it has in a process
};

struct CudaInfo {
  bool built = false;
  std::string runtime_version, driver_version, cudnn_version, nccl_version;
  std::vector<GpuInfo> gpus;
  std::string unavailable_reason;  // why no GPU is usable, when gpus is empty
};

CudaInfo cuda_info();
// Number of usable CUDA devices (0 without a GPU or without CUDA in the build).
int cuda_device_count();

// Logical CUDA devices. By default cuda:k is GPU k. place_cuda_devices(n) makes
// cuda:0..n-1 n logical devices placed round-robin on the GPUs (cuda:k on GPU k mod
// cuda_device_count()), each with its own streams, library handles, workspaces and
// memory pool: DataParallel replicas or pipeline stages over n devices on a machine with
// fewer GPUs, whose kernels then share a GPU. cuda:k below the GPU count stays GPU k, so
// the placement can be set at any time; 0 restores the default. Fails without a GPU.
void place_cuda_devices(int n);
// The cuda:k indices that exist: n after place_cuda_devices(n), else the GPU count.
int cuda_logical_device_count();
// The GPU that cuda:k runs on.
int cuda_physical_device(int index);

}  // namespace dpb
