#include "engine/parallel/device_worker.h"

#include <optional>

#include "engine/backend/cpu/cpu_context.h"

namespace dpb {

DeviceWorker::DeviceWorker(Device device) : device_(device), thread_([this] { loop(); }) {}

DeviceWorker::~DeviceWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::future<void> DeviceWorker::submit(std::function<void()> task) {
  std::packaged_task<void()> t(std::move(task));
  auto f = t.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(t));
  }
  cv_.notify_one();
  return f;
}

void DeviceWorker::loop() {
  std::optional<cpu::CpuDeviceScope> scope;
  if (device_.is_cpu()) scope.emplace(device_.index);
  for (;;) {
    std::packaged_task<void()> t;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, nothing left
      t = std::move(tasks_.front());
      tasks_.pop_front();
    }
    t();
  }
}

}  // namespace dpb
