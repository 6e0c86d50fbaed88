#include "tests/support/equivalence.h"

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

namespace dpb::test {

double moved_relative_difference(const ParamValues& initial, const ParamValues& a, const ParamValues& b) {
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(a.size(), initial.size());
  double worst = 0;
  for (size_t i = 0; i < std::min({initial.size(), a.size(), b.size()}); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size()) << "parameter " << i;
    double move = 0, diff = 0, norm = 0;
    for (size_t k = 0; k < std::min({initial[i].size(), a[i].size(), b[i].size()}); ++k) {
      const double x = a[i][k], y = b[i][k], x0 = initial[i][k];
      move += (x - x0) * (x - x0);
      diff += (x - y) * (x - y);
      norm += x0 * x0;
    }
    worst = std::max(worst, std::sqrt(diff) / std::max({std::sqrt(move), 1e-3 * std::sqrt(norm), 1e-12}));
  }
  return worst;
}

}  // namespace dpb::test
