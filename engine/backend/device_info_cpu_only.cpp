// device_info for builds without the CUDA backend (-DDPB_CUDA=OFF).
#include "engine/backend/device_info.h"

#include "engine/core/error.h"

namespace dpb {

CudaInfo cuda_info() {
  CudaInfo info;
  info.unavailable_reason = "built without CUDA (-DDPB_CUDA=OFF)";
  return info;
}

int cuda_device_count() { return 0; }

void place_cuda_devices(int n) {
  DPB_CHECK(n == 0) << "cannot place " << n << " CUDA devices: built without CUDA (-DDPB_CUDA=OFF)";
}

int cuda_logical_device_count() { return 0; }

int cuda_physical_device(int index) { return index; }

}  // namespace dpb
