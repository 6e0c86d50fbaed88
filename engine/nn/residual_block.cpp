#include "engine/nn/residual_block.h"

#include "engine/backend/ops.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/conv2d.h"

namespace dpb {

void ResidualBlock::add_shortcut(Module* first, int64_t in_channels, int64_t out_channels, int stride,
                                 Generator* gen) {
  first_ = first;
  if (stride == 1 && in_channels == out_channels) return;
  auto ds = std::make_unique<Sequential>();
  ds->add("0", std::make_unique<Conv2d>(in_channels, out_channels, 1, stride, 0, false, gen));
  ds->add("1", std::make_unique<BatchNorm2d>(out_channels));
  downsample_ = &register_module("downsample", std::move(ds));
}

Tensor ResidualBlock::forward_shortcut(const Tensor& x, Tensor out) {
  Tensor shortcut = downsample_ ? downsample_->forward(x) : x;
  shortcut_layout_ = shortcut.layout();
  if (shortcut.layout() != out.layout()) shortcut = shortcut.to_layout(out.layout());
  DPB_CHECK(shortcut.shape() == out.shape()) << type_name() << ": shortcut " << shortcut.shape() << " vs main path "
                                              << out.shape();
  ops::add(out, shortcut, out);
  return out;
}

Tensor ResidualBlock::backward_shortcut(const Tensor& g, Tensor g_main) {
  // The shortcut's gradient goes back in the layout its forward produced.
  const Tensor g_for_shortcut = g.to_layout(shortcut_layout_);
  if (!needs_input_grad_) {
    if (downsample_) downsample_->backward(g_for_shortcut);
    return Tensor();
  }
  Tensor g_short = downsample_ ? downsample_->backward(g_for_shortcut) : g_for_shortcut;
  if (g_short.layout() != g_main.layout()) g_short = g_short.to_layout(g_main.layout());
  ops::add(g_main, g_short, g_main);
  return g_main;
}

int64_t ResidualBlock::shortcut_flops(const Shape& input) const {
  Shape s;
  return downsample_ ? downsample_->forward_flops(input, &s) : 0;
}

void ResidualBlock::set_needs_input_grad(bool on) {
  Module::set_needs_input_grad(on);
  if (first_) first_->set_needs_input_grad(on);
  if (downsample_) downsample_->set_needs_input_grad(on);
}

}  // namespace dpb
