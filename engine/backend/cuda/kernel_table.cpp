// The CUDA backend's kernel table: every kernel of DPB_KERNELS and the CUDA-only ones.
#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/fused_attention.h"

namespace dpb::cuda {

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
#define DPB_CUDA_KERNEL(result, name, params) t.name = &cuda::name;
    DPB_KERNELS(DPB_CUDA_KERNEL)
    DPB_CUDA_ONLY_KERNELS(DPB_CUDA_KERNEL)
#undef DPB_CUDA_KERNEL
    return t;
  }();
  return table;
}

}  // namespace dpb::cuda
