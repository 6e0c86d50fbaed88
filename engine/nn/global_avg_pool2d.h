#pragma once
// Global average pooling: (N, C, H, W) -> (N, C). Equals PyTorch's
// AdaptiveAvgPool2d((1, 1)) followed by flatten (how ResNet uses it).
#include "engine/nn/module.h"

namespace dpb {

class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "GlobalAvgPool2d"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override {
    *output = Shape{input[0]};
    return input.numel();
  }

 public:
  std::unique_ptr<Module> clone_structure() const override { return std::make_unique<GlobalAvgPool2d>(); }

 private:
  Shape x_shape_;
  Layout x_layout_ = Layout::plain;
  DType x_dtype_ = DType::f32;
};

}  // namespace dpb
