#pragma once
// Losses over a batch: mean softmax cross-entropy (classification, i32 labels) and
// mean squared error (regression, f32 targets of the output's shape).
#include <string>

#include "engine/tensor/tensor.h"

namespace dpb {

enum class LossKind { cross_entropy, mse };

std::string loss_name(LossKind k);

struct LossResult {
  float loss = 0.0f;
  int64_t correct = 0;  // correct argmax predictions (cross-entropy only)
  Tensor grad;          // d loss / d output, when requested
  // A deferred cross-entropy's totals, still on the device; resolve() reads them into
  // loss and correct (waiting for the device), so a GPU step synchronises once, at its
  // end, instead of stalling between forward and backward.
  Tensor pending;
  int64_t rows = 0, classes = 0;
  void resolve();
};

// With `deferred`, a cross-entropy on a GPU is only queued: call resolve() before
// reading loss or correct (a no-op otherwise).
LossResult compute_loss(LossKind kind, const Tensor& output, const Tensor& target, bool need_grad,
                        bool deferred = false);

}  // namespace dpb
