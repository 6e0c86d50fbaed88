#pragma once
// BatchNorm2d as torch.nn.BatchNorm2d: affine, running statistics with momentum,
// batch statistics in training mode and running statistics in eval mode. Frozen, it
// normalises with the running statistics in training too (and does not update them),
// while gamma and beta still train: what fine-tuning uses, and the setting in which
// data-parallel replicas compute exactly what one device does.
#include "engine/backend/ops.h"
#include "engine/nn/module.h"

namespace dpb {

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, float eps = 1e-5f, float momentum = 0.1f);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "BatchNorm2d"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;

 public:
  std::unique_ptr<Module> clone_structure() const override;
  void set_frozen(bool frozen) { frozen_ = frozen; }
  bool frozen() const { return frozen_; }

 protected:
  void copy_settings_from(const Module& other) override {
    if (const auto* bn = dynamic_cast<const BatchNorm2d*>(&other)) frozen_ = bn->frozen_;
  }

 private:
  bool frozen_ = false;
  int64_t channels_;
  float eps_, momentum_;
  Parameter* weight_;     // (C) gamma
  Parameter* bias_;       // (C) beta
  Tensor* running_mean_;  // (C)
  Tensor* running_var_;   // (C)
  Tensor x_;              // (N, C, H, W) saved input
  ops::BatchNormSaved saved_;
};

// Freezes (or unfreezes) every BatchNorm2d in `m`.
void freeze_batchnorm(Module& m, bool frozen = true);

}  // namespace dpb
