#include "engine/backend/cpu/cpu_context.h"
#include "engine/core/error.h"

#include <gtest/gtest.h>

#include <thread>

#include "engine/backend/ops.h"
#include "engine/core/rng.h"
#include <omp.h>

#include <atomic>
#include <thread>
#include <vector>

namespace dpb {
namespace {

int threads_in_parallel_region() {
  int n = 0;
#pragma omp parallel
  {
#pragma omp single
    n = omp_get_num_threads();
  }
  return n;
}

TEST(CpuContext, DeviceScopeSetsThisThreadsBudgetOnly) {
  const int outer = omp_get_max_threads();
  cpu::set_threads_per_device(1);
  std::vector<int> seen(2, 0);
  std::vector<std::thread> workers;
  for (int d = 0; d < 2; ++d) {
    workers.emplace_back([d, &seen] {
      cpu::CpuDeviceScope scope(d);
      seen[static_cast<size_t>(d)] = threads_in_parallel_region();
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(seen[0], 1);
  EXPECT_EQ(seen[1], 1);
  EXPECT_EQ(omp_get_max_threads(), outer) << "the budget of other threads must not change";
  {
    cpu::set_threads_per_device(2);
    cpu::CpuDeviceScope scope(0);
    EXPECT_EQ(omp_get_max_threads(), 2);
  }
  EXPECT_EQ(omp_get_max_threads(), outer);
}

TEST(CpuContext, PrimitiveCacheBuildsOnce) {
  auto& ctx = cpu::context(5);
  int built = 0;
  auto a = ctx.cached<int>("k", [&] { return ++built; });
  auto b = ctx.cached<int>("k", [&] { return ++built; });
  EXPECT_EQ(built, 1);
  EXPECT_EQ(a.get(), b.get());
  // A builder may look up other entries (no self-deadlock).
  auto c = ctx.cached<int>("outer", [&] { return *ctx.cached<int>("inner", [] { return 7; }) + 1; });
  EXPECT_EQ(*c, 8);
}

TEST(CpuContext, InvalidThreadBudgetAndDevice) {
  EXPECT_THROW(cpu::set_threads_per_device(0), Error);
  EXPECT_THROW(cpu::context(1000), Error);
}

}  // namespace
}  // namespace dpb

namespace dpb {
namespace {

// oneDNN's default scratchpad belongs to the thread that created a primitive; ours are
// created with a user scratchpad, so a cached primitive runs from any later thread
// (ranks and replicas come and go) after its creator has exited.
TEST(CpuContext, CachedPrimitivesRunFromThreadsOtherThanTheirCreator) {
  auto step = [](std::vector<float>* out) {
    cpu::CpuDeviceScope scope(5);
    Generator g(3);
    std::vector<float> xv(2 * 8 * 12 * 12), wv(16 * 8 * 3 * 3);
    for (auto& v : xv) v = static_cast<float>(g.normal());
    for (auto& v : wv) v = static_cast<float>(g.normal());
    Tensor x = Tensor::from_vector({2, 8, 12, 12}, xv, Device::cpu(5));
    Tensor w = Tensor::from_vector({16, 8, 3, 3}, wv, Device::cpu(5));
    Tensor y = ops::conv2d_forward(x, w, Tensor(), {1, 1});
    Tensor dw = Tensor::empty(w.shape(), Device::cpu(5)), db;
    ops::conv2d_backward_weights(x, y, dw, db, {1, 1}, false);
    *out = dw.to_vector();
  };
  std::vector<float> first, second;
  std::thread(step, &first).join();   // creates the primitives, then exits
  std::thread(step, &second).join();  // reuses them from a new thread
  EXPECT_EQ(first, second);
}

// A primitive's attributes are its own: the sum post-op of an accumulating matmul must
// not reach primitives created after it.
TEST(CpuContext, OnePrimitivesAttributesDoNotLeakIntoOthers) {
  cpu::CpuDeviceScope scope(0);
  Tensor x = Tensor::full({3, 5}, 1.0f), dy = Tensor::full({3, 4}, 1.0f);
  Tensor dw = Tensor::zeros({4, 5}), db;
  ops::linear_backward_weights(x, dy, dw, db, /*accumulate=*/true);
  Tensor a = Tensor::from_vector({7, 11}, std::vector<float>(77, -2.0f));
  Tensor y = Tensor::full({7, 11}, 5.0f);  // would become 5 + relu(a) with a leaked sum
  ops::relu_forward(a, y);
  EXPECT_EQ(y.to_vector(), std::vector<float>(77, 0.0f));
}

}  // namespace
}  // namespace dpb
