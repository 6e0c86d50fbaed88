#include "engine/nn/loss.h"

#include "engine/backend/ops.h"

namespace dpb {

std::string loss_name(LossKind k) { return k == LossKind::cross_entropy ? "cross_entropy" : "mse"; }

void LossResult::resolve() {
  if (!pending.defined()) return;
  loss = ops::read_cross_entropy(pending, rows, classes, &correct);
  pending = Tensor();
}

LossResult compute_loss(LossKind kind, const Tensor& output, const Tensor& target, bool need_grad, bool deferred) {
  LossResult r;
  if (need_grad) r.grad = Tensor::empty(output.shape(), output.device(), output.dtype());
  // Per-position outputs (N, T, V) against targets (N, T): one row per token.
  const bool rows3 = kind == LossKind::cross_entropy && output.ndim() == 3;
  if (rows3) {
    DPB_CHECK(target.ndim() == 2 && target.size(0) == output.size(0) && target.size(1) == output.size(1))
        << "cross-entropy of per-position outputs " << output.shape() << " needs targets (N, T), got " << target.shape();
  }
  const int64_t rows = rows3 ? output.size(0) * output.size(1) : output.size(0);
  const Tensor logits = rows3 ? output.view({rows, output.size(2)}) : output;
  const Tensor labels = rows3 ? target.view({rows}) : target;
  Tensor dlogits = rows3 && need_grad ? r.grad.view({rows, output.size(2)}) : r.grad;
  if (kind == LossKind::cross_entropy && deferred && output.device().is_cuda()) {
    r.pending = ops::softmax_cross_entropy_deferred(logits, labels, dlogits);
    r.rows = rows;
    r.classes = logits.size(1);
  } else if (kind == LossKind::cross_entropy) {
    r.loss = ops::softmax_cross_entropy(logits, labels, dlogits, &r.correct);
  } else {
    r.loss = ops::mse_loss(output, target, r.grad);
  }
  return r;
}

}  // namespace dpb
