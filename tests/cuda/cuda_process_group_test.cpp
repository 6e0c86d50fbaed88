// Process groups on GPU tensors: NCCL with one rank (a valid NCCL run on one GPU), and
// Gloo with two ranks (threads) sharing the GPU, GPU tensors staged through the host.
#include <gtest/gtest.h>

#include <thread>

#include "engine/comm/process_group.h"
#include "tests/cuda/cuda_test_util.h"

namespace dpb::comm {
namespace {

const Device kGpu = Device::cuda(0);

Tensor values(int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>((rank + 1) * (i % 5 + 1));
  return Tensor::from_vector({n}, v, kGpu);
}

TEST(CudaProcessGroup, NcclWithOneRank) {
  DPB_REQUIRE_GPU();
  GroupOptions o;
  o.timeout = Millis(30000);
  auto pg = make_process_group("nccl", std::make_shared<MemoryStore>(), 0, 1, o, kGpu);
  EXPECT_EQ(pg->backend(), "nccl");
  Tensor t = values(0, 1000);
  pg->allreduce(t, ReduceOp::sum)->wait();
  EXPECT_EQ(t.to_vector(), values(0, 1000).to_vector());
  Tensor avg = values(0, 1000);
  pg->allreduce(avg, ReduceOp::avg)->wait();
  EXPECT_EQ(avg.to_vector(), values(0, 1000).to_vector());
  Tensor b = values(0, 10);
  pg->broadcast(b, 0)->wait();
  Tensor out = Tensor::empty({10}, kGpu);
  pg->allgather(out, values(0, 10))->wait();
  EXPECT_EQ(out.to_vector(), values(0, 10).to_vector());
  Tensor rs = Tensor::empty({10}, kGpu);
  pg->reduce_scatter(rs, values(0, 10), ReduceOp::sum)->wait();
  EXPECT_EQ(rs.to_vector(), values(0, 10).to_vector());
  pg->barrier()->wait();
}

TEST(CudaProcessGroup, GlooRanksShareOneGpu) {
  DPB_REQUIRE_GPU();
  auto store = std::make_shared<MemoryStore>();
  GroupOptions o;
  o.timeout = Millis(30000);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto pg = make_process_group("gloo", store, r, 2, o, kGpu);
        Tensor t = values(r, 4096);
        pg->allreduce(t, ReduceOp::sum)->wait();
        const auto v = t.to_vector();
        for (int64_t i = 0; i < 4096; ++i)
          if (v[static_cast<size_t>(i)] != 3.0f * static_cast<float>(i % 5 + 1)) throw Error("wrong value");
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace dpb::comm
