#pragma once
// The PyTorch-written GPT-2 files of tests/data/gpt2 (their README says what each holds),
// and how far one tensor is from another, for the tests that check dpbench against them.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "engine/train/safetensors.h"

namespace dpb::test {

// Every tensor of tests/data/gpt2/<file>, by name.
inline std::map<std::string, Tensor> load_gpt2_fixture(const std::string& file) {
  std::map<std::string, Tensor> m;
  for (auto& [name, t] : safetensors::load(std::string(DPB_SOURCE_DIR) + "/tests/data/gpt2/" + file).tensors)
    m[name] = t;
  return m;
}

// gpt2-tiny with a fixture's initial weights (its "init.<name>" tensors) for its batch's
// sequence length, on `device`.
inline std::unique_ptr<Model> gpt2_tiny_from(const std::map<std::string, Tensor>& start, Device device) {
  Generator g(0);
  ModelOptions mo;
  mo.seq = start.at("tokens").size(1);
  auto model = build_model("gpt2-tiny", g, mo);
  for (auto& [name, p] : model->named_parameters()) p->data().copy_from(start.at("init." + name));
  model->to(device);
  return model;
}

// The references' AdamW (gpt2_reference.py): lr 1e-3, weight decay 0.1 where the model's
// decay mask says.
inline OptimizerOptions reference_adamw() {
  OptimizerOptions oo;
  oo.kind = OptimizerKind::adamw;
  oo.lr = 1e-3f;
  oo.weight_decay = 0.1f;
  return oo;
}

// ||a - b|| (L2), with ||b|| in *norm_b.
inline double norm_of_difference(const Tensor& a, const Tensor& b, double* norm_b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  double d = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    d += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    n += static_cast<double>(y[i]) * y[i];
  }
  *norm_b = std::sqrt(n);
  return std::sqrt(d);
}

// Each of `after` against a reference file's after.<name>: within 1e-5 of the reference's
// norm plus 1e-3 of how far the reference moved it from the start's init.<name>.
inline void expect_parameters_match(const std::map<std::string, Tensor>& after,
                                    const std::map<std::string, Tensor>& want,
                                    const std::map<std::string, Tensor>& start, const std::string& who) {
  for (const auto& [name, t] : after) {
    double norm = 0, unused = 0;
    const double diff = norm_of_difference(t, want.at("after." + name), &norm);
    const double movement = norm_of_difference(want.at("after." + name), start.at("init." + name), &unused);
    EXPECT_LT(diff, 1e-5 * norm + 1e-3 * movement)
        << name << " after 5 AdamW steps: |ours - " << who << "| " << diff << ", |" << who << "| " << norm
        << ", how far " << who << " moved it " << movement;
  }
}

}  // namespace dpb::test
