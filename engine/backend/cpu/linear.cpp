// Linear layers on oneDNN's GEMM (dnnl_sgemm). Weights are stored (out, in) as in
// PyTorch; every transpose is a GEMM argument, never a copy.
//
// Every product is the GEMM over the operands in their own layouts (nothing
// packed or copied by us). It replaced oneDNN's matmul primitive (brgemm kernels, the
// weight read transposed forward, the second operand reordered into oneDNN's layout for
// the backward products with many rows), faster on every product measured: the figures,
// per product, are in reports/results/cpu-gemm-simulate-2026-11-25.md.
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/fast_math.h"

#include <algorithm>

namespace dpb::cpu {

namespace {

// sum over rows of dy (M, N) into db (N): row by row, so every pass reads memory in order
// and the inner loop vectorizes (threads split the columns).
DPB_SIMD_INLINE void add_rows_body(const float* g, float* out, int64_t M, int64_t N, int64_t stride) {
  for (int64_t i = 0; i < M; ++i) {
    const float* row = g + i * stride;
    for (int64_t j = 0; j < N; ++j) out[j] += row[j];
  }
}
DPB_SIMD_KERNEL(void, add_rows, (const float* g, float* out, int64_t M, int64_t N, int64_t stride), (g, out, M, N, stride))

void bias_grad(const Tensor& dy, Tensor& db, bool accumulate) {
  const int64_t M = dy.size(0), N = dy.size(1);
  const float* g = dy.data();
  float* out = db.data();
  if (!accumulate) std::fill_n(out, N, 0.0f);
  constexpr int64_t kCols = 256;
#pragma omp parallel for schedule(static) if (M * N > (1 << 16) && N > kCols)
  for (int64_t j0 = 0; j0 < N; j0 += kCols) add_rows(g + j0, out + j0, M, std::min(kCols, N - j0), N);
}
}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  // y (rows, out) = x (rows, in) x w^T (in, out) [+ b]: the bias written first, the
  // product added to it.
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  float* out = y.data();
  if (b.defined()) {
    const float* bias = b.data();
    for (int64_t i = 0; i < M; ++i) std::copy_n(bias, N, out + i * N);
  }
  sgemm('N', 'T', M, N, K, 1.0f, x.data(), K, w.data(), K, b.defined() ? 1.0f : 0.0f, out, N);
}

void linear_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  // dx (rows, in) = dy (rows, out) x w (out, in)
  const int64_t M = dy.size(0), K = dy.size(1), N = w.size(1);
  sgemm('N', 'N', M, N, K, 1.0f, dy.data(), K, w.data(), N, 0.0f, dx.data(), N);
}

void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db, bool accumulate) {
  // dw (out, in) (+)= dy^T (out, rows) x x (rows, in)
  const int64_t M = dy.size(1), K = dy.size(0), N = x.size(1);
  sgemm('T', 'N', M, N, K, 1.0f, dy.data(), M, x.data(), N, accumulate ? 1.0f : 0.0f, dw.data(), N);
  if (db.defined()) bias_grad(dy, db, accumulate);
}

}  // namespace dpb::cpu
