#pragma once
// A CUDA graph of the work one thread queues on a device's current stream between
// begin_capture() and end_capture(), replayed with replay(): one launch instead of a
// few hundred, so a step's speed no longer depends on how fast the host can queue
// kernels. During capture nothing runs; allocations come from a private memory pool
// that only this graph uses, so the addresses the graph reads and writes stay valid
// for every replay. Inputs must be written into tensors that existed before capture (at
// fixed addresses) before each replay. CUDA devices only.
#include <cstdint>
#include <memory>

#include "engine/tensor/device.h"

namespace dpb {

class DeviceGraph {
 public:
  explicit DeviceGraph(Device device);
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  void begin_capture();
  void end_capture();
  // Queues the captured work on the device's current stream.
  void replay();
  bool captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dpb
