// CUDA kernels against the CPU. Without a GPU (or in a CPU-only build) each test
// skips with the reason; CI on machines without a GPU stays green.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/backend/device_info.h"
#include "engine/backend/ops.h"
#include "engine/core/rng.h"

namespace dpb {
namespace {

// Empty when a GPU is usable, else why not (GTEST_SKIP must run in the test body).
std::string why_no_gpu() {
  const CudaInfo info = cuda_info();
  if (!info.built) return "CUDA backend not built: " + info.unavailable_reason;
  if (info.gpus.empty()) return "no GPU: " + info.unavailable_reason;
  return "";
}

TEST(CudaElementwise, MatchesCpu) {
  if (const auto why = why_no_gpu(); !why.empty()) GTEST_SKIP() << why;
  Generator g(0);
  std::vector<float> a(100003), b(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(g.normal());
    b[i] = static_cast<float>(g.normal());
  }
  const Shape s{static_cast<int64_t>(a.size())};
  Tensor ca = Tensor::from_vector(s, a), cb = Tensor::from_vector(s, b), cout = Tensor::empty(s);
  Tensor ga = ca.to(Device::cuda(0)), gb = cb.to(Device::cuda(0)), gout = Tensor::empty(s, Device::cuda(0));
  ops::add(ca, cb, cout);
  ops::add(ga, gb, gout);
  EXPECT_EQ(gout.to_vector(), cout.to_vector());
  ops::axpy(0.25f, ca, cout);
  ops::axpy(0.25f, ga, gout);
  ops::scale(cout, -3.0f);
  ops::scale(gout, -3.0f);
  const auto x = cout.to_vector(), y = gout.to_vector();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-5f * (1 + std::fabs(x[i])));
}

TEST(CudaInfo, ReportsVersionsWhenBuilt) {
  const CudaInfo info = cuda_info();
  if (!info.built) GTEST_SKIP() << "CUDA backend not built";
  EXPECT_FALSE(info.cudnn_version.empty());
  EXPECT_FALSE(info.nccl_version.empty());
}

}  // namespace
}  // namespace dpb
