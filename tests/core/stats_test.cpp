#include "engine/core/stats.h"

#include <gtest/gtest.h>

namespace dpb {
namespace {

TEST(Stats, SummaryOfKnownValues) {
  const Summary s = summarize({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_EQ(s.count, 10);
  EXPECT_DOUBLE_EQ(s.median, 5.5);
  EXPECT_DOUBLE_EQ(s.p10, 1.9);
  EXPECT_DOUBLE_EQ(s.p90, 9.1);
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_NEAR(s.stddev, 3.0276503540974917, 1e-12);
  EXPECT_NEAR(s.cv, 3.0276503540974917 / 5.5, 1e-12);
  EXPECT_EQ(s.outliers, 0);
}

TEST(Stats, FlagsOutliersByMad) {
  std::vector<double> v{10.0, 10.1, 9.9, 10.05, 9.95, 10.02, 9.98, 30.0};
  const Summary s = summarize(v);
  EXPECT_EQ(s.outliers, 1);
  EXPECT_NEAR(s.median, 10.01, 1e-9);
}

TEST(Stats, EmptyAndSingle) {
  EXPECT_EQ(summarize({}).count, 0);
  const Summary one = summarize({2.5});
  EXPECT_DOUBLE_EQ(one.median, 2.5);
  EXPECT_DOUBLE_EQ(one.stddev, 0.0);
}

}  // namespace
}  // namespace dpb
