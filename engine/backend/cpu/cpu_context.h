#pragma once
// What a logical CPU device `cpu:k` owns: a oneDNN engine and stream, its thread
// budget and a cache of oneDNN primitives keyed by shape (building a primitive
// descriptor costs far more than running a small layer, so each is built once).
//
// Thread budget: oneDNN here runs on OpenMP, whose thread count is a per-thread
// setting; CpuDeviceScope sets it for the calling thread, so N logical devices
// driven from N threads use N x budget threads and do not oversubscribe.
#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace dpb::cpu {

class CpuContext {
 public:
  explicit CpuContext(int index);

  int index() const { return index_; }
  const dnnl::engine& engine() const { return engine_; }
  dnnl::stream& stream() { return stream_; }

  // Returns the cached object for `key`, building it with make() the first time.
  // make() runs without the lock held: it may itself look up other entries (a
  // backward primitive needs its forward's descriptor as a hint).
  template <typename T, typename Make>
  std::shared_ptr<T> cached(const std::string& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(key);
      if (it != cache_.end()) return std::static_pointer_cast<T>(it->second);
    }
    auto obj = std::make_shared<T>(make());
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = cache_.emplace(key, obj);
    return std::static_pointer_cast<T>(it->second);
  }

 private:
  int index_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<void>> cache_;
};

// Logical CPU devices there can be (cpu:0 .. cpu:kMaxCpuDevices-1).
inline constexpr int kMaxCpuDevices = 64;
CpuContext& context(int index);

// Threads each logical CPU device may use (default: all hardware threads for cpu:0 when
// it is the only device). Set before devices start running.
void set_threads_per_device(int threads);
int threads_per_device();
int hardware_threads();

// Binds the calling thread to logical CPU device `index` for its lifetime: sets the
// OpenMP thread budget of this thread and restores the previous one on exit.
class CpuDeviceScope {
 public:
  explicit CpuDeviceScope(int index);
  ~CpuDeviceScope();
  CpuDeviceScope(const CpuDeviceScope&) = delete;
  CpuDeviceScope& operator=(const CpuDeviceScope&) = delete;

 private:
  int previous_threads_;
};

}  // namespace dpb::cpu
