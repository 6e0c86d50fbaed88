#pragma once
// BatchNorm2d as torch.nn.BatchNorm2d: affine, running statistics with momentum,
// batch statistics in training mode and running statistics in eval mode. Frozen, it
// normalises with the running statistics in training too (and does not update them),
// while gamma and beta still train: what fine-tuning uses, and the setting in which
// data-parallel replicas compute exactly what one device does.
//
// With a sync group (SyncBatchNorm, convert_sync_batchnorm) training-mode statistics are
// those of the whole global batch: each rank's per-channel sums are all-reduced in the
// forward (one collective), and the sums the backward needs in the backward (one more),
// so N ranks of b samples normalise and differentiate exactly as one device with N x b.
// The parameter gradients stay local sums (DDP averages them, as in PyTorch).
#include "engine/backend/ops.h"
#include "engine/nn/module.h"

namespace dpb {

namespace comm {
class ProcessGroup;
}

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
  void set_sync_group(comm::ProcessGroup* group) { sync_ = group; }

 protected:
  void copy_settings_from(const Module& other) override {
    if (const auto* bn = dynamic_cast<const BatchNorm2d*>(&other)) {
      frozen_ = bn->frozen_;
      sync_ = bn->sync_;
    }
  }

 private:
  Tensor sync_forward(const Tensor& x);
  Tensor sync_backward(const Tensor& dy);

  bool frozen_ = false;
  comm::ProcessGroup* sync_ = nullptr;
  Tensor sync_mean_, sync_var_;  // (C) the global batch statistics of the last forward
  int64_t sync_count_ = 0;       // values per channel in the global batch
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
// Makes every BatchNorm2d in `m` a SyncBatchNorm over `group` (null: local again), as
// torch.nn.SyncBatchNorm.convert_sync_batchnorm.
void convert_sync_batchnorm(Module& m, comm::ProcessGroup* group);

}  // namespace dpb
