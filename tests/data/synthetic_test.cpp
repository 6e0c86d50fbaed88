#include "engine/data/synthetic.h"

#include <gtest/gtest.h>

namespace dpb {
namespace {

TEST(Synthetic, DeterministicRandomAccess) {
  SyntheticDataset a(Shape{1, 4, 4}, LossKind::cross_entropy, 10, 100, 3);
  SyntheticDataset b(Shape{1, 4, 4}, LossKind::cross_entropy, 10, 100, 3);
  Batch x = make_batch(a, {5, 17, 5});
  Batch y = make_batch(b, {5, 17, 5});
  EXPECT_EQ(x.x.to_vector(), y.x.to_vector());
  EXPECT_EQ(x.target.to_labels(), y.target.to_labels());
  // The same index gives the same sample within a batch.
  auto v = x.x.to_vector();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(v[static_cast<size_t>(i)], v[static_cast<size_t>(32 + i)]);
  EXPECT_EQ(x.target.to_labels()[0], x.target.to_labels()[2]);
}

TEST(Synthetic, LabelsCoverClassesAndRegressionIsLinear) {
  SyntheticDataset c(Shape{8}, LossKind::cross_entropy, 4, 400, 1);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < 400; ++i) idx.push_back(i);
  std::vector<int> count(4, 0);
  for (auto l : make_batch(c, idx).target.to_labels()) count[static_cast<size_t>(l)]++;
  for (int k : count) EXPECT_GT(k, 50);
  SyntheticDataset r(Shape{3}, LossKind::mse, 2, 10, 1);
  Batch b = make_batch(r, {0});
  EXPECT_FLOAT_EQ(b.target.to_vector()[1], 0.5f * b.x.to_vector()[1] + 0.1f);
  EXPECT_THROW(make_batch(r, {10}), Error);
}

}  // namespace
}  // namespace dpb
