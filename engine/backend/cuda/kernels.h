#pragma once
// Launchers of the engine's own CUDA kernels (the .cu files), on raw pointers so the
// .cu files need no engine headers. Each launches on `stream` and checks the launch.
// `bf16` flags say the tensor holds bfloat16, else float; `nhwc` says a 4-d tensor is
// channels-last, else (N, C, H, W).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dpb::cuda::k {

// --- element-wise (elementwise.cu) ---
void fill(cudaStream_t s, void* x, bool bf16, float value, int64_t n);
void cast(cudaStream_t s, const void* src, bool src_bf16, void* dst, bool dst_bf16, int64_t n);
// A 4-d (N, C, H, W) tensor from one dtype and layout (plain or channels-last) to
// another in one pass; with accumulate, added to the destination.
void convert4d(cudaStream_t s, const void* src, bool src_bf16, bool src_nhwc, void* dst, bool dst_bf16, bool dst_nhwc,
               int64_t N, int64_t C, int64_t H, int64_t W, bool accumulate = false);
// out = a + b
void add(cudaStream_t s, const void* a, const void* b, void* out, bool bf16, int64_t n);
// acc (f32) += alpha * x (f32 or bf16); with overwrite, acc = alpha * x
void axpy(cudaStream_t s, float alpha, const void* x, bool x_bf16, float* acc, int64_t n, bool overwrite = false);
void scale(cudaStream_t s, float* x, float alpha, int64_t n);

// --- per-channel reductions and broadcasts (channel.cu) ---
// out[c] (+)= sum over n, hw of x[n, c, hw]
void channel_sum(cudaStream_t s, const void* x, bool bf16, bool nhwc, int64_t N, int64_t C, int64_t HW, float* out,
                 bool accumulate);
// y[n, c, hw] += b[c]
void channel_bias_add(cudaStream_t s, void* y, bool bf16, bool nhwc, int64_t N, int64_t C, int64_t HW,
                      const float* b);
// y (N, C) = mean over hw of x (N, C, HW); dx = dy / HW broadcast
void global_avgpool_forward(cudaStream_t s, const void* x, void* y, bool bf16, bool nhwc, int64_t N, int64_t C,
                            int64_t HW);
void global_avgpool_backward(cudaStream_t s, const void* dy, void* dx, bool bf16, bool nhwc, int64_t N, int64_t C,
                             int64_t HW);
// BatchNorm with fixed statistics (eval forward; backward of a frozen BatchNorm):
// y = (x - mean) * invstd(var) * gamma + beta;
// dx = dy * gamma * invstd; dgamma (+)= sum dy * xhat; dbeta (+)= sum dy
void bn_fixed_forward(cudaStream_t s, const void* x, void* y, bool bf16, bool nhwc, int64_t N, int64_t C, int64_t HW,
                      const float* gamma, const float* beta, const float* mean, const float* var, float eps);
void bn_fixed_backward(cudaStream_t s, const void* x, const void* dy, void* dx, bool bf16, bool nhwc, int64_t N,
                       int64_t C, int64_t HW, const float* gamma, const float* mean, const float* var, float eps,
                       float* dgamma, float* dbeta, bool accumulate);
// SyncBatchNorm: per channel sum and sum of squares; and dx -= gamma*invstd*(mdy + xhat*mdyx)
void bn_stats(cudaStream_t s, const void* x, bool bf16, bool nhwc, int64_t N, int64_t C, int64_t HW, float* mean,
              float* m2);
void bn_sync_correction(cudaStream_t s, const void* x, void* dx, bool bf16, bool nhwc, int64_t N, int64_t C,
                        int64_t HW, const float* mean, const float* var, float eps, const float* gamma,
                        const float* mean_dy, const float* mean_dy_xhat);
// invstd = 1 / sqrt(var + eps) -> var (biased), in place over C values
void invstd_to_var(cudaStream_t s, float* v, int64_t C, float eps);

// --- channels-last BatchNorm (bn_nhwc.cu), x viewed as (M = N*H*W, C) ---
// scratch: bn_nhwc_scratch_floats(M, C) floats of device memory for partial sums.
int64_t bn_nhwc_scratch_floats(int64_t M, int64_t C);
void bn_nhwc_forward_train(cudaStream_t s, const void* x, void* y, bool bf16, int64_t M, int64_t C, float eps,
                           float momentum, const float* gamma, const float* beta, float* mean, float* invstd,
                           float* running_mean, float* running_var, float* scratch);
// dx may be null (only the parameter gradients).
void bn_nhwc_backward(cudaStream_t s, const void* x, const void* dy, void* dx, bool bf16, int64_t M, int64_t C,
                      const float* gamma, const float* mean, const float* invstd, float* dgamma, float* dbeta,
                      bool accumulate, float* scratch);

