#include "engine/backend/cuda/caching_allocator.h"

#include <array>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_context.h"
#include "engine/core/log.h"

namespace dpb::cuda {

namespace {

constexpr int kMaxGpus = 64;
constexpr size_t kSmall = size_t{1} << 20;

size_t round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t unit = bytes < kSmall ? 512 : (size_t{128} << 10);
  return (bytes + unit - 1) / unit * unit;
}

// A free block may serve a request up to this much smaller (limits waste).
bool fits(size_t block, size_t request) { return block <= request + request / 4 + 512; }

struct Block {
  void* ptr = nullptr;
  size_t size = 0;
  cudaStream_t stream = nullptr;
  uint64_t pool = 0;
  bool live = false;
  std::vector<cudaStream_t> used_on;   // other streams (record_stream)
  std::vector<cudaEvent_t> pending;    // events that must complete before reuse
};

using FreeKey = std::tuple<uint64_t, cudaStream_t, size_t, void*>;

struct DevicePool {
  std::mutex mu;
  std::map<void*, Block> blocks;        // every block, by address
  std::set<FreeKey> free;               // reusable blocks
  std::vector<void*> waiting;           // freed, waiting on events
  std::map<cudaStream_t, uint64_t> capture_pool;
  std::vector<cudaEvent_t> spare_events;
  uint64_t next_pool = 1;
  CacheStats stats;
};

DevicePool& pool_of(int device) {
  static auto* pools = new std::array<DevicePool, kMaxGpus>;
  DPB_CHECK(device >= 0 && device < kMaxGpus) << "cuda:" << device << " out of range";
  return (*pools)[static_cast<size_t>(device)];
}

cudaEvent_t take_event(DevicePool& p) {
  if (!p.spare_events.empty()) {
    cudaEvent_t e = p.spare_events.back();
    p.spare_events.pop_back();
    return e;
  }
  cudaEvent_t e;
  DPB_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// Moves freed blocks whose events have completed to the free set (lock held).
void process_waiting(DevicePool& p) {
  for (size_t i = 0; i < p.waiting.size();) {
    Block& b = p.blocks.at(p.waiting[i]);
    bool done = true;
    for (cudaEvent_t e : b.pending) {
      const cudaError_t s = cudaEventQuery(e);
      if (s == cudaErrorNotReady) {
        (void)cudaGetLastError();
        done = false;
        break;
      }
    }
    if (!done) {
      ++i;
      continue;
    }
    for (cudaEvent_t e : b.pending) p.spare_events.push_back(e);
    b.pending.clear();
    p.free.insert({b.pool, b.stream, b.size, b.ptr});
    p.waiting[i] = p.waiting.back();
    p.waiting.pop_back();
  }
}

// Returns free blocks of pool `pool` (all general-pool blocks when pool == 0) to the
// driver (lock held).
void release_free(DevicePool& p, uint64_t pool) {
  for (auto it = p.free.begin(); it != p.free.end();) {
    if (std::get<0>(*it) != pool) {
      ++it;
      continue;
    }
    void* ptr = std::get<3>(*it);
    DPB_CUDA_CHECK_NOTHROW(cudaFree(ptr));
    p.stats.reserved_bytes -= static_cast<int64_t>(p.blocks.at(ptr).size);
    p.stats.cached_bytes -= static_cast<int64_t>(p.blocks.at(ptr).size);
    ++p.stats.device_frees;
    p.blocks.erase(ptr);
    it = p.free.erase(it);
  }
}

Block* find_block(DevicePool& p, const void* ptr) {
  auto it = p.blocks.upper_bound(const_cast<void*>(ptr));
  if (it == p.blocks.begin()) return nullptr;
  --it;
  Block& b = it->second;
  const auto* base = static_cast<const char*>(b.ptr);
  if (static_cast<const char*>(ptr) < base + b.size) return &b;
  return nullptr;
}

}  // namespace

void* cached_malloc(int device, size_t bytes, cudaStream_t stream) {
  DevicePool& p = pool_of(device);
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(p.mu);
  uint64_t pool = 0;
  if (auto c = p.capture_pool.find(stream); c != p.capture_pool.end()) pool = c->second;
  if (!p.waiting.empty()) process_waiting(p);
  auto it = p.free.lower_bound({pool, stream, size, nullptr});
  if (it != p.free.end() && std::get<0>(*it) == pool && std::get<1>(*it) == stream && fits(std::get<2>(*it), size)) {
    Block& b = p.blocks.at(std::get<3>(*it));
    p.free.erase(it);
    b.live = true;
    p.stats.cached_bytes -= static_cast<int64_t>(b.size);
    ++p.stats.reuses;
    return b.ptr;
  }
  set_device(device);
  void* ptr = nullptr;
  cudaError_t s = cudaMalloc(&ptr, size);
  if (s == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    release_free(p, 0);
    s = cudaMalloc(&ptr, size);
  }
  if (s == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    const int64_t in_use = p.stats.reserved_bytes - p.stats.cached_bytes;
    DPB_FAIL() << "CUDA out of memory on cuda:" << device << ": asked for " << bytes << " bytes; " << in_use
               << " bytes in use by tensors, " << p.stats.cached_bytes << " cached, " << free_b << " of " << total_b
               << " bytes free on the GPU. Try a smaller --batch, --precision=bf16, or fewer ranks per GPU";
  }
  DPB_CUDA_CHECK(s) << "allocating " << size << " bytes";
  ++p.stats.device_mallocs;
  p.stats.reserved_bytes += static_cast<int64_t>(size);
  Block b;
  b.ptr = ptr;
  b.size = size;
  b.stream = stream;
  b.pool = pool;
  b.live = true;
  p.blocks.emplace(ptr, std::move(b));
  return ptr;
}

void cached_free(int device, void* ptr) noexcept {
  if (!ptr) return;
  DevicePool& p = pool_of(device);
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.blocks.find(ptr);
  if (it == p.blocks.end() || !it->second.live) {
    log::error("cuda:{}: free of an address the allocator does not own", device);
    return;
  }
  Block& b = it->second;
  b.live = false;
  p.stats.cached_bytes += static_cast<int64_t>(b.size);
  if (b.used_on.empty()) {
    p.free.insert({b.pool, b.stream, b.size, b.ptr});
    return;
  }
  // Reusable once every other stream has finished what it queued with this block.
  for (cudaStream_t s : b.used_on) {
    try {
      cudaEvent_t e = take_event(p);
      DPB_CUDA_CHECK(cudaEventRecord(e, s));
      b.pending.push_back(e);
    } catch (const std::exception& ex) {
      log::error("cuda:{}: recording a free event: {}", device, ex.what());
    }
  }
  b.used_on.clear();
  p.waiting.push_back(b.ptr);
}

void record_stream(int device, void* ptr, cudaStream_t stream) {
  DevicePool& p = pool_of(device);
  std::lock_guard<std::mutex> lock(p.mu);
  Block* b = find_block(p, ptr);
  DPB_CHECK(b && b->live) << "record_stream: cuda:" << device << " address not allocated by the caching allocator";
  if (stream == b->stream) return;
  for (cudaStream_t s : b->used_on)
    if (s == stream) return;
  b->used_on.push_back(stream);
}

void empty_cache(int device) {
  DevicePool& p = pool_of(device);
  std::lock_guard<std::mutex> lock(p.mu);
  process_waiting(p);
  release_free(p, 0);
}

CacheStats cache_stats(int device) {
  DevicePool& p = pool_of(device);
  std::lock_guard<std::mutex> lock(p.mu);
  return p.stats;
}

uint64_t create_pool(int device) {
  DevicePool& p = pool_of(device);
  std::lock_guard<std::mutex> lock(p.mu);
  return p.next_pool++;
}

void begin_pool(int device, cudaStream_t stream, uint64_t pool) {
  DevicePool& p = pool_of(device);
  std::lock_guard<std::mutex> lock(p.mu);
  p.capture_pool[stream] = pool;
}

void end_pool(int device, cudaStream_t stream) {
  DevicePool& p = pool_of(device);
  std::lock_guard<std::mutex> lock(p.mu);
  p.capture_pool.erase(stream);
}

void release_pool(int device, uint64_t pool) noexcept {
  DevicePool& p = pool_of(device);
  std::lock_guard<std::mutex> lock(p.mu);
  try {
    process_waiting(p);
  } catch (...) {
  }
  // Live blocks of the pool join the general pool when they are freed.
  for (auto& [ptr, b] : p.blocks)
    if (b.pool == pool && b.live) b.pool = 0;
  release_free(p, pool);
}

// --- pinned host memory --------------------------------------------------------------------

namespace {

struct HostBlock {
  size_t size = 0;
  bool live = false;
  std::vector<std::pair<int, cudaEvent_t>> pending;  // (device, event)
};

struct HostPool {
  std::mutex mu;
  std::map<void*, HostBlock> blocks;
  std::multimap<size_t, void*> free;
  std::vector<void*> waiting;
};

HostPool& host_pool() {
  static auto* p = new HostPool;
  return *p;
}

void host_process_waiting(HostPool& p) {
  for (size_t i = 0; i < p.waiting.size();) {
    HostBlock& b = p.blocks.at(p.waiting[i]);
    bool done = true;
    for (auto& [dev, e] : b.pending) {
      if (cudaEventQuery(e) == cudaErrorNotReady) {
        (void)cudaGetLastError();
        done = false;
        break;
      }
    }
    if (!done) {
      ++i;
      continue;
    }
    for (auto& [dev, e] : b.pending) cudaEventDestroy(e);
    b.pending.clear();
    p.free.emplace(b.size, p.waiting[i]);
    p.waiting[i] = p.waiting.back();
    p.waiting.pop_back();
  }
}

}  // namespace

void* pinned_malloc(size_t bytes) {
  HostPool& p = host_pool();
  const size_t size = round_size(bytes);
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.waiting.empty()) host_process_waiting(p);
    auto it = p.free.lower_bound(size);
    if (it != p.free.end() && fits(it->first, size)) {
      void* ptr = it->second;
      p.free.erase(it);
      p.blocks.at(ptr).live = true;
      return ptr;
    }
  }
  void* ptr = nullptr;
  if (cudaHostAlloc(&ptr, size, cudaHostAllocDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(p.mu);
  p.blocks[ptr] = HostBlock{size, true, {}};
  return ptr;
}

void pinned_free(void* ptr) noexcept {
  if (!ptr) return;
  HostPool& p = host_pool();
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.blocks.find(ptr);
  if (it == p.blocks.end()) return;
  it->second.live = false;
  if (it->second.pending.empty()) p.free.emplace(it->second.size, ptr);
  else p.waiting.push_back(ptr);
}

bool is_pinned(const void* ptr) {
  HostPool& p = host_pool();
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.blocks.upper_bound(const_cast<void*>(ptr));
  if (it == p.blocks.begin()) return false;
  --it;
  return static_cast<const char*>(ptr) < static_cast<const char*>(it->first) + it->second.size;
}

void record_host_use(const void* ptr, int device, cudaStream_t stream) {
  HostPool& p = host_pool();
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.blocks.upper_bound(const_cast<void*>(ptr));
  if (it == p.blocks.begin()) return;
  --it;
  if (static_cast<const char*>(ptr) >= static_cast<const char*>(it->first) + it->second.size) return;
  cudaEvent_t e;
  DPB_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  DPB_CUDA_CHECK(cudaEventRecord(e, stream));
  it->second.pending.emplace_back(device, e);
}

}  // namespace dpb::cuda
