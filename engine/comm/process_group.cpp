#include "engine/comm/process_group.h"

#include "engine/comm/gloo/process_group_gloo.h"
#include "engine/core/error.h"
#if DPB_WITH_CUDA
#include "engine/comm/nccl/process_group_nccl.h"
#endif

namespace dpb::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

std::unique_ptr<ProcessGroup> make_process_group(const std::string& backend, std::shared_ptr<Store> store, int rank,
                                                 int size, const GroupOptions& options, Device device) {
  if (backend == "gloo") return std::make_unique<ProcessGroupGloo>(std::move(store), rank, size, options);
  if (backend == "nccl") {
#if DPB_WITH_CUDA
    DPB_CHECK(device.is_cuda()) << "the nccl backend runs on GPUs; this rank's device is " << device
                                << " (use --backend=gloo for CPU ranks)";
    return std::make_unique<ProcessGroupNccl>(std::move(store), rank, size, options, device.index);
#else
    DPB_FAIL() << "the nccl backend needs the CUDA backend (configure with -DDPB_CUDA=ON); use --backend=gloo";
#endif
  }
  DPB_FAIL() << "unknown process group backend '" << backend << "' (valid: gloo, nccl)";
}

MeshGroups make_mesh_groups(const std::string& backend, const std::shared_ptr<Store>& store, int rank, int world,
                            int tp, const GroupOptions& options, Device device) {
  DPB_CHECK(tp >= 1 && world % tp == 0 && rank >= 0 && rank < world)
      << "a mesh of " << world << " ranks has no tensor-parallel groups of " << tp << " (it must divide the ranks)";
  const int data_rank = rank / tp, tensor_rank = rank % tp;
  MeshGroups m;
  // Tensor groups first on every rank: each rank joins its two groups in the same order.
  m.tensor = make_process_group(backend, std::make_shared<PrefixStore>("tp" + std::to_string(data_rank) + "/", store),
                                tensor_rank, tp, options, device);
  m.data = make_process_group(backend, std::make_shared<PrefixStore>("dp" + std::to_string(tensor_rank) + "/", store),
                              data_rank, world / tp, options, device);
  return m;
}

}  // namespace dpb::comm