// --- losses (loss.cu) ---
// Mean softmax cross-entropy over N rows of C logits; dlogits (same dtype, may be null)
// = (softmax - onehot) / N. out[0] = the summed loss (float), out_i[0] = correct argmax
// predictions, out_i[1] = labels outside [0, C). scratch: 2 * N floats.
void softmax_cross_entropy(cudaStream_t s, const void* logits, bool bf16, const int32_t* labels, void* dlogits,
                           int64_t N, int64_t C, float* out, int32_t* out_i, float* scratch);
// The vocabulary-parallel cross-entropy's halves (ops.h): stats (N, 4) of this rank's
// logits (N, C) covering classes [first, first + C); then from every rank's stats
// (W, N, 4) the gradient (may be null) and the totals as softmax_cross_entropy's.
void cross_entropy_part_stats(cudaStream_t s, const void* logits, bool bf16, const int32_t* labels, int64_t N,
                              int64_t C, int64_t first, float* stats);
void cross_entropy_part_finish(cudaStream_t s, const void* logits, bool bf16, const int32_t* labels, int64_t N,
                               int64_t C, int64_t first, int64_t classes, const float* all_stats, int64_t W,
                               void* dlogits, float* out, int32_t* out_i, float* scratch);
// Mean squared error: out[0] += sum (p - t)^2; dpred = 2 (p - t) / n
void mse(cudaStream_t s, const void* pred, bool bf16, const float* target, void* dpred, int64_t n, float* out);

// --- optimizers (optimizer.cu), PyTorch's update rules, fp32 state ---
struct SgdArgs {
  float lr, momentum, dampening, weight_decay;
  bool nesterov, first;
};
void sgd(cudaStream_t s, float* param, const float* grad, float* buf, int64_t n, const SgdArgs& a);
struct AdamArgs {
  float lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  float bias_correction1, bias_correction2;  // 1 - beta^step
};
void adam(cudaStream_t s, float* param, const float* grad, float* m, float* v, int64_t n, const AdamArgs& a);

// --- the transformer (transformer.cu); activations float or bf16, parameters float ---
// y (rows, C) = table rows at tokens; dtable (V, C) (+)= dy rows added at their tokens.
// The table is rows [first, first + V) of the vocabulary; tokens outside it read zeros
// and add nothing.
void embedding_forward(cudaStream_t s, const int32_t* tokens, const float* table, void* y, bool bf16, int64_t rows,
                       int64_t C, int64_t V, int64_t first);
void embedding_backward(cudaStream_t s, const int32_t* tokens, const void* dy, bool bf16, float* dtable, int64_t rows,
                        int64_t C, int64_t V, int64_t first, bool accumulate);
// y (N, T*C) = x + table[0 .. T*C); dtable[0 .. T*C) (+)= sum over N of dy, the rest of
// the P*C table zeroed when not accumulating
void position_embedding_forward(cudaStream_t s, const void* x, const float* table, void* y, bool bf16, int64_t N,
                                int64_t TC);
void position_embedding_backward(cudaStream_t s, const void* dy, bool bf16, float* dtable, int64_t N, int64_t TC,
                                 int64_t PC, bool accumulate);
// Layer norm of M rows of C; dx may be null
void layernorm_forward(cudaStream_t s, const void* x, const float* gamma, const float* beta, void* y, bool bf16,
                       float* mean, float* rstd, int64_t M, int64_t C, float eps);
void layernorm_backward(cudaStream_t s, const void* x, const void* dy, bool bf16, const float* gamma,
                        const float* mean, const float* rstd, void* dx, float* dgamma, float* dbeta, int64_t M,
                        int64_t C, bool accumulate);
void gelu_forward(cudaStream_t s, const void* x, void* y, bool bf16, int64_t n);
void gelu_backward(cudaStream_t s, const void* x, const void* dy, void* dx, bool bf16, int64_t n);
// qkv (N, T, 3C) <-> q, k, v (N, H, T, D); (N, H, T, D) <-> (N, T, C)
void split_heads(cudaStream_t s, const void* qkv, void* q, void* k, void* v, bool bf16, int64_t N, int64_t T,
                 int64_t H, int64_t D);
void merge_heads(cudaStream_t s, const void* q, const void* k, const void* v, void* qkv, bool bf16, int64_t N,
                 int64_t T, int64_t H, int64_t D);
void heads_to_rows(cudaStream_t s, const void* heads, void* rows, bool bf16, int64_t N, int64_t T, int64_t H,
                   int64_t D);
void rows_to_heads(cudaStream_t s, const void* rows, void* heads, bool bf16, int64_t N, int64_t T, int64_t H,
                   int64_t D);
// Rows of T scores (row r is query r % T): causal softmax in place; its backward in
// place of dp
void causal_softmax(cudaStream_t s, void* p, bool bf16, int64_t rows, int64_t T);
void causal_softmax_backward(cudaStream_t s, const void* p, void* dp, bool bf16, int64_t rows, int64_t T);
// out[0] (device double) = sum of x^2
void sum_squares(cudaStream_t s, const float* x, int64_t n, double* out);

}  // namespace dpb::cuda::k
