#include "engine/nn/linear.h"

#include "engine/backend/ops.h"
#include "engine/backend/precision.h"
#include "engine/nn/init.h"

namespace dpb {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Generator* gen)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  DPB_CHECK(in_features > 0 && out_features > 0) << "Linear(" << in_features << ", " << out_features
                                                 << "): sizes must be positive";
  Tensor w = Tensor::empty({out_, in_});
  if (gen) init::uniform(w, init::default_bound(in_), *gen);
  weight_ = &register_parameter("weight", w);
  bias_ = nullptr;
  if (bias) {
    Tensor b = Tensor::empty({out_});
    if (gen) init::uniform(b, init::default_bound(in_), *gen);
    bias_ = &register_parameter("bias", b);
  }
}

Tensor Linear::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() == 2 && x.size(1) == in_)
      << "Linear(" << in_ << ", " << out_ << ") expects input (N, " << in_ << "), got " << x.shape();
  Tensor y = Tensor::empty({x.size(0), out_}, x.device(), compute_dtype(x.device()));
  const Tensor w = ops::compute_weight(weight_->data());
  ops::linear_forward(x, w, bias_ ? bias_->data() : Tensor(), y);
  if (training_) {
    x_ = x;
    w_ = w;
  }
  return y;
}

Tensor Linear::backward(const Tensor& dy) {
  DPB_CHECK(x_.defined()) << "Linear.backward without a training-mode forward";
  Tensor dx;
  if (needs_input_grad_) {
    dx = Tensor::empty(x_.shape(), dy.device(), x_.dtype());
    ops::linear_backward_data(dy, w_, dx);
  }
  const bool acc_w = weight_->begin_grad();
  Tensor db;
  if (bias_) {
    DPB_CHECK(bias_->begin_grad() == acc_w) << "Linear: weight and bias gradients out of step";
    db = bias_->grad();
  }
  ops::linear_backward_weights(x_, dy, weight_->grad(), db, acc_w);
  if (bias_) bias_->mark_grad_ready();
  weight_->mark_grad_ready();
  x_ = Tensor();
  w_ = Tensor();
  return dx;
}

int64_t Linear::forward_flops(const Shape& input, Shape* output) const {
  *output = Shape{out_};
  return 2 * in_ * out_;
}

std::unique_ptr<Module> Linear::clone_structure() const {
  return std::make_unique<Linear>(in_, out_, has_bias_, nullptr);
}

}  // namespace dpb
