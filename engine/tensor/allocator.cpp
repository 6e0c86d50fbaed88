#include "engine/tensor/allocator.h"

#include <array>
#include <atomic>
#include <cstdlib>
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
};

// Freed CPU blocks by rounded size, reused by the next allocation of that size.
struct HostCache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;
  int64_t bytes = 0;
};

HostCache& host_cache(int index) {
  // Never destroyed: tensors in static objects may be freed during exit.
  static auto* caches = new std::array<HostCache, kMaxDevices>;
  return (*caches)[static_cast<size_t>(index)];
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

void account_alloc(Counters& c, size_t bytes) {
  const int64_t now = c.current.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
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
      auto it = cache.free.find(rounded);
      if (it != cache.free.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cache.bytes -= static_cast<int64_t>(rounded);
      }
    }
    if (!p) p = std::aligned_alloc(kCpuAlignment, rounded);
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
    const size_t rounded = host_block_size(bytes);
    HostCache& cache = host_cache(device.index);
    bool kept = false;
    {
      std::lock_guard<std::mutex> lock(cache.mu);
      if (cache.bytes + static_cast<int64_t>(rounded) <= kMaxCachedBytes) {
        cache.free[rounded].push_back(ptr);
        cache.bytes += static_cast<int64_t>(rounded);
        kept = true;
      }
    }
    if (!kept) std::free(ptr);
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
    for (void* p : blocks) std::free(p);
  cache.free.clear();
  cache.bytes = 0;
}

void reset_peak_memory(const Device& device) {
  auto& c = counters(device);
  c.peak.store(c.current.load());
}

}  // namespace dpb
