#include "engine/nn/basic_block.h"

namespace dpb {

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int stride, Generator* gen)
    : in_(in_channels), out_(out_channels), stride_(stride) {
  conv1_ = &register_module("conv1", std::make_unique<Conv2d>(in_, out_, 3, stride, 1, false, gen));
  bn1_ = &register_module("bn1", std::make_unique<BatchNorm2d>(out_));
  relu1_ = &register_module("relu", std::make_unique<ReLU>(true));
  conv2_ = &register_module("conv2", std::make_unique<Conv2d>(out_, out_, 3, 1, 1, false, gen));
  bn2_ = &register_module("bn2", std::make_unique<BatchNorm2d>(out_));
  relu2_ = &register_module("relu_out", std::make_unique<ReLU>(true));
  add_shortcut(conv1_, in_, out_, stride, gen);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = relu1_->forward(bn1_->forward(conv1_->forward(x)));
  return relu2_->forward(forward_shortcut(x, bn2_->forward(conv2_->forward(out))));
}

Tensor BasicBlock::backward(const Tensor& grad_out) {
  Tensor g = relu2_->backward(grad_out);
  Tensor g_main = conv1_->backward(bn1_->backward(relu1_->backward(conv2_->backward(bn2_->backward(g)))));
  return backward_shortcut(g, std::move(g_main));
}

int64_t BasicBlock::forward_flops(const Shape& input, Shape* output) const {
  Shape s1, s2;
  const int64_t f = conv1_->forward_flops(input, &s1) + bn1_->forward_flops(s1, &s1) +
                    conv2_->forward_flops(s1, &s2) + bn2_->forward_flops(s2, &s2) + shortcut_flops(input);
  *output = s2;
  return f + 2 * s2.numel();
}

std::unique_ptr<Module> BasicBlock::clone_structure() const {
  return std::make_unique<BasicBlock>(in_, out_, stride_, nullptr);
}

}  // namespace dpb
