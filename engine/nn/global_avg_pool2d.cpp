#include "engine/nn/global_avg_pool2d.h"

#include "engine/backend/ops.h"

namespace dpb {

Tensor GlobalAvgPool2d::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() == 4) << "GlobalAvgPool2d expects input (N, C, H, W), got " << x.shape();
  Tensor y = Tensor::empty({x.size(0), x.size(1)}, x.device(), x.dtype());
  ops::global_avgpool_forward(x, y);
  x_shape_ = x.shape();
  x_layout_ = x.layout();
  x_dtype_ = x.dtype();
  return y;
}

Tensor GlobalAvgPool2d::backward(const Tensor& dy) {
  DPB_CHECK(x_shape_.ndim() == 4) << "GlobalAvgPool2d.backward without a forward";
  Tensor dx = Tensor::empty(x_shape_, dy.device(), x_dtype_, x_layout_);
  ops::global_avgpool_backward(dy, dx);
  return dx;
}

}  // namespace dpb
