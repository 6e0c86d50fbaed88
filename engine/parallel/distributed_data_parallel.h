#pragma once
// DistributedDataParallel: one process per rank, torch.nn.parallel.DistributedDataParallel's
// semantics. Construction checks that every rank holds the same parameter shapes (a
// mismatch names the first differing parameter instead of hanging), then broadcasts the
// parameters and buffers from rank 0. forward() first re-broadcasts the buffers from rank
// 0 (broadcast_buffers=True: BatchNorm running statistics stay identical). backward()
// runs the module's backward while the Reducer all-reduces gradient buckets as they
// become ready, then waits for them; after it every rank holds the average gradient, and
// the optimizer steps on each rank as on one device. With sync off (no_sync) backward
// only accumulates gradients locally, for gradient accumulation.
#include <memory>

#include "engine/comm/process_group.h"
#include "engine/models/model.h"
#include "engine/parallel/reducer.h"

namespace dpb {

// Every rank holds the same parameter count and shapes; otherwise a dpb::Error, starting
// with `who`, that names the first parameter that differs (instead of a hang).
void check_same_parameter_shapes(Module& module, comm::ProcessGroup& group, const char* who);
// Rank 0's values of `tensors` on every rank (one broadcast of them as one flat tensor).
void broadcast_from_rank0(comm::ProcessGroup& group, const std::vector<Tensor*>& tensors);

struct DdpOptions {
  int64_t first_bucket_bytes = int64_t{1} << 20;
  int64_t bucket_bytes = int64_t{25} << 20;  // --bucket-mb
  bool broadcast_buffers = true;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(Model& module, comm::ProcessGroup& group, DdpOptions options = {});

  Tensor forward(const Tensor& x);
  void backward(Tensor grad_out);
  // Off: the next backwards only accumulate gradients (torch's `with ddp.no_sync():`).
  void set_sync(bool on) { sync_ = on; }
  bool sync() const { return sync_; }

  Model& module() { return module_; }
  comm::ProcessGroup& group() { return group_; }
  Reducer& reducer() { return *reducer_; }
  // The last backward's interval (steady-clock ns): the compute that the bucket
  // all-reduces overlap with.
  int64_t backward_begin_ns() const { return backward_begin_ns_; }
  int64_t backward_end_ns() const { return backward_end_ns_; }

 private:
  Model& module_;
  comm::ProcessGroup& group_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
  bool sync_ = true;
  int64_t backward_begin_ns_ = 0, backward_end_ns_ = 0;
};

}  // namespace dpb
