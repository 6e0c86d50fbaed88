#pragma once
// Linear: y = x W^T + b, as torch.nn.Linear.
#include "engine/core/rng.h"
#include "engine/nn/module.h"

namespace dpb {

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
