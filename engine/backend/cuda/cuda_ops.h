#pragma once
// The CUDA kernels behind engine/backend/ops.h, declared from DPB_KERNELS
// (engine/backend/kernel_table.h; same contracts as the ops there), on the calling
// thread's current stream of the tensors' device. Called through ops:: dispatch, which
// checks shapes and devices first.
//
// Precision (engine/backend/precision.h): activations come and go in compute_dtype()
// (bf16 under --precision=bf16); convolutions run channels-last under tf32 and bf16
// (cuda::conv_layout()). Parameters and their gradients are always f32 and plain:
// an op converts a weight or a gradient where the math needs another form, and
// compute_weight() gives a layer the converted weight once per step.
#include "engine/backend/kernel_table.h"

namespace dpb::cuda {

DPB_KERNELS(DPB_DECLARE_KERNEL)

}  // namespace dpb::cuda
