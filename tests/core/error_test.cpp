#include "engine/core/error.h"

#include <gtest/gtest.h>

#include "engine/core/rng.h"

namespace dpb {
namespace {

TEST(Error, CheckThrowsWithMessageAndLocation) {
  try {
    const int batch = 0;
    DPB_CHECK(batch > 0) << "batch must be positive, got " << batch;
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "batch must be positive, got 0");
    EXPECT_NE(e.where().find("tests/core/error_test.cpp:"), std::string::npos) << e.where();
    EXPECT_NE(std::string(e.what()).find("batch must be positive"), std::string::npos);
  }
}

TEST(Error, PassingCheckDoesNotEvaluateMessage) {
  int evaluated = 0;
  auto side_effect = [&] { return ++evaluated; };
  DPB_CHECK(true) << side_effect();
  EXPECT_EQ(evaluated, 0);
}

TEST(Error, HintIsPartOfWhat) {
  try {
    DPB_FAIL() << "out of memory" << "";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "out of memory");
  }
  Error e("m", "f.cpp:1", "try a smaller batch");
  EXPECT_EQ(std::string(e.what()), "m (try a smaller batch) [f.cpp:1]");
}

TEST(Rng, SameSeedSameStream) {
  Generator a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    differs |= x != c.next_u64();
  }
  EXPECT_TRUE(differs);
}

TEST(Rng, StateRoundTrip) {
  Generator a(7);
  a.next_u64();
  const auto s = a.state();
  const double x = a.uniform();
  Generator b;
  b.set_state(s);
  EXPECT_EQ(b.uniform(), x);
}

TEST(Rng, UniformAndNormalMoments) {
  Generator g(1);
  double su = 0, sn = 0, sn2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = g.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    const double z = g.normal();
    sn += z;
    sn2 += z * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.01);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
}

TEST(Rng, PermutationIsAPermutation) {
  Generator g(3);
  auto p = random_permutation(1000, g);
  std::vector<int> seen(1000, 0);
  for (auto i : p) seen[static_cast<size_t>(i)]++;
  for (int s : seen) EXPECT_EQ(s, 1);
  Generator g2(3);
  EXPECT_EQ(p, random_permutation(1000, g2));
}

}  // namespace
}  // namespace dpb
