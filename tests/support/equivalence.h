#pragma once
// How far two trainings that should agree are apart, judged against what floating-point
// reordering can produce on any x86-64 processor the build supports: another mini-batch
// chunking, oneDNN's AVX2 or AVX-512 kernels, our own kernels' vector widths
// (engine/backend/cpu/simd.h) each sum in another order. That is a small part of how far
// a parameter moved; a mistake in a parallel mode (a wrong scatter, a missed gradient, a
// doubled reduction) is a large part of it.
#include <vector>

namespace dpb::test {

using ParamValues = std::vector<std::vector<float>>;

// Per parameter, the norm of b - a over the norm of a's move from `initial` (or over
// 1e-3 of the parameter's norm where it barely moved); the worst parameter's.
double moved_relative_difference(const ParamValues& initial, const ParamValues& a, const ParamValues& b);

// The bound the equivalence tests hold a parallel mode to: 1 % of a move. Measured on an
// AMD EPYC (AVX2, no AVX-512): reordering 7e-6 to 1.2e-3 of a move (ResNet-18 through
// DataParallel at 3 x 2 against 6); each mistake above, made in a single-device run of
// the MLP, LeNet, ResNet-18 or ResNet-50, 0.36 to 1.22 of a move. The tests that use it check, per model, that it still catches
// each mistake.
constexpr double kMovedTolerance = 1e-2;

}  // namespace dpb::test
