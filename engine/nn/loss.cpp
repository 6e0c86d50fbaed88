#include "engine/nn/loss.h"

#include "engine/backend/ops.h"

namespace dpb {

std::string loss_name(LossKind k) { return k == LossKind::cross_entropy ? "cross_entropy" : "mse"; }

LossResult compute_loss(LossKind kind, const Tensor& output, const Tensor& target, bool need_grad) {
  LossResult r;
  if (need_grad) r.grad = Tensor::empty(output.shape(), output.device());
  if (kind == LossKind::cross_entropy) {
    r.loss = ops::softmax_cross_entropy(output, target, r.grad, &r.correct);
  } else {
    r.loss = ops::mse_loss(output, target, r.grad);
  }
  return r;
}

}  // namespace dpb
