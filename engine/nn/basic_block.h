#pragma once
// ResNet BasicBlock (torchvision): conv3x3-bn-relu-conv3x3-bn, plus the shortcut
// (identity, or conv1x1-bn "downsample" when stride or width change), add, relu.
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/relu.h"
#include "engine/nn/residual_block.h"

namespace dpb {

class BasicBlock : public ResidualBlock {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int stride, Generator* gen);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "BasicBlock"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override;

 private:
  int64_t in_, out_;
  int stride_;
  Conv2d* conv1_;
  BatchNorm2d* bn1_;
  ReLU* relu1_;
  Conv2d* conv2_;
  BatchNorm2d* bn2_;
  ReLU* relu2_;
};

}  // namespace dpb
