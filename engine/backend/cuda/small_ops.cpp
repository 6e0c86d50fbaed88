// The ops on the engine's own kernels: global average pooling, element-wise ops,
// losses and optimizer steps (kernels in the .cu files).
#include <cmath>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/cudnn_util.h"
#include "engine/backend/cuda/kernels.h"
#include "engine/backend/cuda/runtime.h"

namespace dpb::cuda {

namespace {
bool is_nhwc(const Tensor& t) { return t.layout() == Layout::nhwc; }

// The loss totals: [0] summed loss (f32), [1] correct predictions, [2] labels out of
// range (i32), read back in one copy.
struct LossTotals {
  float loss;
  int32_t correct, bad;
};
}  // namespace

void global_avgpool_forward(const Tensor& x, Tensor& y) {
  OpEnv env = op_env(x);
  Tensor yc = y.dtype() == x.dtype() ? y : Tensor::empty(y.shape(), y.device(), x.dtype());
  k::global_avgpool_forward(env.stream, x.raw(), yc.raw(), is_bf16(x), is_nhwc(x), x.size(0), x.size(1),
                            x.size(2) * x.size(3));
  if (!yc.shares_storage_with(y)) y.copy_from(yc.to_dtype(y.dtype()));
}

void global_avgpool_backward(const Tensor& dy, Tensor& dx) {
  OpEnv env = op_env(dy);
  const Tensor dyc = dy.to_dtype(dx.dtype());
  k::global_avgpool_backward(env.stream, dyc.raw(), dx.raw(), is_bf16(dx), is_nhwc(dx), dx.size(0), dx.size(1),
                             dx.size(2) * dx.size(3));
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  DPB_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype())
      << "add: operands of different dtypes (" << dtype_name(a.dtype()) << ", " << dtype_name(b.dtype()) << " -> "
      << dtype_name(out.dtype()) << ")";
  OpEnv env = op_env(a);
  k::add(env.stream, a.raw(), b.raw(), out.raw(), is_bf16(a), a.storage_numel());
}

void axpy(float alpha, const Tensor& x, Tensor& acc) {
  DPB_CHECK(acc.dtype() == DType::f32) << "axpy accumulates into F32, got " << dtype_name(acc.dtype());
  OpEnv env = op_env(x);
  k::axpy(env.stream, alpha, x.raw(), is_bf16(x), acc.data(), x.storage_numel());
}

void scale(Tensor& x, float alpha) {
  DPB_CHECK(x.dtype() == DType::f32) << "scale of a " << dtype_name(x.dtype()) << " tensor";
  OpEnv env = op_env(x);
  k::scale(env.stream, x.data(), alpha, x.storage_numel());
}

float softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor& dlogits, int64_t* correct) {
  const Tensor totals = softmax_cross_entropy_deferred(logits, labels, dlogits);
  return ops::read_cross_entropy(totals, logits.size(0), logits.size(1), correct);
}

Tensor softmax_cross_entropy_deferred(const Tensor& logits, const Tensor& labels, Tensor& dlogits) {
  OpEnv env = op_env(logits);
  const int64_t N = logits.size(0), C = logits.size(1);
  Tensor totals = Tensor::empty({static_cast<int64_t>(sizeof(LossTotals) / 4)}, logits.device());
  Tensor scratch = Tensor::empty({2 * N}, logits.device());
  Tensor dz = dlogits;
  if (dz.defined() && dz.dtype() != logits.dtype()) dz = Tensor::empty(logits.shape(), logits.device(), logits.dtype());
  auto* t = static_cast<LossTotals*>(totals.raw());
  k::softmax_cross_entropy(env.stream, logits.raw(), is_bf16(logits), labels.data_i32(),
                           dz.defined() ? dz.raw() : nullptr, N, C, &t->loss, &t->correct, scratch.data());
  if (dz.defined() && !dz.shares_storage_with(dlogits)) dlogits.copy_from(dz.to_dtype(dlogits.dtype()));
  return totals;
}

void cross_entropy_part_stats(const Tensor& logits, const Tensor& labels, int64_t first, Tensor& stats) {
  OpEnv env = op_env(logits);
  k::cross_entropy_part_stats(env.stream, logits.raw(), is_bf16(logits), labels.data_i32(), logits.size(0),
                              logits.size(1), first, stats.data());
}

Tensor cross_entropy_part_finish(const Tensor& logits, const Tensor& labels, int64_t first, int64_t classes,
                                 const Tensor& all_stats, Tensor& dlogits) {
  OpEnv env = op_env(logits);
  const int64_t N = logits.size(0);
  Tensor totals = Tensor::empty({static_cast<int64_t>(sizeof(LossTotals) / 4)}, logits.device());
  Tensor scratch = Tensor::empty({2 * N}, logits.device());
  Tensor dz = dlogits;
  if (dz.defined() && dz.dtype() != logits.dtype()) dz = Tensor::empty(logits.shape(), logits.device(), logits.dtype());
  auto* t = static_cast<LossTotals*>(totals.raw());
  k::cross_entropy_part_finish(env.stream, logits.raw(), is_bf16(logits), labels.data_i32(), N, logits.size(1), first,
                               classes, all_stats.data(), all_stats.size(0), dz.defined() ? dz.raw() : nullptr,
                               &t->loss, &t->correct, scratch.data());
  if (dz.defined() && !dz.shares_storage_with(dlogits)) dlogits.copy_from(dz.to_dtype(dlogits.dtype()));
  return totals;
}

float mse_loss(const Tensor& pred, const Tensor& target, Tensor& dpred) {
  OpEnv env = op_env(pred);
  const Tensor tc = target.to_dtype(DType::f32);
  Tensor total = Tensor::zeros({1}, pred.device());
  Tensor dp = dpred;
  if (dp.defined() && dp.dtype() != pred.dtype()) dp = Tensor::empty(pred.shape(), pred.device(), pred.dtype());
  k::mse(env.stream, pred.raw(), is_bf16(pred), tc.data(), dp.defined() ? dp.raw() : nullptr, pred.numel(),
         total.data());
  if (dp.defined() && !dp.shares_storage_with(dpred)) dpred.copy_from(dp.to_dtype(dpred.dtype()));
  return total.item() / static_cast<float>(pred.numel());
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdHyper& h, bool first) {
  OpEnv env = op_env(param);
  k::SgdArgs a{h.lr, h.momentum, h.dampening, h.weight_decay, h.nesterov, first};
  k::sgd(env.stream, param.data(), grad.data(), h.momentum != 0.0f ? buf.data() : nullptr, param.numel(), a);
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamHyper& h, int64_t step) {
  OpEnv env = op_env(param);
  k::AdamArgs a{h.lr,
                h.beta1,
                h.beta2,
                h.eps,
                h.weight_decay,
                h.decoupled,
                1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(step))),
                1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(step)))};
  k::adam(env.stream, param.data(), grad.data(), m.data(), v.data(), param.numel(), a);
}

}  // namespace dpb::cuda
