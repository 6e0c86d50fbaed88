// The DataLoader delivering to a GPU, with the next batch's copy running on the copy
// stream while the current one is in use: the same batches, in the same order, as
// delivered to the CPU.
#include <gtest/gtest.h>

#include "engine/backend/ops.h"
#include "engine/data/loader.h"
#include "engine/data/synthetic.h"
#include "tests/cuda/cuda_test_util.h"

namespace dpb {
namespace {

std::vector<std::vector<float>> epoch_batches(Device device, int workers, int64_t epoch) {
  SyntheticDataset data(Shape{3, 8, 8}, LossKind::cross_entropy, 10, 100, 5);
  DistributedSampler sampler(data.size(), 1, 0, true, 5);
  LoaderOptions o;
  o.batch = 16;
  o.workers = workers;
  o.device = device;
  DataLoader loader(data, sampler, o);
  loader.start_epoch(epoch);
  std::vector<std::vector<float>> out;
  while (auto b = loader.next()) {
    EXPECT_EQ(b->x.device(), device);
    // Use the batch on the device, as a step would, before the next one arrives.
    Tensor doubled = Tensor::empty_like(b->x);
    ops::add(b->x, b->x, doubled);
    out.push_back(doubled.to_vector());
    const auto labels = b->target.to_labels();
    out.emplace_back(labels.begin(), labels.end());
  }
  return out;
}

TEST(CudaLoader, StagedCopiesDeliverTheSameBatches) {
  DPB_REQUIRE_GPU();
  for (int64_t epoch : {0, 1}) {
    const auto want = epoch_batches(Device::cpu(), 0, epoch);
    EXPECT_EQ(epoch_batches(Device::cuda(0), 2, epoch), want) << "epoch " << epoch;
    EXPECT_EQ(epoch_batches(Device::cuda(0), 0, epoch), want) << "epoch " << epoch;
  }
}

}  // namespace
}  // namespace dpb
