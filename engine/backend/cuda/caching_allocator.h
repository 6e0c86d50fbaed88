#pragma once
// The CUDA caching allocator (PyTorch's design, reduced to what the engine needs).
//
// A training step allocates the same sizes in the same order every time, so freed
// blocks are kept per (pool, stream, size) and handed out again: after the first step
// there is no cudaMalloc or cudaFree in the steady state (both synchronise the device).
// A block is reused only by allocations on the stream it was allocated on, which
// orders the new use after every earlier use on that stream without any event. When
// a block is also used on another stream (a batch copied on the copy stream and read
// on the compute stream, a gradient bucket all-reduced on the communication stream),
// record_stream() says so, and the block becomes reusable only once events recorded
// on those streams at free time have completed.
//
// Private pools: while a pool is active for a stream (CUDA graph capture), that
// stream's allocations come from the pool and return to it, so memory a captured graph
// reads and writes is never handed to anything else while the graph may be replayed.
//
// Out of memory: the cache is returned to the driver and the allocation retried; if it
// still fails, the error says how much was asked for, how much is in use and cached,
// what the GPU has free, and what to try.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dpb::cuda {

void* cached_malloc(int device, size_t bytes, cudaStream_t stream);
void cached_free(int device, void* ptr) noexcept;
// `ptr` (any address inside a live block) is used on `stream` as well.
void record_stream(int device, void* ptr, cudaStream_t stream);
// Returns the free blocks of the general pool to the driver.
void empty_cache(int device);

struct CacheStats {
  int64_t reserved_bytes = 0;  // obtained from cudaMalloc and not yet returned
  int64_t cached_bytes = 0;    // free blocks kept for reuse
  int64_t device_mallocs = 0;  // cudaMalloc calls so far
  int64_t device_frees = 0;    // cudaFree calls so far
  int64_t reuses = 0;          // allocations served from the cache
};
CacheStats cache_stats(int device);

// Private pools for graph capture.
uint64_t create_pool(int device);
void begin_pool(int device, cudaStream_t stream, uint64_t pool);
void end_pool(int device, cudaStream_t stream);
// Frees the pool's free blocks; blocks still live return to the driver when freed.
void release_pool(int device, uint64_t pool) noexcept;

// Page-locked host memory, cached by size. A block used by an asynchronous copy
// (record_host_use) is handed out again only once that copy has completed, so the
// producer may drop a batch as soon as its copy is queued. Null when no GPU is usable.
void* pinned_malloc(size_t bytes);
void pinned_free(void* ptr) noexcept;
// Whether `ptr` lies in a pinned block; record_host_use marks that block busy until
// the work queued on `stream` so far has completed.
bool is_pinned(const void* ptr);
void record_host_use(const void* ptr, int device, cudaStream_t stream);

}  // namespace dpb::cuda
