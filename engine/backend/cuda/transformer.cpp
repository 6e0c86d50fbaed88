// The transformer's ops on CUDA. Attention runs as llm.c's does without a fused kernel:
// the heads are split out of the fused projection into (N, H, T, D) buffers, the four
// products are cuBLAS strided-batched GEMMs over the N x H heads (fp32, TF32 or bf16 as
// --precision says), and the causal softmax and its backward are one warp per row.
#include <cmath>
#include <cstring>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/cudnn_util.h"
#include "engine/backend/cuda/kernels.h"

namespace dpb::cuda {

namespace {

// Row-major batched C (M x P) = alpha op(A) op(B), op(A) (M x K), op(B) (K x P), over
// `batch` consecutive matrices of each. trans_a: A is stored (K x M); trans_b: B is
// stored (P x K). Column-major cuBLAS computes C^T = op(B)^T op(A)^T.
void bmm(OpEnv& env, bool trans_a, bool trans_b, int64_t M, int64_t P, int64_t K, const void* a, const void* b,
         void* c, DType dt, float alpha, int64_t batch, const char* what) {
  const float beta = 0.0f;
  const cudaDataType_t t = blas_type(dt);
  DPB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      env.res.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(P), static_cast<int>(M), static_cast<int>(K), &alpha, b, t,
      static_cast<int>(trans_b ? K : P), P * K, a, t, static_cast<int>(trans_a ? M : K), M * K, &beta, c, t,
      static_cast<int>(P), M * P, static_cast<int>(batch), blas_compute_type(), CUBLAS_GEMM_DEFAULT))
      << what << " (" << batch << " x " << M << " x " << P << " x " << K << ")";
}

struct HeadShape {
  int64_t N, T, H, D;
  int64_t heads() const { return N * H; }
  Shape shape() const { return {N, H, T, D}; }
};
}  // namespace

// Tokens outside [0, vocab) are not checked on the device (reading them back would
// synchronize); rows for another rank's part of the vocabulary come out zero.
void embedding_forward(const Tensor& tokens, const Tensor& table, int64_t first, int64_t /*vocab*/, Tensor& y) {
  OpEnv env = op_env(tokens);
  k::embedding_forward(env.stream, tokens.data_i32(), table.data(), y.raw(), is_bf16(y), tokens.numel(),
                       table.size(1), table.size(0), first);
}

void embedding_backward(const Tensor& tokens, const Tensor& dy, int64_t first, Tensor& dtable, bool accumulate) {
  OpEnv env = op_env(tokens);
  k::embedding_backward(env.stream, tokens.data_i32(), dy.raw(), is_bf16(dy), dtable.data(), tokens.numel(),
                        dtable.size(1), dtable.size(0), first, accumulate);
}

void position_embedding_forward(const Tensor& x, const Tensor& table, Tensor& y) {
  OpEnv env = op_env(x);
  k::position_embedding_forward(env.stream, x.raw(), table.data(), y.raw(), is_bf16(x), x.size(0),
                                x.size(1) * x.size(2));
}

void position_embedding_backward(const Tensor& dy, Tensor& dtable, bool accumulate) {
  OpEnv env = op_env(dy);
  k::position_embedding_backward(env.stream, dy.raw(), is_bf16(dy), dtable.data(), dy.size(0), dy.size(1) * dy.size(2),
                                 dtable.numel(), accumulate);
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& rstd, float eps) {
  OpEnv env = op_env(x);
  const int64_t C = x.size(x.ndim() - 1);
  k::layernorm_forward(env.stream, x.raw(), gamma.data(), beta.data(), y.raw(), is_bf16(x), mean.data(), rstd.data(),
                       x.numel() / C, C, eps);
}

void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool accumulate) {
  OpEnv env = op_env(x);
  const int64_t C = x.size(x.ndim() - 1);
  const Tensor dyc = dy.to_dtype(x.dtype());
  k::layernorm_backward(env.stream, x.raw(), dyc.raw(), is_bf16(x), gamma.data(), mean.data(), rstd.data(),
                        dx.defined() ? dx.raw() : nullptr, dgamma.data(), dbeta.data(), x.numel() / C, C, accumulate);
}

void gelu_forward(const Tensor& x, Tensor& y) {
  OpEnv env = op_env(x);
  k::gelu_forward(env.stream, x.raw(), y.raw(), is_bf16(x), x.numel());
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  OpEnv env = op_env(x);
  const Tensor dyc = dy.to_dtype(x.dtype());
  k::gelu_backward(env.stream, x.raw(), dyc.raw(), dx.raw(), is_bf16(x), x.numel());
}

