#pragma once
// Model: a named network (a Sequential whose top-level children are its layers) plus
// what it expects and what it is trained with. forward() checks the input shape
// against the spec, so a wrong dataset/model pairing is a clear error up front.
#include <memory>
#include <string>
#include <vector>

#include "engine/core/rng.h"
#include "engine/nn/loss.h"
#include "engine/nn/sequential.h"

namespace dpb {

struct ModelSpec {
  std::string name;
  Shape input;          // per sample: (C, H, W) or (features)
  int64_t outputs = 0;  // classes (cross-entropy) or regression width (mse)
  LossKind loss = LossKind::cross_entropy;
  bool has_batchnorm = false;
};

class Model : public Sequential {
 public:
  explicit Model(ModelSpec spec) : spec_(std::move(spec)) {}

  const ModelSpec& spec() const { return spec_; }
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return spec_.name; }
  std::unique_ptr<Module> clone_structure() const override;
  // Forward FLOPs for one sample (x3 for a training step).
  int64_t flops_per_sample() const;

 private:
  ModelSpec spec_;
};

struct ModelOptions {
  // Input image shape for the convolutional models; (0, 0, 0) picks the model's default.
  Shape image{0, 0, 0};
  int64_t classes = 10;
};

// Builds a model by name with PyTorch-default initialisation from `gen`.
// Throws dpb::Error listing the valid names for an unknown one.
std::unique_ptr<Model> build_model(const std::string& name, Generator& gen, const ModelOptions& options = {});
const std::vector<std::string>& model_names();

}  // namespace dpb
