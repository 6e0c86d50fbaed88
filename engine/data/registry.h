#pragma once
// Datasets by name, as --dataset selects them: the train and test splits, and the
// augmentation the training split gets.
#include <memory>
#include <string>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/data/transforms.h"

namespace dpb {

struct DatasetSplits {
  std::unique_ptr<Dataset> train;
  std::unique_ptr<Dataset> test;
  std::unique_ptr<Transform> augment;  // null when the dataset gets none
  std::string dir;                     // where the files were read from (empty for synthetic)
};

struct DatasetRequest {
  std::string name = "synthetic";
  std::string dir;  // empty: the dataset's default location; for "text" the file
  bool augment = true;
  // For synthetic data: the task of the model that will train on it (i32 input: token
  // sequences of sample_shape[0] tokens over a vocabulary of `width`).
  Shape sample_shape{1, 28, 28};
  DType input_dtype = DType::f32;
  LossKind loss = LossKind::cross_entropy;
  int64_t width = 10;
  uint64_t seed = 0;
};

const std::vector<std::string>& dataset_names();
std::string default_data_dir(const std::string& name);
// The per-sample input shape of a named dataset without loading it, if fixed.
Shape dataset_sample_shape(const std::string& name);
// Throws dpb::Error for an unknown name (listing the valid ones) or bad files.
DatasetSplits load_dataset(const DatasetRequest& r);

}  // namespace dpb
