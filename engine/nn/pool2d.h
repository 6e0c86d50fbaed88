#pragma once
// MaxPool2d and AvgPool2d (count_include_pad=True), square windows, as in PyTorch.
#include "engine/backend/ops.h"
#include "engine/nn/module.h"

namespace dpb {

class Pool2d : public Module {
 public:
  Pool2d(ops::PoolKind kind, int kernel, int stride, int padding);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return kind_ == ops::PoolKind::max ? "MaxPool2d" : "AvgPool2d"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;

 public:
  std::unique_ptr<Module> clone_structure() const override;

 private:
  ops::PoolKind kind_;
  ops::Pool2dParams p_;
  Tensor x_;          // (N, C, H, W) input of the saved forward
  Tensor y_;          // (N, C, Ho, Wo) its output
  Tensor workspace_;  // argmax for max pooling (CPU)
};

inline std::unique_ptr<Pool2d> MaxPool2d(int kernel, int stride, int padding = 0) {
  return std::make_unique<Pool2d>(ops::PoolKind::max, kernel, stride, padding);
}
inline std::unique_ptr<Pool2d> AvgPool2d(int kernel, int stride, int padding = 0) {
  return std::make_unique<Pool2d>(ops::PoolKind::avg, kernel, stride, padding);
}

}  // namespace dpb
