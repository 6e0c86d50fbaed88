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

}  // namespace dpb
