#pragma once
// Evaluation on a held-out split: eval mode (BatchNorm uses running statistics), no
// backward, mean loss and accuracy (a fraction) over the whole split.
#include <functional>

#include "engine/data/dataset.h"
#include "engine/models/model.h"

namespace dpb {

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // fraction of correct argmax predictions (classification)
  int64_t samples = 0;
  double seconds = 0;
};

// The loss of a batch's output against its targets (no gradient); empty: the model's own.
using EvalLoss = std::function<LossResult(const Tensor& out, const Tensor& target)>;

EvalResult evaluate(Model& model, const Dataset& data, int64_t batch, Device device, const EvalLoss& loss = {});

}  // namespace dpb
