#pragma once
// Linear: y = x W^T + b, as torch.nn.Linear.
#include "engine/core/rng.h"
#include "engine/nn/module.h"

namespace dpb {

// y (..., out) = x (..., in) w^T [+ b] with the leading dimensions as rows, as
// torch.nn.Linear treats them; w (out, in) in its compute form (ops::compute_weight).
Tensor linear_rows_forward(const Tensor& x, const Tensor& w, const Tensor& b);
// From the forward's x and w and the output gradient: dx (when input_grad), and
// dw (+)= / db (+)= (db may be undefined).
Tensor linear_rows_backward(const Tensor& x, const Tensor& w, const Tensor& dy, bool input_grad, Tensor& dw,
                            Tensor& db, bool accumulate);
// Forward FLOPs of such a product for one sample of shape `input` (..., in).
int64_t linear_flops(const Shape& input, int64_t in, int64_t out, Shape* output);

class Linear : public Module {
 public:
  // `gen` initialises the weights like PyTorch; null leaves them uninitialised (for clones).
  Linear(int64_t in_features, int64_t out_features, bool bias, Generator* gen);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "Linear"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;

 public:
  std::unique_ptr<Module> clone_structure() const override;

 private:
  int64_t in_, out_;
  bool has_bias_;
  Parameter* weight_;  // (out, in)
  Parameter* bias_;    // (out) or null
  Tensor x_;           // (N, in) saved input
  Tensor w_;           // the weight as the forward computed with it (ops::compute_weight)
};

}  // namespace dpb
