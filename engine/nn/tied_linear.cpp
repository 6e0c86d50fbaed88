#include "engine/nn/tied_linear.h"

#include "engine/backend/ops.h"
#include "engine/backend/precision.h"

namespace dpb {

void TiedLinear::tie(Parameter* weight) {
  DPB_CHECK(weight && weight->data().ndim() == 2) << "TiedLinear: ties to a 2-d weight";
  weight_ = weight;
  out_ = weight->data().size(0);
  in_ = weight->data().size(1);
}

// x (N, ..., in) -> (N, ..., out)
Tensor TiedLinear::forward(const Tensor& x) {
  DPB_CHECK(weight_) << "TiedLinear: forward before its weight was tied";
  DPB_CHECK(x.ndim() >= 2 && x.size(x.ndim() - 1) == in_)
      << "TiedLinear(" << in_ << ", " << out_ << ") expects (N, ..., " << in_ << "), got " << x.shape();
  DPB_CHECK(weight_->data().device() == x.device())
      << "TiedLinear: its weight lives on " << weight_->data().device() << " and its input on " << x.device()
      << " (tie it to a copy on its own device)";
  const int64_t rows = x.numel() / in_;
  std::vector<int64_t> dims = x.shape().dims();
  dims.back() = out_;
  Tensor y = Tensor::empty(Shape(dims), x.device(), compute_dtype(x.device()));
  const Tensor w = ops::compute_weight(weight_->data());
  Tensor y2 = y.view({rows, out_});
  ops::linear_forward(x.view({rows, in_}), w, Tensor(), y2);
  if (training_) {
    x_ = x;
    w_ = w;
  }
  return y;
}

Tensor TiedLinear::backward(const Tensor& dy_in) {
  DPB_CHECK(x_.defined()) << "TiedLinear.backward without a training-mode forward";
  const int64_t rows = x_.numel() / in_;
  const Tensor dy = dy_in.view({rows, out_});
  Tensor dx;
  if (needs_input_grad_) {
    dx = Tensor::empty(x_.shape(), dy.device(), x_.dtype());
    Tensor dx2 = dx.view({rows, in_});
    ops::linear_backward_data(dy, w_, dx2);
  }
  const bool acc = weight_->begin_grad();
  Tensor no_bias;
  ops::linear_backward_weights(x_.view({rows, in_}), dy, weight_->grad(), no_bias, acc);
  weight_->mark_grad_ready();
  x_ = w_ = Tensor();
  return dx;
}

int64_t TiedLinear::forward_flops(const Shape& input, Shape* output) const {
  std::vector<int64_t> dims = input.dims();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) rows *= dims[i];
  dims.back() = out_;
  *output = Shape(dims);
  return 2 * in_ * out_ * rows;
}

}  // namespace dpb
