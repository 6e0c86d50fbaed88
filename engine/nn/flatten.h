#pragma once
// Flatten: (N, ...) -> (N, prod(...)), a view; backward restores the shape.
#include "engine/nn/module.h"

namespace dpb {

class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    DPB_CHECK(x.ndim() >= 1) << "Flatten of a 0-d tensor";
    x_shape_ = x.shape();
    return x.view({x.size(0), x.shape().row_numel()});
  }
  Tensor backward(const Tensor& dy) override { return dy.view(x_shape_); }
  std::string type_name() const override { return "Flatten"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override {
    *output = Shape{input.numel()};
    return 0;
  }

 public:
  std::unique_ptr<Module> clone_structure() const override { return std::make_unique<Flatten>(); }

 private:
  Shape x_shape_;
};

}  // namespace dpb
