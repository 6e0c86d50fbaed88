#pragma once
// The CPU implementations of the ops in engine/backend/ops.h (same contracts; see there).
// Called through ops:: dispatch, which checks devices first.
#include "engine/backend/ops.h"

namespace dpb::cpu {

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p);
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
void pool2d_forward(ops::PoolKind kind, const Tensor& x, Tensor& y, Tensor& workspace, const ops::Pool2dParams& p);
void pool2d_backward(ops::PoolKind kind, const Tensor& dy, const Tensor& workspace, Tensor& dx,
                     const ops::Pool2dParams& p);
void global_avgpool_forward(const Tensor& x, Tensor& y);
void global_avgpool_backward(const Tensor& dy, Tensor& dx);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void axpy(float alpha, const Tensor& x, Tensor& acc);
void scale(Tensor& x, float alpha);
double sum_squares(const Tensor& x);
float softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor& dlogits, int64_t* correct);
float mse_loss(const Tensor& pred, const Tensor& target, Tensor& dpred);
void cross_entropy_part_stats(const Tensor& logits, const Tensor& labels, int64_t first, Tensor& stats);
Tensor cross_entropy_part_finish(const Tensor& logits, const Tensor& labels, int64_t first, int64_t classes,
                                 const Tensor& all_stats, Tensor& dlogits);
void embedding_forward(const Tensor& tokens, const Tensor& table, int64_t first, int64_t vocab, Tensor& y);
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
void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdHyper& h, bool first);
void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamHyper& h, int64_t step);

}  // namespace dpb::cpu
