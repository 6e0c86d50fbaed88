#include "engine/data/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "engine/data/synthetic.h"

namespace dpb {
namespace {

std::vector<std::vector<float>> epoch_batches(DataLoader& l, int64_t epoch, int64_t first = 0) {
  std::vector<std::vector<float>> out;
  l.start_epoch(epoch, first);
  while (auto b = l.next()) out.push_back(b->x.to_vector());
  return out;
}

TEST(DataLoader, WorkersDeliverTheSameBatchesInOrder) {
  SyntheticDataset ds(Shape{3, 4, 4}, LossKind::cross_entropy, 10, 37, 1);
  RandomCropFlip aug(1, {0.0f, 0.0f, 0.0f});
  DistributedSampler s0(ds.size(), 1, 0, true, 5), s2(ds.size(), 1, 0, true, 5);
  LoaderOptions o;
  o.batch = 8;
  o.seed = 9;
  DataLoader serial(ds, s0, o, &aug);
  o.workers = 3;
  DataLoader parallel(ds, s2, o, &aug);
  EXPECT_EQ(serial.batches_per_epoch(), 5);
  for (int64_t e : {0, 1}) EXPECT_EQ(epoch_batches(serial, e), epoch_batches(parallel, e)) << "epoch " << e;
  EXPECT_NE(epoch_batches(serial, 0), epoch_batches(serial, 1));
  EXPECT_EQ(parallel.wait_ns().size(), 10u);
}

TEST(RandomCropFlip, ShiftsFlipsAndFillsDeterministically) {
  // A 1x1x4 row 1 2 3 4, padding 1: every outcome is a shifted and/or flipped row
  // with the fill value entering at the edge, or all fill (shifted by a row).
  const std::vector<std::vector<float>> possible{{1, 2, 3, 4}, {9, 1, 2, 3}, {2, 3, 4, 9},
                                                 {4, 3, 2, 1}, {9, 4, 3, 2}, {3, 2, 1, 9},
                                                 {9, 9, 9, 9}};
  RandomCropFlip aug(1, {9.0f});
  std::set<std::vector<float>> seen;
  for (int64_t i = 0; i < 200; ++i) {
    std::vector<float> x{1, 2, 3, 4};
    Generator g = sample_generator(5, 0, i);
    aug.apply(x.data(), Shape{1, 1, 4}, g);
    EXPECT_NE(std::find(possible.begin(), possible.end(), x), possible.end());
    seen.insert(x);
    std::vector<float> again{1, 2, 3, 4};
    Generator g2 = sample_generator(5, 0, i);
    aug.apply(again.data(), Shape{1, 1, 4}, g2);
    EXPECT_EQ(x, again);
  }
  EXPECT_EQ(seen.size(), 7u) << "every crop offset and flip must occur";
}

TEST(DataLoader, LastBatchAndResumeFromABatch) {
  SyntheticDataset ds(Shape{2}, LossKind::mse, 2, 10, 1);
  DistributedSampler s(ds.size(), 1, 0, false);
  LoaderOptions o;
  o.batch = 4;
  DataLoader l(ds, s, o);
  auto all = epoch_batches(l, 0);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].size(), 2u * 2u);  // 10 = 4 + 4 + 2
  auto tail = epoch_batches(l, 0, 1);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0], all[1]);
  o.drop_last = true;
  DataLoader d(ds, s, o);
  EXPECT_EQ(d.batches_per_epoch(), 2);
}

TEST(DataLoader, RecordsHowLongTheConsumerWaited) {
  SyntheticDataset ds(Shape{2}, LossKind::mse, 2, 8, 1);
  DistributedSampler s(ds.size(), 1, 0, false);
  LoaderOptions o;
  o.batch = 4;
  o.delay_ms = 30;
  DataLoader l(ds, s, o);
  l.start_epoch(0);
  while (l.next()) {
  }
  ASSERT_EQ(l.wait_ns().size(), 2u);
  for (auto w : l.wait_ns()) EXPECT_GE(w, 30'000'000);
}

TEST(DataLoader, ShardsFollowTheSampler) {
  SyntheticDataset ds(Shape{1}, LossKind::mse, 1, 12, 1);
  DistributedSampler r0(ds.size(), 2, 0, false), r1(ds.size(), 2, 1, false);
  LoaderOptions o;
  o.batch = 6;
  DataLoader a(ds, r0, o), b(ds, r1, o);
  auto ea = epoch_batches(a, 0), eb = epoch_batches(b, 0);
  ASSERT_EQ(ea.size(), 1u);
  ASSERT_EQ(eb.size(), 1u);
  // Rank 0 holds samples 0, 2, 4, ...; rank 1 holds 1, 3, 5, ...
  Batch first = make_batch(ds, {0, 2, 4, 6, 8, 10});
  EXPECT_EQ(ea[0], first.x.to_vector());
  EXPECT_NE(ea[0], eb[0]);
}

// Each batch names the dataset samples in it, in the sampler's order, with or without
// loader threads: what tells whether two ranks read the same data.
TEST(DataLoader, BatchesNameTheirSamples) {
  SyntheticDataset ds(Shape{1}, LossKind::mse, 1, 23, 1);
  for (int workers : {0, 2}) {
    DistributedSampler s(ds.size(), 2, 1, true, 7);
    LoaderOptions o;
    o.batch = 5;
    o.workers = workers;
    DataLoader l(ds, s, o);
    l.start_epoch(3);
    std::vector<int64_t> seen;
    while (auto b = l.next()) {
      ASSERT_EQ(static_cast<int64_t>(b->indices.size()), b->size());
      EXPECT_EQ(b->x.to_vector(), make_batch(ds, b->indices).x.to_vector());
      seen.insert(seen.end(), b->indices.begin(), b->indices.end());
    }
    s.set_epoch(3);
    EXPECT_EQ(seen, s.indices()) << workers << " worker(s)";
  }
}

}  // namespace
}  // namespace dpb
