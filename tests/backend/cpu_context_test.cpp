#include "engine/backend/cpu/cpu_context.h"
#include "engine/core/error.h"

#include <gtest/gtest.h>
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
