#pragma once
// Per-sample augmentations applied by the DataLoader after Dataset::get (which already
// normalises). Each sample gets its own generator, seeded from (seed, epoch, index),
// so augmentation is deterministic under a seed whatever the worker count or order.
#include <vector>

#include "engine/core/rng.h"
#include "engine/tensor/shape.h"

namespace dpb {

class Transform {
 public:
  virtual ~Transform() = default;
  // x holds one sample of shape s (C, H, W).
  virtual void apply(float* x, const Shape& s, Generator& gen) const = 0;
};

// torchvision's RandomCrop(size, padding) + RandomHorizontalFlip(0.5): pad by `pad`
// on each side with `fill` (per channel: the normalised value of a black pixel), take
// a random crop of the original size, flip left-right with probability 1/2.
class RandomCropFlip : public Transform {
 public:
  RandomCropFlip(int pad, std::vector<float> fill) : pad_(pad), fill_(std::move(fill)) {}
  void apply(float* x, const Shape& s, Generator& gen) const override;

 private:
  int pad_;
  std::vector<float> fill_;
};

// The generator for sample `index` in `epoch`.
Generator sample_generator(uint64_t seed, int64_t epoch, int64_t index);

}  // namespace dpb
