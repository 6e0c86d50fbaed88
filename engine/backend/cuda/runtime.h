#pragma once
// The CUDA runtime pieces the tensor layer needs: memory, copies and the small kernels
// behind Tensor's fill, dtype and layout conversions. Everything runs on the calling
// thread's current stream of the device (device_context.h).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/tensor/device.h"

namespace dpb::cuda {

// Device memory through the caching allocator, on the current stream.
void* device_malloc(int index, size_t bytes);
void device_free(int index, void* ptr) noexcept;
// Page-locked host memory (cached), or null when no GPU is usable.
void* host_alloc_pinned(size_t bytes);
void host_free_pinned(void* ptr) noexcept;

// Copies between host and/or CUDA devices. On return the destination is ready for
// whoever reads it next: a host destination holds the bytes (the copy completed); a
// device destination is written in stream order, so later ops on the current stream
// see it. A pinned host source is copied asynchronously (its block stays reserved
// until the copy is done); a pageable one synchronously.
void copy(const Device& dst_dev, void* dst, const Device& src_dev, const void* src, size_t bytes);
// Waits for the work queued on the current stream of `index`.
void synchronize(int index);
// A timing event recorded on the current stream of `index` (nothing waits); the
// milliseconds between two, once the later has completed (waits for it); destroyed.
void* record_event(int index);
float event_elapsed_ms(void* begin, void* end);
void destroy_event(void* event) noexcept;

void fill(int index, void* x, bool bf16, float value, int64_t n);
void cast(int index, const void* src, bool src_bf16, void* dst, bool dst_bf16, int64_t n);
// (N, C, H, W) between plain and channels-last order; elem = bytes per element (2 or 4).
void convert_layout(int index, const void* src, void* dst, size_t elem, const std::vector<int64_t>& nchw,
                    bool to_nhwc);

}  // namespace dpb::cuda
