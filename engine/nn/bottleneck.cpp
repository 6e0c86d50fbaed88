#include "engine/nn/bottleneck.h"

#include "engine/backend/ops.h"

namespace dpb {

Bottleneck::Bottleneck(int64_t in_channels, int64_t width, int stride, Generator* gen)
    : in_(in_channels), width_(width), stride_(stride) {
  const int64_t out = width * expansion;
  conv1_ = &register_module("conv1", std::make_unique<Conv2d>(in_, width, 1, 1, 0, false, gen));
  bn1_ = &register_module("bn1", std::make_unique<BatchNorm2d>(width));
  relu1_ = &register_module("relu1", std::make_unique<ReLU>(true));
  conv2_ = &register_module("conv2", std::make_unique<Conv2d>(width, width, 3, stride, 1, false, gen));
  bn2_ = &register_module("bn2", std::make_unique<BatchNorm2d>(width));
  relu2_ = &register_module("relu2", std::make_unique<ReLU>(true));
  conv3_ = &register_module("conv3", std::make_unique<Conv2d>(width, out, 1, 1, 0, false, gen));
  bn3_ = &register_module("bn3", std::make_unique<BatchNorm2d>(out));
  relu3_ = &register_module("relu", std::make_unique<ReLU>(true));
  downsample_ = nullptr;
  if (stride != 1 || in_ != out) {
    auto ds = std::make_unique<Sequential>();
    ds->add("0", std::make_unique<Conv2d>(in_, out, 1, stride, 0, false, gen));
    ds->add("1", std::make_unique<BatchNorm2d>(out));
    downsample_ = &register_module("downsample", std::move(ds));
  }
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = relu1_->forward(bn1_->forward(conv1_->forward(x)));
  out = relu2_->forward(bn2_->forward(conv2_->forward(out)));
  out = bn3_->forward(conv3_->forward(out));
  Tensor shortcut = downsample_ ? downsample_->forward(x) : x;
  shortcut_layout_ = shortcut.layout();
  if (shortcut.layout() != out.layout()) shortcut = shortcut.to_layout(out.layout());
  DPB_CHECK(shortcut.shape() == out.shape()) << "Bottleneck: shortcut " << shortcut.shape() << " vs main path "
                                              << out.shape();
  ops::add(out, shortcut, out);
  return relu3_->forward(out);
}

Tensor Bottleneck::backward(const Tensor& grad_out) {
  Tensor g = relu3_->backward(grad_out);
  Tensor g_main = bn3_->backward(g);
  g_main = conv3_->backward(g_main);
  g_main = bn2_->backward(relu2_->backward(g_main));
  g_main = conv2_->backward(g_main);
  g_main = conv1_->backward(bn1_->backward(relu1_->backward(g_main)));
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

int64_t Bottleneck::forward_flops(const Shape& input, Shape* output) const {
  Shape s1, s2, s3, s4;
  int64_t f = conv1_->forward_flops(input, &s1) + bn1_->forward_flops(s1, &s1) + conv2_->forward_flops(s1, &s2) +
              bn2_->forward_flops(s2, &s2) + conv3_->forward_flops(s2, &s3) + bn3_->forward_flops(s3, &s3);
  if (downsample_) f += downsample_->forward_flops(input, &s4);
  *output = s3;
  return f + 2 * s3.numel();
}

void Bottleneck::set_needs_input_grad(bool on) {
  Module::set_needs_input_grad(on);
  conv1_->set_needs_input_grad(on);
  if (downsample_) downsample_->set_needs_input_grad(on);
}

std::unique_ptr<Module> Bottleneck::clone_structure() const {
  return std::make_unique<Bottleneck>(in_, width_, stride_, nullptr);
}

}  // namespace dpb
