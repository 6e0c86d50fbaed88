// The CPU backend's kernel table: every kernel of DPB_KERNELS, none of the CUDA-only
// ones (their ops fail naming the op on a CPU device).
#include "engine/backend/cpu/cpu_ops.h"

namespace dpb::cpu {

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
#define DPB_CPU_KERNEL(result, name, params) t.name = &cpu::name;
    DPB_KERNELS(DPB_CPU_KERNEL)
#undef DPB_CPU_KERNEL
    return t;
  }();
  return table;
}

// Weights are used as stored: the CPU computes in f32 and plain layout.
Tensor compute_weight(const Tensor& w) { return w; }

}  // namespace dpb::cpu
