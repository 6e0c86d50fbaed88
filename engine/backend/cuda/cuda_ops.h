#pragma once
// The CUDA implementations of the ops in engine/backend/ops.h (same contracts; see
// there), on the calling thread's current stream of the tensors' device. Called
// through ops:: dispatch, which checks shapes and devices first.
//
// Precision (engine/backend/precision.h): activations come and go in compute_dtype()
// (bf16 under --precision=bf16); convolutions run channels-last under tf32 and bf16
// (cuda::conv_layout()). Parameters and their gradients are always f32 and plain:
// an op converts a weight or a gradient where the math needs another form, and
// compute_weight() gives a layer the converted weight once per step.
#include "engine/backend/ops.h"

namespace dpb::cuda {

Tensor compute_weight(const Tensor& w);
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p);
void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const ops::Conv2dParams& p);
void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db, const ops::Conv2dParams& p,
                             bool accumulate);
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
void linear_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx);
void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db, bool accumulate);
void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                             ops::BatchNormSaved& saved, Tensor& running_mean, Tensor& running_var, float momentum,
                             float eps);
void batchnorm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                            const Tensor& running_mean, const Tensor& running_var, float eps);
void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const ops::BatchNormSaved& saved,
                        Tensor& dx, Tensor& dgamma, Tensor& dbeta, float eps, bool accumulate, bool global_stats);
void batchnorm_stats(const Tensor& x, Tensor& mean, Tensor& m2);
void batchnorm_sync_correction(const Tensor& x, const Tensor& mean, const Tensor& var, float eps, const Tensor& gamma,
                               const Tensor& mean_dy, const Tensor& mean_dy_xhat, Tensor& dx);
void relu_forward(const Tensor& x, Tensor& y);
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void pool2d_forward(ops::PoolKind kind, const Tensor& x, Tensor& y, const ops::Pool2dParams& p);
void pool2d_backward(ops::PoolKind kind, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                     const ops::Pool2dParams& p);
void global_avgpool_forward(const Tensor& x, Tensor& y);
void global_avgpool_backward(const Tensor& dy, Tensor& dx);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void axpy(float alpha, const Tensor& x, Tensor& acc);
void scale(Tensor& x, float alpha);
double sum_squares(const Tensor& x);
void embedding_forward(const Tensor& tokens, const Tensor& table, int64_t first, Tensor& y);
void embedding_backward(const Tensor& tokens, const Tensor& dy, int64_t first, Tensor& dtable, bool accumulate);
void position_embedding_forward(const Tensor& x, const Tensor& table, Tensor& y);
void position_embedding_backward(const Tensor& dy, Tensor& dtable, bool accumulate);
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& rstd, float eps);
void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool accumulate);
void gelu_forward(const Tensor& x, Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);
void attention_forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& probs);
void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, int64_t heads, Tensor& dqkv);
float softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor& dlogits, int64_t* correct);
Tensor softmax_cross_entropy_deferred(const Tensor& logits, const Tensor& labels, Tensor& dlogits);
void cross_entropy_part_stats(const Tensor& logits, const Tensor& labels, int64_t first, Tensor& stats);
Tensor cross_entropy_part_finish(const Tensor& logits, const Tensor& labels, int64_t first, int64_t classes,
                                 const Tensor& all_stats, Tensor& dlogits);
float mse_loss(const Tensor& pred, const Tensor& target, Tensor& dpred);
void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdHyper& h, bool first);
void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamHyper& h, int64_t step);

}  // namespace dpb::cuda
