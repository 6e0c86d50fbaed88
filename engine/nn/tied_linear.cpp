#include "engine/nn/tied_linear.h"

#include "engine/backend/ops.h"
#include "engine/nn/linear.h"

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
  const Tensor w = ops::compute_weight(weight_->data());
  Tensor y = linear_rows_forward(x, w, Tensor());
  if (training_) {
    x_ = x;
    w_ = w;
  }
  return y;
}

Tensor TiedLinear::backward(const Tensor& dy) {
  DPB_CHECK(x_.defined()) << "TiedLinear.backward without a training-mode forward";
  const bool acc = weight_->begin_grad();
  Tensor no_bias;
  Tensor dx = linear_rows_backward(x_, w_, dy, needs_input_grad_, weight_->grad(), no_bias, acc);
  weight_->mark_grad_ready();
  x_ = w_ = Tensor();
  return dx;
}

int64_t TiedLinear::forward_flops(const Shape& input, Shape* output) const {
  return linear_flops(input, in_, out_, output);
}

}  // namespace dpb
