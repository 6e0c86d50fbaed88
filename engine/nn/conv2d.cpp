#include "engine/nn/conv2d.h"

#include "engine/nn/init.h"

namespace dpb {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int kernel, int stride, int padding, bool bias,
               Generator* gen)
    : in_(in_channels), out_(out_channels), kernel_(kernel), p_{stride, padding}, has_bias_(bias) {
  DPB_CHECK(in_ > 0 && out_ > 0 && kernel > 0 && stride > 0 && padding >= 0)
      << "Conv2d(" << in_ << ", " << out_ << ", kernel=" << kernel << ", stride=" << stride
      << ", padding=" << padding << "): invalid configuration";
  const int64_t fan_in = in_ * kernel * kernel;
  Tensor w = Tensor::empty({out_, in_, kernel, kernel});
  if (gen) init::uniform(w, init::default_bound(fan_in), *gen);
  weight_ = &register_parameter("weight", w);
  bias_ = nullptr;
  if (bias) {
    Tensor b = Tensor::empty({out_});
    if (gen) init::uniform(b, init::default_bound(fan_in), *gen);
    bias_ = &register_parameter("bias", b);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() == 4 && x.size(1) == in_)
      << "Conv2d(" << in_ << ", " << out_ << ") expects input (N, " << in_ << ", H, W), got " << x.shape();
  const int64_t ho = ops::window_out(x.size(2), kernel_, p_.stride, p_.padding);
  const int64_t wo = ops::window_out(x.size(3), kernel_, p_.stride, p_.padding);
  DPB_CHECK(ho > 0 && wo > 0) << "Conv2d: input " << x.shape() << " is smaller than the " << kernel_ << "x"
                              << kernel_ << " kernel";
  p_.input_grad = needs_input_grad_;
  const Tensor w = ops::compute_weight(weight_->data());
  Tensor y = ops::conv2d_forward(x, w, bias_ ? bias_->data() : Tensor(), p_);
  if (training_) {
    x_ = x;
    w_ = w;
  }
  return y;
}

Tensor Conv2d::backward(const Tensor& dy) {
  DPB_CHECK(x_.defined()) << "Conv2d.backward without a training-mode forward";
  const bool acc_w = weight_->begin_grad();
  Tensor db;
  if (bias_) {
    DPB_CHECK(bias_->begin_grad() == acc_w) << "Conv2d: weight and bias gradients out of step";
    db = bias_->grad();
  }
  ops::conv2d_backward_weights(x_, dy, weight_->grad(), db, p_, acc_w);
  if (bias_) bias_->mark_grad_ready();
  weight_->mark_grad_ready();
  Tensor dx;
  if (needs_input_grad_) {
    dx = Tensor::empty_like(x_);
    ops::conv2d_backward_data(dy, w_, dx, p_);
  }
  x_ = Tensor();
  w_ = Tensor();
  return dx;
}

int64_t Conv2d::forward_flops(const Shape& input, Shape* output) const {
  const int64_t ho = ops::window_out(input[1], kernel_, p_.stride, p_.padding);
  const int64_t wo = ops::window_out(input[2], kernel_, p_.stride, p_.padding);
  *output = Shape{out_, ho, wo};
  return 2 * in_ * kernel_ * kernel_ * out_ * ho * wo;
}

std::unique_ptr<Module> Conv2d::clone_structure() const {
  return std::make_unique<Conv2d>(in_, out_, kernel_, p_.stride, p_.padding, has_bias_, nullptr);
}

}  // namespace dpb
