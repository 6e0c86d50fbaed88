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

Tensor linear_rows_forward(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  std::vector<int64_t> dims = x.shape().dims();
  dims.back() = out;
  Tensor y = Tensor::empty(Shape(dims), x.device(), compute_dtype(x.device()));
  Tensor y2 = x.ndim() == 2 ? y : y.view({rows, out});
  ops::linear_forward(x.ndim() == 2 ? x : x.view({rows, in}), w, b, y2);
  return y;
}

Tensor linear_rows_backward(const Tensor& x, const Tensor& w, const Tensor& dy_in, bool input_grad, Tensor& dw,
                            Tensor& db, bool accumulate) {
  const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  const Tensor dy = dy_in.ndim() == 2 ? dy_in : dy_in.view({rows, out});
  Tensor dx;
  if (input_grad) {
    dx = Tensor::empty(x.shape(), dy.device(), x.dtype());
    Tensor dx2 = x.ndim() == 2 ? dx : dx.view({rows, in});
    ops::linear_backward_data(dy, w, dx2);
  }
  ops::linear_backward_weights(x.ndim() == 2 ? x : x.view({rows, in}), dy, dw, db, accumulate);
  return dx;
}

Tensor Linear::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() >= 2 && x.size(x.ndim() - 1) == in_)
      << "Linear(" << in_ << ", " << out_ << ") expects input (N, " << in_ << ") or (N, ..., " << in_ << "), got "
      << x.shape();
  const Tensor w = ops::compute_weight(weight_->data());
  Tensor y = linear_rows_forward(x, w, bias_ ? bias_->data() : Tensor());
  if (training_) {
    x_ = x;
    w_ = w;
  }
  return y;
}

Tensor Linear::backward(const Tensor& dy) {
  DPB_CHECK(x_.defined()) << "Linear.backward without a training-mode forward";
  const bool acc_w = weight_->begin_grad();
  Tensor db;
  if (bias_) {
    DPB_CHECK(bias_->begin_grad() == acc_w) << "Linear: weight and bias gradients out of step";
    db = bias_->grad();
  }
  Tensor dx = linear_rows_backward(x_, w_, dy, needs_input_grad_, weight_->grad(), db, acc_w);
  if (bias_) bias_->mark_grad_ready();
  weight_->mark_grad_ready();
  x_ = Tensor();
  w_ = Tensor();
  return dx;
}

int64_t linear_flops(const Shape& input, int64_t in, int64_t out, Shape* output) {
  std::vector<int64_t> dims = input.dims();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) rows *= dims[i];
  if (dims.empty()) dims.push_back(out);
  else dims.back() = out;
  *output = Shape(dims);
  return 2 * in * out * rows;
}

int64_t Linear::forward_flops(const Shape& input, Shape* output) const { return linear_flops(input, in_, out_, output); }

std::unique_ptr<Module> Linear::clone_structure() const {
  return std::make_unique<Linear>(in_, out_, has_bias_, nullptr);
}

}  // namespace dpb
