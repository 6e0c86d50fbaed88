#pragma once
// Host-to-device copies that overlap with compute. start() copies a pinned host tensor
// on the device's copy stream, so the copy runs while the compute stream works on the
// previous step; take() makes the calling thread's current stream wait for the copy
// (a stream-side wait: the host does not block) and hands over the tensor. The memory
// is allocated on the copy stream and marked as used on the consumer's stream, so the
// allocator does not reuse it before the consumer is done. On the CPU, or without the
// CUDA backend, start() copies at once.
#include <memory>

#include "engine/tensor/tensor.h"

namespace dpb {

class DeviceTransfer {
 public:
  DeviceTransfer() = default;
  static DeviceTransfer start(const Tensor& host, Device device);
  Tensor take();
  bool pending() const { return ready_ != nullptr; }

 private:
  Tensor tensor_;
  std::shared_ptr<void> ready_;  // the copy's completion event (CUDA)
};

}  // namespace dpb
