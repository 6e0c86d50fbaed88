#pragma once
// DistributedSampler with torch.utils.data.DistributedSampler's semantics: every rank
// draws the same permutation (seeded by seed + epoch, new each set_epoch), the total
// is padded by repeating indices from the start to a multiple of the replica count
// (or the tail is dropped with drop_last), and rank r takes every num_replicas-th
// index starting at r. Shards are disjoint and together cover the dataset. With one
// replica it is PyTorch's RandomSampler (shuffle) or SequentialSampler.
#include <cstdint>
#include <vector>

namespace dpb {

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int num_replicas = 1, int rank = 0, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  // This rank's indices for the current epoch, in order.
  std::vector<int64_t> indices() const;
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }

 private:
  int64_t size_;
  int num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

}  // namespace dpb
