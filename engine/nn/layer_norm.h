#pragma once
// LayerNorm over the last dimension, as torch.nn.LayerNorm(C) (eps 1e-5, weight 1, bias 0):
// x (..., C) -> (x - mean) / sqrt(var + eps) * weight + bias, per row.
#include "engine/nn/module.h"

namespace dpb {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = 1e-5f);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "LayerNorm"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override;

 private:
  int64_t dim_;
  float eps_;
  Parameter* weight_;  // (C)
  Parameter* bias_;    // (C)
  Tensor x_;           // saved input (..., C)
  Tensor mean_, rstd_;  // (rows) saved statistics
};

}  // namespace dpb
