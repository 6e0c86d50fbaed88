// CUDA tensors: copies across devices and layouts, dtype and layout conversion,
// fill, and the allocator's memory reuse, pinned batches and out-of-memory message.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "engine/backend/ops.h"
#include "tests/cuda/cuda_test_util.h"
#if DPB_WITH_CUDA
#include <cuda_runtime.h>

#include "engine/backend/cuda/caching_allocator.h"
#include "engine/backend/cuda/device_context.h"
#endif

namespace dpb {
namespace {

using test::random_tensor;
const Device kGpu = Device::cuda(0);

TEST(CudaTensor, CopiesKeepValuesAcrossDevicesLayoutsAndDtypes) {
  DPB_REQUIRE_GPU();
  Tensor x = random_tensor({2, 12, 3, 5}, 1);
  const auto v = x.to_vector();
  EXPECT_EQ(x.to(kGpu).to_vector(), v);
  Tensor nhwc = x.to(kGpu).to_layout(Layout::nhwc);
  EXPECT_EQ(nhwc.layout(), Layout::nhwc);
  EXPECT_EQ(nhwc.to_vector(), v);
  EXPECT_EQ(nhwc.to(Device::cpu()).to_vector(), v);
  EXPECT_EQ(nhwc.to_plain().to_vector(), v);
  // A channel-blocked CPU tensor into a channels-last CUDA tensor and back.
  Tensor blocked = x.to_layout(Layout::nChw8c);
  Tensor into = Tensor::empty(x.shape(), kGpu, DType::f32, Layout::nhwc);
  into.copy_from(blocked);
  EXPECT_EQ(into.to_vector(), v);
  Tensor back = Tensor::empty(x.shape(), Device::cpu(), DType::f32, Layout::nChw8c);
  back.copy_from(into);
  EXPECT_EQ(back.to_vector(), v);
  // bf16 on the GPU rounds exactly as the host conversion does.
  const auto gpu_bf16 = x.to(kGpu).to_dtype(DType::bf16).to_vector();
  const auto host_bf16 = x.to_dtype(DType::bf16).to_vector();
  EXPECT_EQ(gpu_bf16, host_bf16);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(gpu_bf16[i], v[i], 1e-2 * std::fabs(v[i]) + 1e-30);
  Tensor f = Tensor::empty({7, 3}, kGpu, DType::bf16);
  f.fill(1.5f);
  EXPECT_EQ(f.to_vector(), std::vector<float>(21, 1.5f));
  // Slices along dim 0 are views on the GPU too.
  EXPECT_EQ(x.to(kGpu).slice(1, 2).to_vector(), x.slice(1, 2).to_vector());
}

#if DPB_WITH_CUDA
TEST(CudaAllocator, SteadyStateReusesMemoryWithoutCudaMalloc) {
  DPB_REQUIRE_GPU();
  auto step = [] {
    Tensor a = Tensor::empty({1024, 1024}, kGpu), b = Tensor::empty({333}, kGpu), c = Tensor::empty({5, 7}, kGpu);
    a.fill(1.0f);
    b.fill(2.0f);
    c.fill(3.0f);
  };
  step();
  const auto before = cuda::cache_stats(0);
  const auto mem_before = memory_stats(kGpu);
  for (int i = 0; i < 10; ++i) step();
  const auto after = cuda::cache_stats(0);
  EXPECT_EQ(after.device_mallocs, before.device_mallocs) << "the steady state called cudaMalloc";
  EXPECT_GE(after.reuses - before.reuses, 30);
  EXPECT_EQ(memory_stats(kGpu).current_bytes, mem_before.current_bytes);
  EXPECT_GT(memory_stats(kGpu).peak_bytes, 4 << 20);
}

TEST(CudaAllocator, BlockUsedOnAnotherStreamWaitsForIt) {
  DPB_REQUIRE_GPU();
  cuda::set_device(0);
  auto& ctx = cuda::DeviceContext::get(0);
  cudaStream_t other = ctx.copy_stream();
  // Hold the other stream with a host function until released.
  static std::atomic<bool> release{false};
  release = false;
  ASSERT_EQ(cudaLaunchHostFunc(
                other, [](void*) { while (!release.load()) std::this_thread::yield(); }, nullptr),
            cudaSuccess);
  void* p = cuda::cached_malloc(0, 4096, ctx.compute_stream());
  cuda::record_stream(0, p, other);
  cuda::cached_free(0, p);
  void* q = cuda::cached_malloc(0, 4096, ctx.compute_stream());
  EXPECT_NE(q, p) << "a block still in use on another stream was handed out";
  release = true;
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  void* r = cuda::cached_malloc(0, 4096, ctx.compute_stream());
  EXPECT_EQ(r, p) << "the block was not reused once the other stream was done";
  cuda::cached_free(0, q);
  cuda::cached_free(0, r);
}

TEST(CudaAllocator, OutOfMemorySaysWhatWasAskedAndWhatToTry) {
  DPB_REQUIRE_GPU();
  try {
    Tensor huge = Tensor::empty({int64_t{1} << 40}, kGpu);  // 4 TiB
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("CUDA out of memory on cuda:0: asked for 4398046511104 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("smaller --batch"), std::string::npos) << m;
  }
  // The allocator still works afterwards.
  Tensor t = Tensor::full({10}, 2.0f, kGpu);
  EXPECT_EQ(t.to_vector()[9], 2.0f);
}

TEST(CudaAllocator, PinnedBatchIsReusedOnlyAfterItsCopy) {
  DPB_REQUIRE_GPU();
  Tensor host = Tensor::empty_pinned({1 << 20});
  ASSERT_TRUE(host.is_pinned());
  host.fill(4.0f);
  Tensor dev = host.to(kGpu);  // asynchronous: the pinned block stays reserved until done
  const void* addr = host.raw();
  host = Tensor();
  ops::synchronize(kGpu);
  EXPECT_EQ(dev.to_vector()[12345], 4.0f);
  Tensor again = Tensor::empty_pinned({1 << 20});
  EXPECT_EQ(again.raw(), addr) << "the completed block was not reused";
}
#endif

}  // namespace
}  // namespace dpb
