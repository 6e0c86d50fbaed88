#pragma once
// Memory for tensor storage, per device, with current/peak accounting (reported as
// devices[].peak_memory_bytes). CPU memory is 64-byte aligned for oneDNN's vector kernels.
#include <cstddef>
#include <cstdint>

#include "engine/tensor/device.h"

namespace dpb {

struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t allocations = 0;
};

void* device_alloc(const Device& device, size_t bytes);
void device_free(const Device& device, void* ptr, size_t bytes) noexcept;
// Page-locked host memory (for fast, asynchronous copies to a GPU) when a GPU is
// usable; ordinary host memory otherwise. Accounted to cpu:0.
void* pinned_alloc(size_t bytes, bool* pinned);
void pinned_free(void* ptr, size_t bytes, bool pinned) noexcept;

MemoryStats memory_stats(const Device& device);
void reset_peak_memory(const Device& device);

}  // namespace dpb
