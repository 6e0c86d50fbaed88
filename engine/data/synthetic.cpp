#include "engine/data/synthetic.h"

#include "engine/core/rng.h"

namespace dpb {

SyntheticDataset::SyntheticDataset(Shape sample_shape, LossKind kind, int64_t width, int64_t size, uint64_t seed,
                                   float noise, int64_t first)
    : shape_(std::move(sample_shape)), kind_(kind), width_(width), size_(size), seed_(seed), noise_(noise),
      first_(first) {
  DPB_CHECK(size > 0) << "synthetic dataset size must be positive, got " << size;
  DPB_CHECK(width > 0) << "synthetic dataset target width must be positive, got " << width;
  if (kind_ == LossKind::cross_entropy) {
    Generator gen(seed ^ 0x5eed5eed5eedULL);
    prototypes_.resize(static_cast<size_t>(width_ * shape_.numel()));
    for (auto& v : prototypes_) v = static_cast<float>(gen.normal());
  }
}

void SyntheticDataset::get(int64_t index, float* x, int32_t* label, float* target) const {
  Generator gen(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(first_ + index));
  const int64_t n = shape_.numel();
  if (kind_ == LossKind::cross_entropy) {
    const auto c = static_cast<int64_t>(gen.below(static_cast<uint64_t>(width_)));
    const float* proto = prototypes_.data() + c * n;
    for (int64_t i = 0; i < n; ++i) x[i] = proto[i] + noise_ * static_cast<float>(gen.normal());
    *label = static_cast<int32_t>(c);
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(gen.normal());
    for (int64_t j = 0; j < width_; ++j) target[j] = 0.5f * x[j % n] + 0.1f;
  }
}

}  // namespace dpb
