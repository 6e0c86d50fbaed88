#include "engine/nn/gelu.h"

#include "engine/backend/ops.h"

namespace dpb {

Tensor GELU::forward(const Tensor& x) {
  Tensor y = Tensor::empty_like(x);
  ops::gelu_forward(x, y);
  if (training_) x_ = x;
  return y;
}

Tensor GELU::backward(const Tensor& dy) {
  DPB_CHECK(x_.defined()) << "GELU.backward without a training-mode forward";
  Tensor dx = Tensor::empty_like(x_);
  ops::gelu_backward(x_, dy, dx);
  x_ = Tensor();
  return dx;
}

}  // namespace dpb
