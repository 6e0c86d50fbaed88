#pragma once
// The kernels a backend implements behind engine/backend/ops.h, declared once.
// DPB_KERNELS lists each one's result, name and parameters (the contract is the op's in
// ops.h, whose dispatch has checked shapes and devices); cpu/cpu_ops.h and
// cuda/cuda_ops.h declare their backend's from it, and each backend fills a KernelTable
// with them (cpu/kernel_table.cpp, cuda/kernel_table.cpp). ops:: dispatch calls the
// entry of the table of the device its tensors are on. DPB_CUDA_ONLY_KERNELS are the
// ones only the CUDA backend has: the CPU's entries stay null, and dispatch says so.
#include "engine/backend/ops.h"

// X(result, name, (parameters)) for every kernel of every backend.
#define DPB_KERNELS(X)                                                                                               \
  X(Tensor, compute_weight, (const Tensor& w))                                                                      \
  X(Tensor, conv2d_forward, (const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p))        \
  X(void, conv2d_backward_data, (const Tensor& dy, const Tensor& w, Tensor& dx, const ops::Conv2dParams& p))       \
  X(void, conv2d_backward_weights,                                                                                  \
    (const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db, const ops::Conv2dParams& p, bool accumulate))      \
  X(void, linear_forward, (const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y))                          \
  X(void, linear_backward_data, (const Tensor& dy, const Tensor& w, Tensor& dx))                                   \
  X(void, linear_backward_weights, (const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db, bool accumulate))   \
  X(void, batchnorm_forward_train,                                                                                  \
    (const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, ops::BatchNormSaved& saved,              \
     Tensor& running_mean, Tensor& running_var, float momentum, float eps))                                        \
  X(void, batchnorm_forward_eval,                                                                                   \
    (const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, const Tensor& running_mean,               \
     const Tensor& running_var, float eps))                                                                        \
  X(void, batchnorm_backward,                                                                                       \
    (const Tensor& x, const Tensor& dy, const Tensor& gamma, const ops::BatchNormSaved& saved, Tensor& dx,         \
     Tensor& dgamma, Tensor& dbeta, float eps, bool accumulate, bool global_stats))                                \
  X(void, batchnorm_stats, (const Tensor& x, Tensor& mean, Tensor& m2))                                            \
  X(void, batchnorm_sync_correction,                                                                                \
    (const Tensor& x, const Tensor& mean, const Tensor& var, float eps, const Tensor& gamma, const Tensor& mean_dy, \
     const Tensor& mean_dy_xhat, Tensor& dx))                                                                      \
  X(void, relu_forward, (const Tensor& x, Tensor& y))                                                              \
  X(void, relu_backward, (const Tensor& y, const Tensor& dy, Tensor& dx))                                          \
  /* The CPU keeps max pooling's argmax in `workspace`; cuDNN reads x and y instead. */                            \
  X(void, pool2d_forward,                                                                                           \
    (ops::PoolKind kind, const Tensor& x, Tensor& y, Tensor& workspace, const ops::Pool2dParams& p))               \
  X(void, pool2d_backward,                                                                                          \
    (ops::PoolKind kind, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& workspace, Tensor& dx,   \
     const ops::Pool2dParams& p))                                                                                  \
  X(void, global_avgpool_forward, (const Tensor& x, Tensor& y))                                                    \
  X(void, global_avgpool_backward, (const Tensor& dy, Tensor& dx))                                                 \
  X(void, add, (const Tensor& a, const Tensor& b, Tensor& out))                                                    \
  X(void, axpy, (float alpha, const Tensor& x, Tensor& acc))                                                       \
  X(void, scale, (Tensor& x, float alpha))                                                                         \
  X(double, sum_squares, (const Tensor& x))                                                                        \
  X(float, softmax_cross_entropy, (const Tensor& logits, const Tensor& labels, Tensor& dlogits, int64_t* correct)) \
  X(Tensor, softmax_cross_entropy_deferred, (const Tensor& logits, const Tensor& labels, Tensor& dlogits))         \
  X(void, cross_entropy_part_stats, (const Tensor& logits, const Tensor& labels, int64_t first, Tensor& stats))    \
  X(Tensor, cross_entropy_part_finish,                                                                              \
    (const Tensor& logits, const Tensor& labels, int64_t first, int64_t classes, const Tensor& all_stats,          \
     Tensor& dlogits))                                                                                             \
  X(float, mse_loss, (const Tensor& pred, const Tensor& target, Tensor& dpred))                                    \
  X(void, embedding_forward,                                                                                        \
    (const Tensor& tokens, const Tensor& table, int64_t first, int64_t vocab, Tensor& y))                          \
  X(void, embedding_backward,                                                                                       \
    (const Tensor& tokens, const Tensor& dy, int64_t first, Tensor& dtable, bool accumulate))                      \
  X(void, position_embedding_forward, (const Tensor& x, const Tensor& table, Tensor& y))                           \
  X(void, position_embedding_backward, (const Tensor& dy, Tensor& dtable, bool accumulate))                        \
  X(void, layernorm_forward,                                                                                        \
    (const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean, Tensor& rstd, float eps))  \
  X(void, layernorm_backward,                                                                                       \
    (const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, Tensor& dx,   \
     Tensor& dgamma, Tensor& dbeta, bool accumulate))                                                              \
  X(void, gelu_forward, (const Tensor& x, Tensor& y))                                                              \
  X(void, gelu_backward, (const Tensor& x, const Tensor& dy, Tensor& dx))                                          \
  X(void, attention_forward, (const Tensor& qkv, int64_t heads, Tensor& y, Tensor& probs))                        \
  X(void, attention_backward,                                                                                       \
    (const Tensor& qkv, const Tensor& probs, const Tensor& dy, int64_t heads, Tensor& dqkv))                       \
  X(void, sgd_step, (Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdHyper& h, bool first))          \
  X(void, adam_step,                                                                                                \
    (Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamHyper& h, int64_t step))

// X(result, name, (parameters)) for the kernels only the CUDA backend has (cuDNN's
// fused attention, cuda/fused_attention.h).
#define DPB_CUDA_ONLY_KERNELS(X)                                                                         \
  X(void, fused_attention_forward, (const Tensor& qkv, int64_t heads, Tensor& y, Tensor& stats))        \
  X(void, fused_attention_backward,                                                                     \
    (const Tensor& qkv, const Tensor& y, const Tensor& stats, const Tensor& dy, int64_t heads, Tensor& dqkv))

// A backend's declaration of one kernel, for DPB_KERNELS(DPB_DECLARE_KERNEL).
#define DPB_DECLARE_KERNEL(result, name, params) result name params;

namespace dpb {

// One backend's kernels; a null entry is one it lacks.
struct KernelTable {
#define DPB_KERNEL_ENTRY(result, name, params) result(*name) params = nullptr;
  DPB_KERNELS(DPB_KERNEL_ENTRY)
  DPB_CUDA_ONLY_KERNELS(DPB_KERNEL_ENTRY)
#undef DPB_KERNEL_ENTRY
};

namespace cpu {
const KernelTable& kernel_table();
}
#if DPB_WITH_CUDA
namespace cuda {
const KernelTable& kernel_table();
}
#endif

}  // namespace dpb
