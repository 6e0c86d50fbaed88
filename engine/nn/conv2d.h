#pragma once
// Conv2d: square kernel, stride and padding, as torch.nn.Conv2d (no groups/dilation).
#include "engine/backend/ops.h"
#include "engine/core/rng.h"
#include "engine/nn/module.h"

namespace dpb {

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int kernel, int stride, int padding, bool bias, Generator* gen);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "Conv2d"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;

 public:
  std::unique_ptr<Module> clone_structure() const override;

 private:
  int64_t in_, out_;
  int kernel_;
  ops::Conv2dParams p_;
  bool has_bias_;
  Parameter* weight_;  // (O, I, k, k)
  Parameter* bias_;    // (O) or null
  Tensor x_;           // (N, I, H, W) saved input
  Tensor w_;           // the weight as the forward computed with it (ops::compute_weight)
};

}  // namespace dpb
