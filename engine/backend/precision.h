#pragma once
// The math precision of a run (--precision), process-wide:
//   fp32  strict IEEE fp32 (no TF32 anywhere)
//   tf32  fp32 tensors; convolutions and matrix products on TF32 tensor cores (CUDA)
//   bf16  bf16 activations and math with fp32 accumulation; parameters, gradients and
//         optimizer state stay fp32 (the master weights), as torch.autocast(bfloat16)
// Layers ask compute_dtype(device) for the dtype their activations are computed in:
// always f32 on the CPU, bf16 on CUDA devices under bf16.
#include <string>

#include "engine/tensor/device.h"
#include "engine/tensor/dtype.h"

namespace dpb {

enum class Precision { fp32, tf32, bf16 };

void set_precision(Precision p);
Precision precision();
// Throws dpb::Error naming the valid precisions.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision p);
DType compute_dtype(const Device& device);

// Deterministic algorithms only (--deterministic, as torch.backends.cudnn.deterministic):
// convolutions use only algorithms cuDNN reports as deterministic, so a run repeats
// bit for bit; the fastest algorithm may be given up for it.
void set_deterministic(bool on);
bool deterministic();

}  // namespace dpb
