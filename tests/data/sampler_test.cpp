#include "engine/data/sampler.h"

#include <gtest/gtest.h>

#include <set>

#include "engine/core/error.h"

namespace dpb {
namespace {

TEST(DistributedSampler, ShardsAreDisjointAndCoverTheDataset) {
  const int64_t n = 103;
  for (int replicas : {1, 2, 3, 4}) {
    std::multiset<int64_t> all;
    for (int r = 0; r < replicas; ++r) {
      DistributedSampler s(n, replicas, r, true, 7);
      s.set_epoch(2);
      auto idx = s.indices();
      EXPECT_EQ(static_cast<int64_t>(idx.size()), (n + replicas - 1) / replicas);
      all.insert(idx.begin(), idx.end());
    }
    std::set<int64_t> distinct(all.begin(), all.end());
    EXPECT_EQ(static_cast<int64_t>(distinct.size()), n) << replicas << " replicas must cover every sample";
    // Padding repeats exactly total - n samples.
    EXPECT_EQ(static_cast<int64_t>(all.size()) - n, ((n + replicas - 1) / replicas) * replicas - n);
  }
}

TEST(DistributedSampler, SamePermutationOnEveryRankNewPerEpoch) {
  DistributedSampler a(50, 2, 0, true, 3), b(50, 2, 1, true, 3);
  a.set_epoch(0);
  b.set_epoch(0);
  auto a0 = a.indices(), b0 = b.indices();
  // Interleaving the shards rebuilds one permutation: rank r holds positions r, r+2, ...
  std::vector<int64_t> perm;
  for (size_t i = 0; i < a0.size(); ++i) {
    perm.push_back(a0[i]);
    perm.push_back(b0[i]);
  }
  std::set<int64_t> s(perm.begin(), perm.end());
  EXPECT_EQ(s.size(), 50u);
  a.set_epoch(1);
  EXPECT_NE(a.indices(), a0) << "a new epoch must reshuffle";
  a.set_epoch(0);
  EXPECT_EQ(a.indices(), a0) << "same seed and epoch, same order";
}

TEST(DistributedSampler, DropLastAndNoShuffle) {
  DistributedSampler s(10, 3, 2, false, 0, true);
  EXPECT_EQ(s.num_samples(), 3);  // ceil((10 - 3) / 3)
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{2, 5, 8}));
  DistributedSampler p(10, 3, 2, false, 0, false);
  EXPECT_EQ(p.indices(), (std::vector<int64_t>{2, 5, 8, 1}));  // padded with index 1 (wraps to the start)
  EXPECT_THROW(DistributedSampler(10, 2, 2), Error);
  EXPECT_THROW(DistributedSampler(0, 1, 0), Error);
}

}  // namespace
}  // namespace dpb
