#pragma once
// ReLU, optionally in place (as torchvision uses it after BatchNorm). Its backward
// needs only the output, so in place is safe whenever the producer of x does not
// need its own output (true for Conv2d, Linear, BatchNorm2d and the residual add).
#include "engine/nn/module.h"

namespace dpb {

class ReLU : public Module {
 public:
  explicit ReLU(bool inplace = false) : inplace_(inplace) {}

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "ReLU"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override {
    *output = input;
    return 0;
  }

 public:
  std::unique_ptr<Module> clone_structure() const override { return std::make_unique<ReLU>(inplace_); }

 private:
  bool inplace_;
  Tensor y_;  // saved output
};

}  // namespace dpb
