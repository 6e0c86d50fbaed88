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
  DPB_CHECK(x.ndim() >= 2 && x.size(x.ndim() - 1) == in_)
      << "Linear(" << in_ << ", " << out_ << ") expects input (N, " << in_ << ") or (N, ..., " << in_ << "), got "
      << x.shape();
  // Leading dimensions are rows, as torch.nn.Linear treats them: (N, T, in) -> (N, T, out).
  const int64_t rows = x.numel() / in_;
  std::vector<int64_t> dims = x.shape().dims();
  dims.back() = out_;
  Tensor y = Tensor::empty(Shape(dims), x.device(), compute_dtype(x.device()));
  const Tensor w = ops::compute_weight(weight_->data());
  const Tensor x2 = x.ndim() == 2 ? x : x.view({rows, in_});
  Tensor y2 = x.ndim() == 2 ? y : y.view({rows, out_});
  ops::linear_forward(x2, w, bias_ ? bias_->data() : Tensor(), y2);
  if (training_) {
    x_ = x;
    w_ = w;
  }
  return y;
}

Tensor Linear::backward(const Tensor& dy_in) {
  DPB_CHECK(x_.defined()) << "Linear.backward without a training-mode forward";
  const int64_t rows = x_.numel() / in_;
  const Tensor x = x_.ndim() == 2 ? x_ : x_.view({rows, in_});
  const Tensor dy = dy_in.ndim() == 2 ? dy_in : dy_in.view({rows, out_});
  Tensor dx;
  if (needs_input_grad_) {
    dx = Tensor::empty(x_.shape(), dy.device(), x_.dtype());
    Tensor dx2 = x_.ndim() == 2 ? dx : dx.view({rows, in_});
    ops::linear_backward_data(dy, w_, dx2);
  }
  const bool acc_w = weight_->begin_grad();
  Tensor db;
  if (bias_) {
    DPB_CHECK(bias_->begin_grad() == acc_w) << "Linear: weight and bias gradients out of step";
    db = bias_->grad();
  }
  ops::linear_backward_weights(x, dy, weight_->grad(), db, acc_w);
  if (bias_) bias_->mark_grad_ready();
  weight_->mark_grad_ready();
  x_ = Tensor();
  w_ = Tensor();
  return dx;
}

int64_t Linear::forward_flops(const Shape& input, Shape* output) const {
  std::vector<int64_t> dims = input.dims();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) rows *= dims[i];
  if (dims.empty()) dims.push_back(out_);
  else dims.back() = out_;
  *output = Shape(dims);
  return 2 * in_ * out_ * rows;
}

std::unique_ptr<Module> Linear::clone_structure() const {
  return std::make_unique<Linear>(in_, out_, has_bias_, nullptr);
}

}  // namespace dpb
