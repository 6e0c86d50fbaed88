// SyncBatchNorm: N ranks each holding a slice of a global batch normalise and
// differentiate exactly as one BatchNorm over the whole batch; with DDP, ResNet-18 with
// batch statistics then trains as on one device.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/data/synthetic.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "tests/support/ranks.h"

namespace dpb {
namespace {

Tensor random(const Shape& s, uint64_t seed, float shift) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = shift + 2.0f * static_cast<float>(g.normal());
  return Tensor::from_vector(s, v);
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-6, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
  }
  EXPECT_LT(diff / scale, tol) << what;
}

// Every rank's slice against one BatchNorm over the whole batch, inputs in `layout`.
void check_against_one_batchnorm(int world, int64_t C, Layout layout) {
  const int64_t H = 3, W = 4;
  const std::vector<int64_t> rows{3, 1, 2, 4};  // uneven slices: per rank
  int64_t total = 0;
  for (int r = 0; r < world; ++r) total += rows[static_cast<size_t>(r)];
  const Tensor X = random({total, C, H, W}, 1, 3.0f), DY = random({total, C, H, W}, 2, 0.0f);
  // One device, the whole batch.
  cpu::CpuDeviceScope scope(0);
  BatchNorm2d ref(C);
  Tensor y = ref.forward(X.to_layout(layout)).to_plain();
  ref.zero_grad();
  Tensor dx = ref.backward(DY.to_layout(layout)).to_plain();
  const auto params = ref.parameters();
  test::run_ranks_ok(world, [&](int rank, comm::ProcessGroup& pg) {
    const Device dev = Device::cpu(rank);
    int64_t begin = 0;
    for (int r = 0; r < rank; ++r) begin += rows[static_cast<size_t>(r)];
    const int64_t end = begin + rows[static_cast<size_t>(rank)];
    BatchNorm2d bn(C);
    bn.to(dev);
    bn.set_sync_group(&pg);
    Tensor yr = bn.forward(X.slice(begin, end).clone().to(dev).to_layout(layout)).to_plain();
    bn.zero_grad();
    Tensor dxr = bn.backward(DY.slice(begin, end).clone().to(dev).to_layout(layout)).to_plain();
    expect_near(yr.to_vector(), y.slice(begin, end).to_vector(), 1e-5, "output");
    expect_near(dxr.to_vector(), dx.slice(begin, end).to_vector(), 1e-4, "input gradient");
    // Parameter gradients are local sums: summed over the ranks they are the whole batch's.
    auto bp = bn.parameters();
    for (size_t i = 0; i < bp.size(); ++i) {
      Tensor g = bp[i]->grad().clone();
      pg.allreduce(g, comm::ReduceOp::sum)->wait();
      expect_near(g.to_vector(), params[i]->grad().to_vector(), 1e-5, "parameter gradient " + std::to_string(i));
    }
    auto rb = bn.named_buffers(), refb = ref.named_buffers();
    for (size_t i = 0; i < rb.size(); ++i)
      expect_near(rb[i].second->to_vector(), refb[i].second->to_vector(), 1e-5, rb[i].first);
  });
}

class SyncBn : public ::testing::TestWithParam<int> {};

TEST_P(SyncBn, RanksComputeWhatOneBatchNormOverTheGlobalBatchComputes) {
  check_against_one_batchnorm(GetParam(), 5, Layout::plain);
}

TEST_P(SyncBn, BlockedAndChannelsLastLayoutsToo) {
  check_against_one_batchnorm(GetParam(), 5, Layout::nChw8c);  // padded channel block
  check_against_one_batchnorm(GetParam(), 32, Layout::nChw16c);
  check_against_one_batchnorm(GetParam(), 6, Layout::nhwc);
}

INSTANTIATE_TEST_SUITE_P(Ranks, SyncBn, ::testing::Values(2, 3, 4));

