#pragma once
// What the tensor layer needs from a device kind other than the CPU: memory (through
// that device's allocator), copies, and the small kernels behind Tensor's fill, dtype
// and layout conversions. A backend implements it and registers itself
// (engine/backend/cuda registers CUDA's when it is linked in), so the tensor layer
// includes nothing above itself.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/tensor/device.h"

namespace dpb {

class DeviceMemoryBackend {
 public:
  virtual ~DeviceMemoryBackend() = default;
  virtual void* allocate(int index, size_t bytes) = 0;
  virtual void release(int index, void* ptr) noexcept = 0;
  // Page-locked host memory for fast copies to the device, or null when none is usable.
  virtual void* allocate_pinned(size_t bytes) = 0;
  virtual void release_pinned(void* ptr) noexcept = 0;
  virtual int64_t cached_bytes(int index) = 0;  // freed, kept for reuse
  virtual void empty_cache(int index) = 0;
  // Between host and/or devices; on return the destination is ready for whoever reads
  // it next (in stream order on a device).
  virtual void copy(const Device& dst_dev, void* dst, const Device& src_dev, const void* src, size_t bytes) = 0;
  virtual void fill(int index, void* x, bool bf16, float value, int64_t n) = 0;
  virtual void cast(int index, const void* src, bool src_bf16, void* dst, bool dst_bf16, int64_t n) = 0;
  // (N, C, H, W) between plain and channels-last order; elem = bytes per element.
  virtual void convert_layout(int index, const void* src, void* dst, size_t elem, const std::vector<int64_t>& nchw,
                              bool to_nhwc) = 0;
};

// Called once by a backend, at static initialisation.
void register_device_backend(DeviceKind kind, DeviceMemoryBackend* backend);
// The backend of `kind`; a dpb::Error saying the build has none otherwise.
DeviceMemoryBackend& device_backend(DeviceKind kind);
// Null when no backend of `kind` is linked in.
DeviceMemoryBackend* find_device_backend(DeviceKind kind);

}  // namespace dpb
