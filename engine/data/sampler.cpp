#include "engine/data/sampler.h"

#include <numeric>

#include "engine/core/error.h"
#include "engine/core/rng.h"

namespace dpb {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : size_(dataset_size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed),
      drop_last_(drop_last) {
  DPB_CHECK(dataset_size > 0) << "DistributedSampler over an empty dataset";
  DPB_CHECK(num_replicas >= 1) << "DistributedSampler: num_replicas must be >= 1, got " << num_replicas;
  DPB_CHECK(rank >= 0 && rank < num_replicas) << "DistributedSampler: rank " << rank << " outside [0, "
                                              << num_replicas << ")";
  if (drop_last && size_ % num_replicas != 0) {
    num_samples_ = (size_ - num_replicas) / num_replicas + ((size_ - num_replicas) % num_replicas != 0 ? 1 : 0);
    // PyTorch: ceil((len - replicas) / replicas)
  } else {
    num_samples_ = (size_ + num_replicas - 1) / num_replicas;
  }
  DPB_CHECK(num_samples_ > 0) << "DistributedSampler with drop_last: " << size_ << " samples for " << num_replicas
                              << " replicas leaves none per rank";
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> idx;
  if (shuffle_) {
    Generator g(seed_ + static_cast<uint64_t>(epoch_));
    idx = random_permutation(size_, g);
  } else {
    idx.resize(static_cast<size_t>(size_));
    std::iota(idx.begin(), idx.end(), int64_t{0});
  }
  const auto total = static_cast<size_t>(total_size());
  if (!drop_last_) {
    const size_t n = idx.size();
    for (size_t i = 0; idx.size() < total; ++i) idx.push_back(idx[i % n]);
  } else {
    idx.resize(total);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(num_replicas_)) mine.push_back(idx[i]);
  return mine;
}

}  // namespace dpb
