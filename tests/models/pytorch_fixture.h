#pragma once
// The PyTorch-written GPT-2 files of tests/data/gpt2 (their README says what each holds),
// and how far one tensor is from another, for the tests that check dpbench against them.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/train/safetensors.h"

namespace dpb::test {

// Every tensor of tests/data/gpt2/<file>, by name.
inline std::map<std::string, Tensor> load_gpt2_fixture(const std::string& file) {
  std::map<std::string, Tensor> m;
  for (auto& [name, t] : safetensors::load(std::string(DPB_SOURCE_DIR) + "/tests/data/gpt2/" + file).tensors)
    m[name] = t;
  return m;
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

}  // namespace dpb::test
