// device_info for builds without the CUDA backend (-DDPB_CUDA=OFF).
#include "engine/backend/device_info.h"

namespace dpb {

CudaInfo cuda_info() {
  CudaInfo info;
  info.unavailable_reason = "built without CUDA (-DDPB_CUDA=OFF)";
  return info;
}

int cuda_device_count() { return 0; }

}  // namespace dpb
