#include "engine/tensor/device_backend.h"

#include "engine/core/error.h"

namespace dpb {

namespace {
// Zero-initialised before any dynamic initialisation, so registration at static
// initialisation time is safe in any order.
DeviceMemoryBackend* g_cuda_backend = nullptr;
}  // namespace

void register_device_backend(DeviceKind kind, DeviceMemoryBackend* backend) {
  DPB_CHECK(kind == DeviceKind::cuda) << "only non-CPU device kinds have a memory backend";
  g_cuda_backend = backend;
}

DeviceMemoryBackend* find_device_backend(DeviceKind kind) {
  return kind == DeviceKind::cuda ? g_cuda_backend : nullptr;
}

DeviceMemoryBackend& device_backend(DeviceKind kind) {
  DeviceMemoryBackend* b = find_device_backend(kind);
  DPB_CHECK(b) << "CUDA devices are not available: "
#if DPB_WITH_CUDA
               << "the CUDA backend is not linked into this program";
#else
               << "this build has no CUDA backend (configure with -DDPB_CUDA=ON)";
#endif
  return *b;
}

}  // namespace dpb
