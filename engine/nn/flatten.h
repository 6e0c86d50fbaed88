#pragma once
// Flatten: (N, ...) -> (N, prod(...)) in logical (plain) order: a view of a plain input,
// a reorder of a channel-blocked one; backward restores the input's shape and layout.
#include "engine/nn/module.h"

namespace dpb {

class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    DPB_CHECK(x.ndim() >= 1) << "Flatten of a 0-d tensor";
    x_shape_ = x.shape();
    x_layout_ = x.layout();
    return x.to_plain().view({x.size(0), x.shape().row_numel()});
  }
  Tensor backward(const Tensor& dy) override { return dy.view(x_shape_).to_layout(x_layout_); }
  std::string type_name() const override { return "Flatten"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override {
    *output = Shape{input.numel()};
    return 0;
  }

 public:
  std::unique_ptr<Module> clone_structure() const override { return std::make_unique<Flatten>(); }

 private:
  Shape x_shape_;
  Layout x_layout_ = Layout::plain;
};

}  // namespace dpb
