#pragma once
// Evaluation on a held-out split: eval mode (BatchNorm uses running statistics), no
// backward, mean loss and accuracy (a fraction) over the whole split.
#include "engine/data/dataset.h"
#include "engine/models/model.h"

namespace dpb {

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // fraction of correct argmax predictions (classification)
  int64_t samples = 0;
  double seconds = 0;
};

EvalResult evaluate(Model& model, const Dataset& data, int64_t batch, Device device);

}  // namespace dpb
