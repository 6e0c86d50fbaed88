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
  if (kind == LossKind::cross_entropy && deferred && output.device().is_cuda()) {
    r.pending = ops::softmax_cross_entropy_deferred(output, target, r.grad);
    r.rows = output.size(0);
    r.classes = output.size(1);
  } else if (kind == LossKind::cross_entropy) {
    r.loss = ops::softmax_cross_entropy(output, target, r.grad, &r.correct);
  } else {
    r.loss = ops::mse_loss(output, target, r.grad);
  }
  return r;
}

}  // namespace dpb
