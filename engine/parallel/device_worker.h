#pragma once
// A thread bound to one device: on a logical CPU device it holds that device's
// OpenMP thread budget (CpuDeviceScope) for its whole life, so replicas or pipeline
// stages on N devices run side by side on N x budget threads. Tasks run in order.
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/tensor/device.h"

namespace dpb {

class DeviceWorker {
 public:
  explicit DeviceWorker(Device device);
  ~DeviceWorker();
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;

  const Device& device() const { return device_; }
  // Runs `task` on the worker thread; the future carries its exception, if any.
  std::future<void> submit(std::function<void()> task);

 private:
  void loop();

  Device device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dpb
