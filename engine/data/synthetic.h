#pragma once
// Synthetic data that does not depend on I/O, deterministic under a seed, and
// learnable (so loss falls and accuracy rises):
// - classification: each class has a fixed random prototype; a sample is its
//   class prototype plus noise of unit variance (uniform, from a hash of the index
//   and the element: cheap enough that a run on it waits for no data);
// - regression: a fixed linear teacher, target_j = 0.5 * x_(j mod d) + 0.1.
// Sample i depends only on (seed, i), so any subset or order is reproducible.
#include "engine/data/dataset.h"

namespace dpb {

class SyntheticDataset : public Dataset {
 public:
  // `first` offsets the sample indices: a test split is the same task (same class
  // prototypes) with other samples.
  SyntheticDataset(Shape sample_shape, LossKind kind, int64_t width, int64_t size, uint64_t seed,
                   float noise = 1.0f, int64_t first = 0);

  std::string name() const override { return "synthetic"; }
  int64_t size() const override { return size_; }
  Shape sample_shape() const override { return shape_; }
  LossKind target_kind() const override { return kind_; }
  int64_t target_width() const override { return width_; }
  void get(int64_t index, float* x, int32_t* label, float* target) const override;

 private:
  Shape shape_;
  LossKind kind_;
  int64_t width_;
  int64_t size_;
  uint64_t seed_;
  float noise_;
  int64_t first_;
  std::vector<float> prototypes_;  // (classes, sample numel) for classification
};

}  // namespace dpb
