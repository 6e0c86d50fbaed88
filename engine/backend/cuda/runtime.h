#pragma once
// The CUDA runtime pieces the tensor layer needs: device memory and copies.
// (Streams, handles and the caching allocator belong to the DeviceContext.)
#include <cstddef>

#include "engine/tensor/device.h"

namespace dpb::cuda {

void* device_malloc(int index, size_t bytes);
void device_free(int index, void* ptr) noexcept;
// Page-locked host memory, or null when no GPU is usable.
void* host_alloc_pinned(size_t bytes);
void host_free_pinned(void* ptr) noexcept;
// Synchronous copy between host and/or CUDA devices.
void copy(const Device& dst_dev, void* dst, const Device& src_dev, const void* src, size_t bytes);

// Elementwise kernels (elementwise.cu), on the current stream of `index`.
void add(int index, const float* a, const float* b, float* out, int64_t n);
void axpy(int index, float alpha, const float* x, float* acc, int64_t n);
void scale(int index, float* x, float alpha, int64_t n);

}  // namespace dpb::cuda
