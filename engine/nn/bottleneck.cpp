#include "engine/nn/bottleneck.h"

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
  add_shortcut(conv1_, in_, out, stride, gen);
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = relu1_->forward(bn1_->forward(conv1_->forward(x)));
  out = relu2_->forward(bn2_->forward(conv2_->forward(out)));
  return relu3_->forward(forward_shortcut(x, bn3_->forward(conv3_->forward(out))));
}

Tensor Bottleneck::backward(const Tensor& grad_out) {
  Tensor g = relu3_->backward(grad_out);
  Tensor g_main = bn3_->backward(g);
  g_main = conv3_->backward(g_main);
  g_main = bn2_->backward(relu2_->backward(g_main));
  g_main = conv2_->backward(g_main);
  g_main = conv1_->backward(bn1_->backward(relu1_->backward(g_main)));
  return backward_shortcut(g, std::move(g_main));
}

int64_t Bottleneck::forward_flops(const Shape& input, Shape* output) const {
  Shape s1, s2, s3;
  const int64_t f = conv1_->forward_flops(input, &s1) + bn1_->forward_flops(s1, &s1) + conv2_->forward_flops(s1, &s2) +
                    bn2_->forward_flops(s2, &s2) + conv3_->forward_flops(s2, &s3) + bn3_->forward_flops(s3, &s3) +
                    shortcut_flops(input);
  *output = s3;
  return f + 2 * s3.numel();
}

std::unique_ptr<Module> Bottleneck::clone_structure() const {
  return std::make_unique<Bottleneck>(in_, width_, stride_, nullptr);
}

}  // namespace dpb
