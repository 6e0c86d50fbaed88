#pragma once
// ResNet Bottleneck (torchvision's ResNet-50/101, "v1.5": the stride sits on the 3x3):
// conv1x1-bn-relu-conv3x3(stride)-bn-relu-conv1x1(x4 width)-bn, plus the shortcut
// (identity, or conv1x1-bn "downsample" when stride or width change), add, relu.
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/relu.h"
#include "engine/nn/residual_block.h"

namespace dpb {

class Bottleneck : public ResidualBlock {
 public:
  static constexpr int64_t expansion = 4;
  // `width` is the 3x3's channel count; the block outputs width * 4 channels.
  Bottleneck(int64_t in_channels, int64_t width, int stride, Generator* gen);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "Bottleneck"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override;

 private:
  int64_t in_, width_;
  int stride_;
  Conv2d* conv1_;
  BatchNorm2d* bn1_;
  ReLU* relu1_;
  Conv2d* conv2_;
  BatchNorm2d* bn2_;
  ReLU* relu2_;
  Conv2d* conv3_;
  BatchNorm2d* bn3_;
  ReLU* relu3_;
};

}  // namespace dpb