void attention_forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& probs) {
  OpEnv env = op_env(qkv);
  const DType dt = qkv.dtype();
  const HeadShape h{qkv.size(0), qkv.size(1), heads, qkv.size(2) / 3 / heads};
  Tensor q = Tensor::empty(h.shape(), qkv.device(), dt), k = Tensor::empty(h.shape(), qkv.device(), dt),
         v = Tensor::empty(h.shape(), qkv.device(), dt), yh = Tensor::empty(h.shape(), qkv.device(), dt);
  k::split_heads(env.stream, qkv.raw(), q.raw(), k.raw(), v.raw(), dt == DType::bf16, h.N, h.T, h.H, h.D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(h.D));
  bmm(env, false, true, h.T, h.T, h.D, q.raw(), k.raw(), probs.raw(), dt, scale, h.heads(), "attention q k^T");
  k::causal_softmax(env.stream, probs.raw(), dt == DType::bf16, h.heads() * h.T, h.T);
  bmm(env, false, false, h.T, h.D, h.T, probs.raw(), v.raw(), yh.raw(), dt, 1.0f, h.heads(), "attention probs v");
  Tensor yc = y.dtype() == dt ? y : Tensor::empty(y.shape(), y.device(), dt);
  k::heads_to_rows(env.stream, yh.raw(), yc.raw(), dt == DType::bf16, h.N, h.T, h.H, h.D);
  if (!yc.shares_storage_with(y)) y.copy_from(yc.to_dtype(y.dtype()));
}

void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, int64_t heads, Tensor& dqkv) {
  OpEnv env = op_env(qkv);
  const DType dt = qkv.dtype();
  const bool bf16 = dt == DType::bf16;
  const HeadShape h{qkv.size(0), qkv.size(1), heads, qkv.size(2) / 3 / heads};
  const Device dev = qkv.device();
  Tensor q = Tensor::empty(h.shape(), dev, dt), k = Tensor::empty(h.shape(), dev, dt),
         v = Tensor::empty(h.shape(), dev, dt), dyh = Tensor::empty(h.shape(), dev, dt);
  k::split_heads(env.stream, qkv.raw(), q.raw(), k.raw(), v.raw(), bf16, h.N, h.T, h.H, h.D);
  const Tensor dyc = dy.to_dtype(dt);
  k::rows_to_heads(env.stream, dyc.raw(), dyh.raw(), bf16, h.N, h.T, h.H, h.D);
  Tensor dp = Tensor::empty(probs.shape(), dev, dt);
  Tensor dq = Tensor::empty(h.shape(), dev, dt), dk = Tensor::empty(h.shape(), dev, dt),
         dv = Tensor::empty(h.shape(), dev, dt);
  bmm(env, false, true, h.T, h.T, h.D, dyh.raw(), v.raw(), dp.raw(), dt, 1.0f, h.heads(), "attention dy v^T");
  bmm(env, true, false, h.T, h.D, h.T, probs.raw(), dyh.raw(), dv.raw(), dt, 1.0f, h.heads(), "attention probs^T dy");
  k::causal_softmax_backward(env.stream, probs.raw(), dp.raw(), bf16, h.heads() * h.T, h.T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(h.D));
  bmm(env, false, false, h.T, h.D, h.T, dp.raw(), k.raw(), dq.raw(), dt, scale, h.heads(), "attention dS k");
  bmm(env, true, false, h.T, h.D, h.T, dp.raw(), q.raw(), dk.raw(), dt, scale, h.heads(), "attention dS^T q");
  Tensor dc = dqkv.dtype() == dt ? dqkv : Tensor::empty(dqkv.shape(), dev, dt);
  k::merge_heads(env.stream, dq.raw(), dk.raw(), dv.raw(), dc.raw(), bf16, h.N, h.T, h.H, h.D);
  if (!dc.shares_storage_with(dqkv)) dqkv.copy_from(dc.to_dtype(dqkv.dtype()));
}

double sum_squares(const Tensor& x) {
  OpEnv env = op_env(x);
  Tensor out = Tensor::empty({2}, x.device());  // one double
  k::sum_squares(env.stream, x.data(), x.storage_numel(), static_cast<double*>(out.raw()));
  const std::vector<float> host = out.to_vector();
  double v;
  std::memcpy(&v, host.data(), sizeof v);
  return v;
}

}  // namespace dpb::cuda
