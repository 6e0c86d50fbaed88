#pragma once
// DataParallel: one process, N devices, torch.nn.DataParallel's semantics.
// Each forward copies the parameters and buffers of the wrapped module (on the
// primary device, devices[0]) to the replicas, scatters the batch along dim 0 in
// torch.chunk sizes (ceil(B / N) per chunk, so min(N, B) chunks when B <= N and
// possibly fewer than N devices in use otherwise), runs the replicas in parallel on
// their devices' worker threads and gathers the outputs on the primary device, where
// the loss is computed. backward() scatters the loss gradient back, runs the replica
// backwards in parallel and sums their gradients into the wrapped module's, on which
// the optimizer then steps. The primary's replica is the module itself (its buffers,
// e.g. BatchNorm running statistics, are the ones updated), as in PyTorch.
//
// The pitfalls are real and counted: with B < N devices sit idle; calling
// module().forward(x) directly bypasses the scatter and runs everything on the primary;
// an input that is not a tensor (a list of samples) is not scattered but replicated whole
// to every device (forward_replicated): each replica redoes the whole batch.
#include <memory>
#include <vector>

#include "engine/models/model.h"
#include "engine/parallel/device_worker.h"

namespace dpb {

struct DataParallelStats {
  int64_t forwards = 0;              // forward() calls
  std::vector<int64_t> samples;      // per device: samples it ran forward
  std::vector<int64_t> busy_ns;      // per device: time in replica forward + backward
  std::vector<int64_t> last_chunks;  // chunk sizes of the last scatter (one per device used)
  // The chunks of the largest batch scattered: a full step's, not an epoch's partial last batch.
  std::vector<int64_t> full_chunks;
  int64_t full_batch = 0;
};

class DataParallel {
 public:
  // Moves `module` to devices[0]. Throws dpb::Error for an empty or repeated device list.
  DataParallel(Model& module, std::vector<Device> devices);

  Tensor forward(const Tensor& x);
  // What DataParallel does with a non-tensor input: every device gets all of x; the
  // gathered output has N x B rows (the targets must be repeated to match).
  Tensor forward_replicated(const Tensor& x);
  // Replica backwards from the gradient of the gathered output; gradients end up summed
  // in module()'s parameters (accumulating like a plain backward would).
  void backward(const Tensor& grad_out);

  Model& module() { return module_; }
  const std::vector<Device>& devices() const { return devices_; }
  const DataParallelStats& stats() const { return stats_; }

  // torch.chunk(batch, parts): ceil(batch / parts) per chunk, the last one smaller.
  static std::vector<int64_t> chunk_sizes(int64_t batch, int parts);

 private:
  Tensor run_forward(const std::vector<Tensor>& inputs);
  Module& replica(size_t r);
  void run_on_replicas(const char* what, const std::function<void(size_t)>& task);

  Model& module_;
  std::vector<Device> devices_;
  std::vector<std::unique_ptr<Module>> replicas_;  // [0] unused: the module itself
  std::vector<std::unique_ptr<DeviceWorker>> workers_;
  std::vector<int64_t> chunks_;
  DataParallelStats stats_;
};

}  // namespace dpb
