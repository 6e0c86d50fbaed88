#include "engine/nn/batchnorm2d.h"

namespace dpb {

BatchNorm2d::BatchNorm2d(int64_t channels, float eps, float momentum)
    : channels_(channels), eps_(eps), momentum_(momentum) {
  DPB_CHECK(channels > 0) << "BatchNorm2d(" << channels << "): channels must be positive";
  weight_ = &register_parameter("weight", Tensor::full({channels}, 1.0f));
  bias_ = &register_parameter("bias", Tensor::zeros({channels}));
  running_mean_ = &register_buffer("running_mean", Tensor::zeros({channels}));
  running_var_ = &register_buffer("running_var", Tensor::full({channels}, 1.0f));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() == 4 && x.size(1) == channels_)
      << "BatchNorm2d(" << channels_ << ") expects input (N, " << channels_ << ", H, W), got " << x.shape();
  Tensor y = Tensor::empty_like(x);
  if (training_ && frozen_) {
    ops::batchnorm_forward_eval(x, weight_->data(), bias_->data(), y, *running_mean_, *running_var_, eps_);
    x_ = x;
  } else if (training_) {
    DPB_CHECK(x.size(0) * x.size(2) * x.size(3) > 1)
        << "BatchNorm2d in training mode needs more than one value per channel, got input " << x.shape()
        << " (use a larger batch, or eval mode)";
    ops::batchnorm_forward_train(x, weight_->data(), bias_->data(), y, saved_, *running_mean_, *running_var_,
                                 momentum_, eps_);
    x_ = x;
  } else {
    ops::batchnorm_forward_eval(x, weight_->data(), bias_->data(), y, *running_mean_, *running_var_, eps_);
  }
  return y;
}

Tensor BatchNorm2d::backward(const Tensor& dy) {
  DPB_CHECK(x_.defined()) << "BatchNorm2d.backward without a training-mode forward";
  const bool acc = weight_->begin_grad();
  DPB_CHECK(bias_->begin_grad() == acc) << "BatchNorm2d: weight and bias gradients out of step";
  Tensor dx = Tensor::empty_like(x_);
  if (frozen_) {
    const ops::BatchNormSaved running{*running_mean_, *running_var_, Tensor()};
    ops::batchnorm_backward(x_, dy, weight_->data(), running, dx, weight_->grad(), bias_->grad(), eps_, acc, true);
  } else {
    ops::batchnorm_backward(x_, dy, weight_->data(), saved_, dx, weight_->grad(), bias_->grad(), eps_, acc);
  }
  bias_->mark_grad_ready();
  weight_->mark_grad_ready();
  x_ = Tensor();
  return dx;
}

int64_t BatchNorm2d::forward_flops(const Shape& input, Shape* output) const {
  *output = input;
  return 2 * input.numel();
}

std::unique_ptr<Module> BatchNorm2d::clone_structure() const {
  return std::make_unique<BatchNorm2d>(channels_, eps_, momentum_);
}

void freeze_batchnorm(Module& m, bool frozen) {
  if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) bn->set_frozen(frozen);
  for (auto& [name, child] : m.named_children()) freeze_batchnorm(*child, frozen);
}

}  // namespace dpb
