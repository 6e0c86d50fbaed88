// Linear layers on cuBLAS (cublasGemmEx). Row-major (N, in) activations and (out, in)
// weights are cuBLAS's column-major transposes, so each product is written for the
// transposed matrices:  y^T = W x^T,  dx^T = W^T dy^T,  dW^T = x^T dy.
// fp32: CUBLAS_COMPUTE_32F (no TF32); tf32: CUBLAS_COMPUTE_32F_FAST_TF32; bf16: bf16
// operands with fp32 accumulation, and the weight gradient accumulated straight into
// the f32 master gradient.
#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/cudnn_util.h"
#include "engine/backend/cuda/kernels.h"

namespace dpb::cuda {

namespace {


// C (m x n, col-major, ldc) = alpha op(A) op(B) + beta C
void gemm(OpEnv& env, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const Tensor& a,
          int64_t lda, const Tensor& b, int64_t ldb, float beta, void* c, DType c_type, int64_t ldc, const char* what) {
  const float alpha = 1.0f;
  DPB_CUBLAS_CHECK(cublasGemmEx(env.res.cublas, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                                &alpha, a.raw(), blas_type(a.dtype()), static_cast<int>(lda), b.raw(),
                                blas_type(b.dtype()), static_cast<int>(ldb), &beta, c, blas_type(c_type),
                                static_cast<int>(ldc), blas_compute_type(), CUBLAS_GEMM_DEFAULT))
      << what << " (" << m << " x " << n << " x " << k << ")";
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const DType dt = compute_dtype(x.device());
  const Tensor xc = x.to_dtype(dt), wc = w.to_dtype(dt);
  const int64_t N = x.size(0), in = x.size(1), out = w.size(0);
  OpEnv env = op_env(x);
  Tensor yc = y.dtype() == dt ? y : Tensor::empty(y.shape(), y.device(), dt);
  gemm(env, CUBLAS_OP_T, CUBLAS_OP_N, out, N, in, wc, in, xc, in, 0.0f, yc.raw(), dt, out, "linear forward");
  if (b.defined()) k::channel_bias_add(env.stream, yc.raw(), dt == DType::bf16, false, N, out, 1, b.data());
  if (!yc.shares_storage_with(y)) y.copy_from(yc.to_dtype(y.dtype()));
}

void linear_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  const DType dt = compute_dtype(dy.device());
  const Tensor dyc = dy.to_dtype(dt), wc = w.to_dtype(dt);
  const int64_t N = dy.size(0), out = w.size(0), in = w.size(1);
  OpEnv env = op_env(dy);
  Tensor dxc = dx.dtype() == dt ? dx : Tensor::empty(dx.shape(), dx.device(), dt);
  gemm(env, CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, wc, in, dyc, out, 0.0f, dxc.raw(), dt, in, "linear backward-data");
  if (!dxc.shares_storage_with(dx)) dx.copy_from(dxc.to_dtype(dx.dtype()));
}

void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db, bool accumulate) {
  const DType dt = compute_dtype(x.device());
  const Tensor xc = x.to_dtype(dt), dyc = dy.to_dtype(dt);
  const int64_t N = x.size(0), in = x.size(1), out = dy.size(1);
  OpEnv env = op_env(x);
  gemm(env, CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, xc, in, dyc, out, accumulate ? 1.0f : 0.0f, dw.raw(), DType::f32,
       in, "linear backward-weights");
  if (db.defined()) k::channel_sum(env.stream, dyc.raw(), dt == DType::bf16, false, N, out, 1, db.data(), accumulate);
}

}  // namespace dpb::cuda
