#pragma once
// What torchvision's two ResNet blocks share: the shortcut (identity, or conv1x1-bn
// "downsample" when stride or width change), added to the main path's output, and its
// gradient added to the main path's input gradient.
#include "engine/core/rng.h"
#include "engine/nn/sequential.h"

namespace dpb {

class ResidualBlock : public Module {
 public:
  // The block's input feeds the main path's first layer and the downsample.
  void set_needs_input_grad(bool on) override;

 protected:
  // Called at the end of the constructor, so the downsample's parameters follow the main
  // path's (torchvision's order). `first`: the main path's first layer.
  void add_shortcut(Module* first, int64_t in_channels, int64_t out_channels, int stride, Generator* gen);
  // out + shortcut(x), in out's layout (out is written).
  Tensor forward_shortcut(const Tensor& x, Tensor out);
  // The block's input gradient: g_main + the shortcut's gradient of g (the gradient at
  // the add); an empty tensor when the input needs none (the downsample still learns).
  Tensor backward_shortcut(const Tensor& g, Tensor g_main);
  int64_t shortcut_flops(const Shape& input) const;

 private:
  Module* first_ = nullptr;
  Sequential* downsample_ = nullptr;         // null for an identity shortcut
  Layout shortcut_layout_ = Layout::plain;  // of the shortcut's output, for its gradient
};

}  // namespace dpb
