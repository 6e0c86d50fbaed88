#pragma once
// Winograd F(4x4, 3x3) convolution (Lavin and Gray, "Fast Algorithms for Convolutional
// Neural Networks", 2016), for processors where oneDNN has no Winograd kernels (its are
// AVX-512 only): 3x3, stride 1, padding 1, on channel-blocked activations (nChw8c: eight
// channels of one pixel side by side), parameters plain (O, I, 3, 3).
//
// Each 4x4 block of outputs is computed from a 6x6 block of inputs as
//   Y = A^T [ sum over input channels of (G g G^T) . (B^T d B) ] A
// (the element-wise product over 36 points, each a matrix product over channels): 36
// multiplications per output block and channel pair where direct convolution takes 144.
// Per chunk of blocks (sized to stay in the core's cache), the inputs are transformed, the
// 36 products run on oneDNN's GEMM, and the outputs are transformed back. The data
// gradient is the same convolution of the output gradient by the flipped, transposed
// filter; the weight gradient sums, over blocks, the transformed output gradients
// (A dY A^T) times the transformed inputs, then takes G^T . G of the sum.
//
// It rounds differently from direct convolution (relative differences of about 1e-5 in
// ResNet-18's activations), as oneDNN's Winograd does.
#include <cstdint>

namespace dpb::cpu::winograd {

// The channel block of the activations these functions take.
constexpr int kBlock = 8;

// Whether the transforms' vector code runs: the processor has AVX2 with FMA, and the
// kernels are not held below AVX2 (DPB_MAX_CPU_ISA, simd.h).
bool processor_supported();

// y (N, K, H, W) = x (N, C, H, W) convolved with w (K, C, 3, 3), plus bias (K; may be
// null). C and K multiples of kBlock.
void forward(const float* x, const float* w, const float* bias, float* y, int64_t n, int64_t c, int64_t h, int64_t wd,
             int64_t k);
// dx (N, C, H, W) from dy (N, K, H, W) and w (K, C, 3, 3).
void backward_data(const float* dy, const float* w, float* dx, int64_t n, int64_t c, int64_t h, int64_t wd,
                   int64_t k);
// dw (K, C, 3, 3) (and db (K), when not null) from x and dy; added to what they hold when
// `accumulate`.
void backward_weights(const float* x, const float* dy, float* dw, float* db, int64_t n, int64_t c, int64_t h,
                      int64_t wd, int64_t k, bool accumulate);

}  // namespace dpb::cpu::winograd
