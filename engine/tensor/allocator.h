#pragma once
// Memory for tensor storage, per device, with current/peak accounting (reported as
// devices[].peak_memory_bytes). CPU memory is 64-byte aligned for oneDNN's vector kernels
// and cached: a training step allocates the same sizes every time, and reusing freed
// blocks avoids returning memory to the OS and faulting it back in on every step.
#include <cstddef>
#include <cstdint>

#include "engine/tensor/device.h"

namespace dpb {

struct MemoryStats {
  int64_t current_bytes = 0;  // in live tensors
  int64_t peak_bytes = 0;
  int64_t allocations = 0;
  int64_t cached_bytes = 0;   // freed, kept for reuse (the CPU cache; CUDA's caching allocator)
};

void* device_alloc(const Device& device, size_t bytes);
void device_free(const Device& device, void* ptr, size_t bytes) noexcept;
// Page-locked host memory (for fast, asynchronous copies to a GPU) when a GPU is
// usable; ordinary host memory otherwise. Accounted to cpu:0.
void* pinned_alloc(size_t bytes, bool* pinned);
void pinned_free(void* ptr, size_t bytes, bool pinned) noexcept;

MemoryStats memory_stats(const Device& device);
void reset_peak_memory(const Device& device);
// Returns the cached free blocks of a device to the system (the driver for CUDA).
void empty_cache(const Device& device);

}  // namespace dpb
