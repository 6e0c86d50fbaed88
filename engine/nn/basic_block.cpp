#include "engine/nn/basic_block.h"

#include "engine/backend/ops.h"

namespace dpb {

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int stride, Generator* gen)
    : in_(in_channels), out_(out_channels), stride_(stride) {
  conv1_ = &register_module("conv1", std::make_unique<Conv2d>(in_, out_, 3, stride, 1, false, gen));
  bn1_ = &register_module("bn1", std::make_unique<BatchNorm2d>(out_));
  relu1_ = &register_module("relu", std::make_unique<ReLU>(true));
  conv2_ = &register_module("conv2", std::make_unique<Conv2d>(out_, out_, 3, 1, 1, false, gen));
  bn2_ = &register_module("bn2", std::make_unique<BatchNorm2d>(out_));
  relu2_ = &register_module("relu_out", std::make_unique<ReLU>(true));
  downsample_ = nullptr;
  if (stride != 1 || in_ != out_) {
    auto ds = std::make_unique<Sequential>();
    ds->add("0", std::make_unique<Conv2d>(in_, out_, 1, stride, 0, false, gen));
    ds->add("1", std::make_unique<BatchNorm2d>(out_));
    downsample_ = &register_module("downsample", std::move(ds));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = relu1_->forward(bn1_->forward(conv1_->forward(x)));
  out = bn2_->forward(conv2_->forward(out));
  Tensor shortcut = downsample_ ? downsample_->forward(x) : x;
  shortcut_layout_ = shortcut.layout();
  if (shortcut.layout() != out.layout()) shortcut = shortcut.to_layout(out.layout());
  DPB_CHECK(shortcut.shape() == out.shape()) << "BasicBlock: shortcut " << shortcut.shape() << " vs main path "
                                              << out.shape();
  ops::add(out, shortcut, out);
  return relu2_->forward(out);
}

Tensor BasicBlock::backward(const Tensor& grad_out) {
  Tensor g = relu2_->backward(grad_out);
  Tensor g_main = conv1_->backward(bn1_->backward(relu1_->backward(conv2_->backward(bn2_->backward(g)))));
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

int64_t BasicBlock::forward_flops(const Shape& input, Shape* output) const {
  Shape s1, s2, s3;
  int64_t f = conv1_->forward_flops(input, &s1) + bn1_->forward_flops(s1, &s1) +
              conv2_->forward_flops(s1, &s2) + bn2_->forward_flops(s2, &s2);
  if (downsample_) f += downsample_->forward_flops(input, &s3);
  *output = s2;
  return f + 2 * s2.numel();
}

void BasicBlock::set_needs_input_grad(bool on) {
  Module::set_needs_input_grad(on);
  conv1_->set_needs_input_grad(on);
  if (downsample_) downsample_->set_needs_input_grad(on);
}

std::unique_ptr<Module> BasicBlock::clone_structure() const {
  return std::make_unique<BasicBlock>(in_, out_, stride_, nullptr);
}

}  // namespace dpb
