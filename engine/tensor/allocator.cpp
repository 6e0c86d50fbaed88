#include "engine/tensor/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"
#include "engine/tensor/device_backend.h"

namespace dpb {

namespace {
constexpr int kMaxDevices = 64;
constexpr size_t kCpuAlignment = 64;

constexpr int64_t kMaxCachedBytes = int64_t{2} << 30;  // per CPU device

struct Counters {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> ever{0};  // the most ever live at once (never reset)
};

// The cache may hold freed blocks while live + cached stays within the most ever live
// plus this share of it (and kCacheFloor): a block a step frees in one size is given back
// before a new one of another size is mapped, so the process's resident memory follows
// what its tensors need at most, not the sum of every size's own peak.
constexpr double kCacheSlack = 0.10;
constexpr int64_t kCacheFloor = int64_t{64} << 20;

// A cached block may serve a smaller allocation, up to this factor (the best fit: the
// smallest cached block that is large enough). A model whose layers differ in size (a
// ResNet's stages) frees under FSDP a unit's buffers of one size and gathers the next
// unit's in another; with exact sizes only, the cache held every size and the bound
// below gave blocks back that the next step mapped and faulted in again.
constexpr size_t kFitNumerator = 3, kFitDenominator = 2;

// Freed CPU blocks by rounded size, reused by the next allocation that fits.
struct HostCache {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free;
  // Blocks handed out larger than their allocation asked for, by address: their size.
  std::unordered_map<void*, size_t> larger;
  int64_t bytes = 0;
};

HostCache& host_cache(int index) {
  // Never destroyed: tensors in static objects may be freed during exit.
  static auto* caches = new std::array<HostCache, kMaxDevices>;
  return (*caches)[static_cast<size_t>(index)];
}

// Blocks of 1 MiB and more are mapped on their own, so that freeing one (empty_cache, or
// a block the cache has no room for) gives its pages back to the system at once. Through
// malloc, glibc's mmap threshold rises to the size of every mapped block freed (up to
// 32 MiB), after which such blocks come from its heap and freeing them shrinks nothing:
// a model built, sharded and dropped would stay in the process's resident memory. Under
// AddressSanitizer everything goes through malloc, which it checks.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kMapFrom = SIZE_MAX;
#else
constexpr size_t kMapFrom = size_t{1} << 20;
#endif

void* host_block_alloc(size_t rounded) {
  if (rounded < kMapFrom) return std::aligned_alloc(kCpuAlignment, rounded);
  void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void host_block_free(void* p, size_t rounded) noexcept {
  if (rounded < kMapFrom) std::free(p);
  else ::munmap(p, rounded);
}

size_t host_block_size(size_t bytes) {
  const size_t unit = bytes >= (size_t{64} << 10) ? 4096 : kCpuAlignment;
  return (bytes + unit - 1) / unit * unit;
}

Counters& counters(const Device& d) {
  static std::array<Counters, kMaxDevices> cpu;
  static std::array<Counters, kMaxDevices> cuda;
  DPB_CHECK(d.index >= 0 && d.index < kMaxDevices)
      << "device index " << d.index << " out of range (0.." << kMaxDevices - 1 << ")";
  return d.is_cpu() ? cpu[static_cast<size_t>(d.index)] : cuda[static_cast<size_t>(d.index)];
}

void raise_to(std::atomic<int64_t>& a, int64_t v) {
  int64_t seen = a.load();
  while (v > seen && !a.compare_exchange_weak(seen, v)) {
  }
}

void account_alloc(Counters& c, size_t bytes) {
  const int64_t now = c.current.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  raise_to(c.peak, now);
  raise_to(c.ever, now);
  c.allocations.fetch_add(1);
}
}  // namespace

void* device_alloc(const Device& device, size_t bytes) {
  if (bytes == 0) bytes = kCpuAlignment;
  void* p = nullptr;
  if (device.is_cpu()) {
    (void)counters(device);  // checks the index
    const size_t rounded = host_block_size(bytes);
    HostCache& cache = host_cache(device.index);
    {
      std::lock_guard<std::mutex> lock(cache.mu);
      auto it = cache.free.lower_bound(rounded);
      if (it != cache.free.end() && it->first * kFitDenominator <= rounded * kFitNumerator) {
        const size_t size = it->first;
        p = it->second.back();
        it->second.pop_back();
        if (it->second.empty()) cache.free.erase(it);
        cache.bytes -= static_cast<int64_t>(size);
        if (size != rounded) cache.larger.emplace(p, size);
      }
    }
    if (!p) {
      // A new block: first give back cached ones (largest first) while live + cached +
      // this block would pass the bound.
      Counters& c = counters(device);
      const int64_t need = static_cast<int64_t>(rounded);
      const int64_t live = c.current.load();
      const auto bound = std::max(static_cast<int64_t>(static_cast<double>(std::max(c.ever.load(), live + need)) *
                                                       (1.0 + kCacheSlack)),
                                  live + need + kCacheFloor);
      std::vector<std::pair<void*, size_t>> drop;
      {
        std::lock_guard<std::mutex> lock(cache.mu);
        // Past the bound, the cache would give back its largest blocks and map this one
        // anew: a cached block that is large enough serves it instead (the smallest such),
        // already mapped and faulted in.
        if (live + cache.bytes + need > bound)
          if (auto it = cache.free.lower_bound(rounded); it != cache.free.end()) {
            const size_t size = it->first;
            p = it->second.back();
            it->second.pop_back();
            if (it->second.empty()) cache.free.erase(it);
            cache.bytes -= static_cast<int64_t>(size);
            cache.larger.emplace(p, size);
          }
        while (!p && !cache.free.empty() && live + cache.bytes + need > bound) {
          auto big = std::prev(cache.free.end());  // (sizes with no block left are erased)
          drop.emplace_back(big->second.back(), big->first);
          big->second.pop_back();
          cache.bytes -= static_cast<int64_t>(big->first);
          if (big->second.empty()) cache.free.erase(big);
        }
      }
      for (auto [q, size] : drop) host_block_free(q, size);
      if (!p) p = host_block_alloc(rounded);
    }
    DPB_CHECK(p != nullptr) << "out of host memory allocating " << bytes << " bytes on " << device;
  } else {
    p = device_backend(device.kind).allocate(device.index, bytes);
  }
  account_alloc(counters(device), bytes);
  return p;
}

void device_free(const Device& device, void* ptr, size_t bytes) noexcept {
  if (!ptr) return;
  if (bytes == 0) bytes = kCpuAlignment;
  if (device.is_cpu()) {
    size_t rounded = host_block_size(bytes);
    HostCache& cache = host_cache(device.index);
    bool kept = false;
    {
      std::lock_guard<std::mutex> lock(cache.mu);
      if (!cache.larger.empty())
        if (auto it = cache.larger.find(ptr); it != cache.larger.end()) {
          rounded = it->second;
          cache.larger.erase(it);
        }
      if (cache.bytes + static_cast<int64_t>(rounded) <= kMaxCachedBytes) {
        cache.free[rounded].push_back(ptr);
        cache.bytes += static_cast<int64_t>(rounded);
        kept = true;
      }
    }
    if (!kept) host_block_free(ptr, rounded);
  } else {
    if (auto* b = find_device_backend(device.kind)) b->release(device.index, ptr);
  }
  if (device.index >= 0 && device.index < kMaxDevices) counters(device).current.fetch_sub(static_cast<int64_t>(bytes));
}

void* pinned_alloc(size_t bytes, bool* pinned) {
  *pinned = false;
  if (auto* b = find_device_backend(DeviceKind::cuda)) {
    if (void* p = b->allocate_pinned(bytes)) {
      *pinned = true;
      account_alloc(counters(Device::cpu(0)), bytes);
      return p;
    }
  }
  return device_alloc(Device::cpu(0), bytes);
}

void pinned_free(void* ptr, size_t bytes, bool pinned) noexcept {
  if (!pinned) {
    device_free(Device::cpu(0), ptr, bytes);
    return;
  }
  if (auto* b = find_device_backend(DeviceKind::cuda)) b->release_pinned(ptr);
  counters(Device::cpu(0)).current.fetch_sub(static_cast<int64_t>(bytes));
}

MemoryStats memory_stats(const Device& device) {
  auto& c = counters(device);
  MemoryStats s{c.current.load(), c.peak.load(), c.allocations.load(), 0};
  if (device.is_cpu()) {
    HostCache& cache = host_cache(device.index);
    std::lock_guard<std::mutex> lock(cache.mu);
    s.cached_bytes = cache.bytes;
  }
  if (device.is_cuda())
    if (auto* b = find_device_backend(device.kind)) s.cached_bytes = b->cached_bytes(device.index);
  return s;
}

void empty_cache(const Device& device) {
  if (!device.is_cpu()) {
    if (auto* b = find_device_backend(device.kind)) b->empty_cache(device.index);
    return;
  }
  (void)counters(device);
  HostCache& cache = host_cache(device.index);
  std::lock_guard<std::mutex> lock(cache.mu);
  for (auto& [size, blocks] : cache.free)
    for (void* p : blocks) host_block_free(p, size);
  cache.free.clear();
  cache.bytes = 0;
}

void reset_peak_memory(const Device& device) {
  auto& c = counters(device);
  c.peak.store(c.current.load());
}

}  // namespace dpb
