#include "engine/nn/pool2d.h"

namespace dpb {

Pool2d::Pool2d(ops::PoolKind kind, int kernel, int stride, int padding) : kind_(kind), p_{kernel, stride, padding} {
  DPB_CHECK(kernel > 0 && stride > 0 && padding >= 0 && 2 * padding <= kernel)
      << type_name() << "(kernel=" << kernel << ", stride=" << stride << ", padding=" << padding
      << "): invalid configuration (padding must be at most half the kernel)";
}

Tensor Pool2d::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() == 4) << type_name() << " expects input (N, C, H, W), got " << x.shape();
  const int64_t ho = ops::window_out(x.size(2), p_.kernel, p_.stride, p_.padding);
  const int64_t wo = ops::window_out(x.size(3), p_.kernel, p_.stride, p_.padding);
  DPB_CHECK(ho > 0 && wo > 0) << type_name() << ": input " << x.shape() << " is smaller than the window";
  Tensor y = Tensor::empty({x.size(0), x.size(1), ho, wo}, x.device(), x.dtype(), x.layout());
  ops::pool2d_forward(kind_, x, y, workspace_, p_);
  if (training_) {
    x_ = x;
    y_ = y;
  }
  return y;
}

Tensor Pool2d::backward(const Tensor& dy) {
  DPB_CHECK(x_.defined()) << type_name() << ".backward without a training-mode forward";
  Tensor dx = Tensor::empty_like(x_);
  ops::pool2d_backward(kind_, x_, y_, dy, workspace_, dx, p_);
  x_ = Tensor();
  y_ = Tensor();
  return dx;
}

int64_t Pool2d::forward_flops(const Shape& input, Shape* output) const {
  *output = Shape{input[0], ops::window_out(input[1], p_.kernel, p_.stride, p_.padding),
                  ops::window_out(input[2], p_.kernel, p_.stride, p_.padding)};
  return output->numel() * p_.kernel * p_.kernel;
}

std::unique_ptr<Module> Pool2d::clone_structure() const {
  return std::make_unique<Pool2d>(kind_, p_.kernel, p_.stride, p_.padding);
}

}  // namespace dpb
