#include "engine/nn/layer_norm.h"

#include "engine/backend/ops.h"

namespace dpb {

LayerNorm::LayerNorm(int64_t dim, float eps) : dim_(dim), eps_(eps) {
  DPB_CHECK(dim > 0) << "LayerNorm(" << dim << "): size must be positive";
  weight_ = &register_parameter("weight", Tensor::full({dim}, 1.0f));
  bias_ = &register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() >= 2 && x.size(x.ndim() - 1) == dim_)
      << "LayerNorm(" << dim_ << ") expects input (N, ..., " << dim_ << "), got " << x.shape();
  const int64_t rows = x.numel() / dim_;
  Tensor y = Tensor::empty_like(x);
  Tensor mean = Tensor::empty({rows}, x.device()), rstd = Tensor::empty({rows}, x.device());
  ops::layernorm_forward(x, weight_->data(), bias_->data(), y, mean, rstd, eps_);
  if (training_) {
    x_ = x;
    mean_ = mean;
    rstd_ = rstd;
  }
  return y;
}

Tensor LayerNorm::backward(const Tensor& dy) {
  DPB_CHECK(x_.defined()) << "LayerNorm.backward without a training-mode forward";
  Tensor dx;
  if (needs_input_grad_) dx = Tensor::empty_like(x_);
  const bool acc = weight_->begin_grad();
  DPB_CHECK(bias_->begin_grad() == acc) << "LayerNorm: weight and bias gradients out of step";
  ops::layernorm_backward(x_, dy, weight_->data(), mean_, rstd_, dx, weight_->grad(), bias_->grad(), acc);
  bias_->mark_grad_ready();
  weight_->mark_grad_ready();
  x_ = mean_ = rstd_ = Tensor();
  return dx;
}

int64_t LayerNorm::forward_flops(const Shape& input, Shape* output) const {
  *output = input;
  return 8 * input.numel();  // mean, variance, normalise, scale and shift
}

std::unique_ptr<Module> LayerNorm::clone_structure() const { return std::make_unique<LayerNorm>(dim_, eps_); }

}  // namespace dpb
