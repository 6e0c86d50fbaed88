#pragma once
// Dataset: random access to samples, as torch.utils.data.Dataset. A sample is an
// input (sample_shape()) and a target: a class label, or a regression vector of
// target_width() values. Batches are assembled by make_batch (and the DataLoader).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/nn/loss.h"
#include "engine/tensor/tensor.h"

namespace dpb {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;
  virtual LossKind target_kind() const = 0;
  // Classes (cross-entropy) or regression width (mse).
  virtual int64_t target_width() const = 0;
  // Writes sample `index` into x (sample_shape().numel() floats) and its target into
  // *label (classification) or target (target_width() floats, regression).
  virtual void get(int64_t index, float* x, int32_t* label, float* target) const = 0;

  // Token sequences (language modelling) have i32 inputs: a sample is T tokens
  // (sample_shape() = (T)) and its target the T tokens that follow each, over a
  // vocabulary of target_width(); they are read with get_tokens, not get.
  virtual DType input_dtype() const { return DType::f32; }
  virtual void get_tokens(int64_t index, int32_t* tokens, int32_t* next) const;
};

struct Batch {
  Tensor x;       // (N, sample_shape...) f32, or (N, T) i32 tokens
  Tensor target;  // (N) i32 labels, (N, width) f32, or (N, T) i32 next tokens
  std::vector<int64_t> indices;  // the dataset's samples in it (which data a rank trained on)
  int64_t size() const { return x.defined() ? x.size(0) : 0; }
};

// Gathers the samples at `indices` into a batch on the CPU.
Batch make_batch(const Dataset& ds, const std::vector<int64_t>& indices);
// The empty batch of n samples that make_batch and the loader fill (pinned for a GPU).
Batch allocate_batch(const Dataset& ds, int64_t n, bool pinned);
// Writes sample `index` of `ds` into row i of a batch from allocate_batch.
void fill_batch_row(const Dataset& ds, int64_t index, Batch& b, int64_t i);

}  // namespace dpb
