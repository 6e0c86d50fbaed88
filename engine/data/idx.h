#pragma once
// MNIST / Fashion-MNIST in IDX format (gzipped or not): images (magic 0x00000803,
// u8, N x rows x cols) and labels (magic 0x00000801, u8, N). Samples are (1, rows,
// cols) floats, scaled to [0, 1] then normalised with the dataset's mean and std.
// Default location: where Debian's dataset-fashion-mnist installs the files.
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace dpb {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

class IdxDataset : public Dataset {
 public:
  // Throws dpb::Error naming the file, what was expected and what was found.
  IdxDataset(std::string name, const std::string& images_path, const std::string& labels_path, float mean, float std);

  std::string name() const override { return name_; }
  int64_t size() const override { return count_; }
  Shape sample_shape() const override { return Shape{1, rows_, cols_}; }
  LossKind target_kind() const override { return LossKind::cross_entropy; }
  int64_t target_width() const override { return 10; }
  void get(int64_t index, float* x, int32_t* label, float* target) const override;

 private:
  std::string name_;
  int64_t count_ = 0, rows_ = 0, cols_ = 0;
  float mean_, inv_std_;
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
};

// The train or test split of "fashion-mnist" or "mnist" in `dir` (file names as
// published: train-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz], ...).
std::unique_ptr<IdxDataset> load_mnist_like(const std::string& name, const std::string& dir, bool train);

}  // namespace dpb
