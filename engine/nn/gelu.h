#pragma once
// GELU with the tanh approximation, as GPT-2 (torch.nn.GELU(approximate="tanh")):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Backward needs the input.
#include "engine/nn/module.h"

namespace dpb {

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "GELU"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override {
    *output = input;
    return 0;
  }
  std::unique_ptr<Module> clone_structure() const override { return std::make_unique<GELU>(); }

 private:
  Tensor x_;  // saved input
};

}  // namespace dpb
