#pragma once
// CIFAR-10 binary version: data_batch_1..5.bin (train) and test_batch.bin (test), each
// 10000 records of 1 label byte + 3072 pixel bytes (3 x 32 x 32, channel-major).
// Samples are normalised per channel with the training set's mean and std.
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace dpb {

class Cifar10Dataset : public Dataset {
 public:
  // Throws dpb::Error naming a missing, truncated or corrupt file.
  Cifar10Dataset(const std::string& dir, bool train);

  std::string name() const override { return "cifar10"; }
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Shape sample_shape() const override { return Shape{3, 32, 32}; }
  LossKind target_kind() const override { return LossKind::cross_entropy; }
  int64_t target_width() const override { return 10; }
  void get(int64_t index, float* x, int32_t* label, float* target) const override;

  static constexpr int64_t kRecordBytes = 1 + 3 * 32 * 32;

 private:
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
};

}  // namespace dpb
