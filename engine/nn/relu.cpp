#include "engine/nn/relu.h"

#include "engine/backend/ops.h"

namespace dpb {

Tensor ReLU::forward(const Tensor& x) {
  Tensor y = inplace_ ? x : Tensor::empty_like(x);
  ops::relu_forward(x, y);
  if (training_) y_ = y;
  return y;
}

Tensor ReLU::backward(const Tensor& dy) {
  DPB_CHECK(y_.defined()) << "ReLU.backward without a training-mode forward";
  // The incoming gradient is not needed afterwards: compute in place.
  Tensor dx = dy;
  ops::relu_backward(y_, dy, dx);
  y_ = Tensor();
  return dx;
}

}  // namespace dpb