// ||a - b|| / ||b - initial|| (L2): a difference relative to how far training moved b.
double relative_to_update(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& initial) {
  double d2 = 0, u2 = 0;
  for (size_t k = 0; k < b.size(); ++k) {
    d2 += (static_cast<double>(a[k]) - b[k]) * (static_cast<double>(a[k]) - b[k]);
    u2 += (static_cast<double>(b[k]) - initial[k]) * (static_cast<double>(b[k]) - initial[k]);
  }
  return std::sqrt(d2 / std::max(u2, 1e-30));
}

// One step of ResNet-18 (batch statistics) under DDP on `world` ranks of `per_rank`
// samples, with or without SyncBatchNorm; returns rank 0's parameters and buffers.
struct Trained {
  std::vector<std::vector<float>> params, buffers;
};

std::unique_ptr<Model> resnet18_on(Device d) {
  Generator g(9);
  auto m = build_model("resnet18", g);
  m->to(d);
  return m;
}

Trained snapshot(Model& m) {
  Trained t;
  for (auto* q : m.parameters()) t.params.push_back(q->data().to_vector());
  for (auto& [name, b] : m.named_buffers()) t.buffers.push_back(b->to_vector());
  return t;
}

OptimizerOptions sgd() {
  OptimizerOptions oo;
  oo.lr = 0.05f;
  return oo;
}

Trained ddp_step(int world, int64_t per_rank, bool sync) {
  Trained out;
  test::run_ranks_ok(world, [&](int rank, comm::ProcessGroup& pg) {
    auto m = resnet18_on(Device::cpu(rank));
    if (sync) convert_sync_batchnorm(*m, &pg);
    SyntheticDataset ds(m->spec().input, m->spec().loss, m->spec().outputs, 64, 3);
    DistributedDataParallel model(*m, pg);
    auto opt = make_optimizer(sgd(), m->parameters());
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < per_rank; ++i) idx.push_back(rank + world * i);  // this rank's shard
    Batch b = make_batch(ds, idx);
    LossResult l = compute_loss(m->spec().loss, model.forward(b.x.to(Device::cpu(rank))),
                                b.target.to(Device::cpu(rank)), true);
    model.backward(l.grad);
    opt->step();
    if (rank == 0) out = snapshot(*m);
  });
  return out;
}

TEST(SyncBn, Resnet18WithBatchStatisticsTrainsAsOneDevice) {
  const int world = 2;
  const int64_t per_rank = 4;
  cpu::CpuDeviceScope scope(0);
  auto single = resnet18_on(Device::cpu(0));
  const Trained initial = snapshot(*single);
  SyntheticDataset ds(single->spec().input, single->spec().loss, single->spec().outputs, 64, 3);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < per_rank * world; ++i) idx.push_back(i);
  Batch b = make_batch(ds, idx);
  LossResult l = compute_loss(single->spec().loss, single->forward(b.x), b.target, true);
  single->backward(l.grad);
  auto opt = make_optimizer(sgd(), single->parameters());
  opt->step();
  const Trained one = snapshot(*single);

  // The forward is continuous: the running statistics (the global batch's mean and
  // variance) agree to float rounding.
  const Trained synced = ddp_step(world, per_rank, true);
  ASSERT_EQ(synced.buffers.size(), one.buffers.size());
  for (size_t i = 0; i < one.buffers.size(); ++i) expect_near(synced.buffers[i], one.buffers[i], 1e-4, "buffer");
  // The update: the global statistics are summed in another order than one device sums
  // them, which can move a pre-activation at a ReLU's kink to its other side; at batch 8
  // that changes a gradient by a fraction of a percent. Without SyncBatchNorm the update
  // is far off (each rank normalises with its own 4 samples).
  const Trained local = ddp_step(world, per_rank, false);
  double worst_synced = 0, worst_local = 0;
  for (size_t i = 0; i < one.params.size(); ++i) {
    worst_synced = std::max(worst_synced, relative_to_update(synced.params[i], one.params[i], initial.params[i]));
    worst_local = std::max(worst_local, relative_to_update(local.params[i], one.params[i], initial.params[i]));
  }
  EXPECT_LT(worst_synced, 2e-2);
  EXPECT_GT(worst_local, 0.2);
}

}  // namespace
}  // namespace dpb
