#include "tests/support/checkpoints.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/train/safetensors.h"

namespace dpb::test {

double checkpoint_difference(const std::string& a, const std::string& b) {
  const auto fa = safetensors::load(a), fb = safetensors::load(b);
  EXPECT_EQ(fa.tensors.size(), fb.tensors.size());
  std::map<std::string, Tensor> other(fb.tensors.begin(), fb.tensors.end());
  double worst = 0;
  for (const auto& [name, t] : fa.tensors) {
    auto it = other.find(name);
    if (it == other.end()) {
      ADD_FAILURE() << name << " missing from " << b;
      continue;
    }
    EXPECT_EQ(t.shape(), it->second.shape()) << name;
    const auto x = t.to_vector(), y = it->second.to_vector();
    double norm2 = 1e-30, diff2 = 0;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      norm2 += static_cast<double>(x[i]) * x[i];
      diff2 += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    }
    worst = std::max(worst, std::sqrt(diff2 / norm2));
  }
  return worst;
}

}  // namespace dpb::test
