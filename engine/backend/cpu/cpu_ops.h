#pragma once
// The CPU kernels behind engine/backend/ops.h: the kernels every backend has, declared
// from DPB_KERNELS (engine/backend/kernel_table.h; same contracts as the ops there), and
// the CPU's own convolution controls. Called through ops:: dispatch, which checks shapes
// and devices first.
#include <string>

#include "engine/backend/kernel_table.h"

namespace dpb::cpu {

DPB_KERNELS(DPB_DECLARE_KERNEL)

// Which algorithms CPU convolutions may run: Winograd where the shape calls for it
// (conv2d.cpp) and direct elsewhere (auto), or direct only. From DPB_CPU_CONV=auto|direct
// (default auto; another value is an error naming these), unless set. Winograd rounds
// differently from direct convolution and from itself at another batch size (ResNet-18's
// parameters after two SGD steps differ from direct's by up to 1e-4 of their scale);
// direct is for comparing two runs element for element.
enum class ConvAlgorithms { automatic, direct_only };
void set_conv_algorithms(ConvAlgorithms a);
ConvAlgorithms conv_algorithms();

// The oneDNN implementation the forward convolution of x by w runs ("jit_wino_4x3:avx512_core",
// "jit:avx512_core", ...): which algorithm and kernels the rule picked.
std::string conv2d_forward_impl(const Tensor& x, const Tensor& w, bool bias, const ops::Conv2dParams& p);

}  // namespace dpb::cpu
